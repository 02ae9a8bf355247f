"""Provenance of a training run: package versions, git revision, its MLflow run's first tags.

Everything here is read from the run's records and this checkout alone, so a run tracked
from its launch and one created later by ``zephon sync`` get the same tags.
"""

from __future__ import annotations

import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

from orchestrator.tracking.mirrored_run import MirroredRun
from orchestrator.tracking.mlflow_names import (
    TAG_ANSWERED_FROM,
    TAG_CONTRACT,
    TAG_DEVICE,
    TAG_GIT,
    TAG_IDENTITY,
    TAG_INIT,
    TAG_KIND,
    TAG_PRECISION,
    TAG_RECIPE,
    TAG_RUN_FOLDER,
    TAG_SWEEP,
    TAG_VARIANT,
    TAG_VERSIONS,
)
from orchestrator.tracking.run_kind import RunKind

VERSIONED_PACKAGES = ("zephon", "torch", "torchtitan", "mlflow", "tiktoken")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a run's results depend on (None if absent)."""
    versions: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_revision(cwd: Path | None = None) -> str:
    """``git describe --always --dirty`` of the checkout holding this file, or ``unknown``."""
    cwd = Path(__file__).resolve().parent if cwd is None else cwd
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    revision = done.stdout.strip()
    return revision if done.returncode == 0 and revision else "unknown"


def run_start_tags(run: MirroredRun) -> dict[str, str]:
    """The tags a training run's MLflow run starts with, from its records alone.

    Fingerprints (contract, variant, recipe, initial checkpoint), precision and the
    folder from ``experiment.json``; the device of the latest launch segment and the sweep
    from ``run.json``; versions and git revision of this checkout. A run
    tracked from its launch and one trained offline and created later by ``zephon sync``
    get the same tags, so ``compare --sweep`` finds both.
    """
    experiment, state = run.experiment, run.state
    segments = state.segments
    return {
        TAG_KIND: RunKind.RUN,
        TAG_CONTRACT: experiment.contract_fingerprint,
        TAG_VARIANT: experiment.variant,
        TAG_RECIPE: experiment.recipe_fingerprint or "",
        TAG_INIT: experiment.init_sha256 or "",
        **({TAG_IDENTITY: experiment.identity} if experiment.identity else {}),
        TAG_RUN_FOLDER: str(run.folder.path.resolve()),
        TAG_VERSIONS: json.dumps(package_versions(), sort_keys=True),
        TAG_GIT: git_revision(),
        TAG_DEVICE: (segments[-1].device or "cpu") if segments else "cpu",
        **({TAG_PRECISION: experiment.precision} if experiment.precision else {}),
        **({TAG_SWEEP: state.sweep} if state.sweep else {}),
    }


def answer_tags(earlier: MirroredRun, sweep: str | None) -> dict[str, str]:
    """The tags of a link to ``earlier``, the run a job of ``sweep`` was answered from: the
    original's MLflow run id, folder and identity (no fingerprints: the link trained nothing)."""
    identity = earlier.experiment.identity
    return {
        TAG_ANSWERED_FROM: earlier.state.mlflow_run_id or "",
        TAG_RUN_FOLDER: str(earlier.folder.path.resolve()),
        **({TAG_IDENTITY: identity} if identity else {}),
        **({TAG_SWEEP: sweep} if sweep else {}),
    }
