"""Answers from what already ran: a run's identity, and the index of run folders by identity.

A run's identity is what decides its training and its scores: the data variant (contract,
data seeds and mixture), the recipe fingerprint (model, schedule, steps, init seed,
versions), the initial checkpoint's sha256 and the ``eval`` section. The dp size, the run
name, ``resources`` and ``tracking`` are not part of it. An experiment whose identity
matches a run that succeeded is answered from that run (:func:`orchestrator.run.api.run`).

The index is one small file per identity, ``<runs_root>/.identities/<identity>.json``
naming the run folder that trains it: a look-up reads one file however many runs the
root holds. The run that trains an identity holds ``<identity>.lock`` (``flock``) from
its look-up to its end, so an identical submission waits and is then answered, and the
lock of a killed process is released with it (the next submission resumes that run).
A fresh run (``fresh=True``) neither looks up, nor locks, nor is indexed: it answers nobody.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.experiment.runfolder import RunFolder, write_json_atomic
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.names import KIND_ANSWER
from orchestrator.tracking.provenance import answer_tags
from pipeline import fingerprint
from pipeline.filelock import file_lock

if TYPE_CHECKING:
    from orchestrator.tracking.tracker import Tracker

INDEX_DIR = ".identities"
"""The index's folder under ``runs_root``."""


def record_identity(record: dict[str, Any]) -> str:
    """The identity of the run whose ``experiment.json`` is ``record`` (module docstring)."""
    return fingerprint(
        {
            "contract": record["contract_fingerprint"],
            "variant": record["variant"],
            "recipe": record["recipe_fingerprint"],
            "init": (record.get("init_checkpoint") or {}).get("sha256"),
            "eval": record["config"]["eval"],
        }
    )


def identity_lock(runs_root: Path, identity: str) -> contextlib.AbstractContextManager[None]:
    """The lock of ``identity`` under ``runs_root``, to hold in a ``with`` block (module
    docstring)."""
    return file_lock(Path(runs_root) / INDEX_DIR / f"{identity}.lock")


def indexed_run(runs_root: Path, identity: str) -> RunFolder | None:
    """The run folder under ``runs_root`` recorded for ``identity`` (any status), or None:
    none recorded, its folder is gone, or it holds another identity now (extended)."""
    try:
        entry = json.loads((Path(runs_root) / INDEX_DIR / f"{identity}.json").read_text())
    except (OSError, ValueError):
        return None
    folder = RunFolder(Path(runs_root) / entry["run"])
    if not folder.exists() or folder.experiment().get("identity") != identity:
        return None
    return folder


def indexed_identity(folder: RunFolder) -> str | None:
    """``folder``'s identity if the index names ``folder`` for it (the run that answers it;
    not a fresh run beside it), else None."""
    identity = folder.experiment().get("identity")
    found = None if identity is None else indexed_run(folder.path.parent, identity)
    if found is None or found.path.resolve() != folder.path.resolve():
        return None
    return identity


def index_run(folder: RunFolder, identity: str) -> None:
    """Record ``folder`` (under its ``runs_root``) as the run of ``identity``."""
    entry = {"identity": identity, "run": folder.name}
    write_json_atomic(folder.path.parent / INDEX_DIR / f"{identity}.json", entry)


def link_answer(
    tracker: Tracker, earlier: RunFolder, *, parent_run_id: str, sweep: str | None
) -> str:
    """A metric-less MLflow run under ``parent_run_id`` (a sweep's) that points at the run
    ``earlier`` answered the sweep's job with (``zephon.answered_from``); its id. Its kind
    is ``answer``, not ``run``: comparisons count the original alone."""
    link = tracker.new_run(
        earlier.name,
        kind=KIND_ANSWER,
        tags=answer_tags(earlier, sweep),
        parent_run_id=parent_run_id,
    )
    tracker.end_run(link, MlflowStatus.FINISHED)
    return link
