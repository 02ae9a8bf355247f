"""A run's recipe and its fingerprint: what decides the training arithmetic apart from the data.

Resolved by TorchTitan's own parser in a subprocess and cached under
``$ZEPHON_HOME/recipes``. Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import ExperimentConfig
from orchestrator.run.cpu_env import trainer_import_env
from orchestrator.run.run_plan import Recipe
from orchestrator.run.trainer_command import recipe_flags, schedule_flags
from pipeline import fingerprint, load_tokenizer
from pipeline.paths import zephon_home

RESOLVER = "orchestrator.titan.recipe_resolver"
RECIPE_PACKAGES = ("torch", "torchtitan", "zephon")
"""Packages whose versions are part of every recipe."""
TRAINER_SOURCES = ("titan/*.py", "evaluation/**/*.py")
"""What the trainer process runs of Zephon (under ``orchestrator/``): part of every recipe."""
_ORCHESTRATOR_DIR = Path(__file__).resolve().parents[1]


def recipe_of(config: ExperimentConfig) -> Recipe:
    """``config``'s recipe, from the cache or TorchTitan's parser; ``ExperimentError`` naming
    the flag when TorchTitan refuses ``model.args``.

    The cache holds one answer per model config and ``model.args``: the values of Zephon's
    own flags (steps, init seed, precision) are set on it rather than resolved again, since
    ``model.args`` may not set them (:data:`orchestrator.experiment.validation.OWNED_FLAGS`)
    and TorchTitan's answer for them is the flag's value."""
    m, t = config.model, config.train
    versions = {name: _package_version(name) for name in RECIPE_PACKAGES}
    key = fingerprint(
        {
            "model": [m.module, m.config, list(m.args)],
            "schedule": schedule_flags(config),  # resolved by TorchTitan, as model.args
            # Zephon's configs size the model's vocabulary to the tokenizer's.
            "vocab_size": load_tokenizer(config.data.tokenizer).vocab_size,
            "versions": versions,
            "sources": _source_digest(m.module),
        }
    )
    cached = zephon_home() / "recipes" / f"{key}.json"
    try:
        resolved = json.loads(cached.read_text())
        if "shapes" not in resolved and "refused" not in resolved:
            raise ValueError("resolved before parameter shapes were part of the answer")
    except (OSError, ValueError):  # json.JSONDecodeError is a ValueError
        try:
            resolved = _resolve_with_titan(recipe_flags(config))
        except _Refused as refused:  # the same flags are refused again without asking
            resolved = {"refused": str(refused)}
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(resolved, sort_keys=True))
        os.replace(partial, cached)
    if "refused" in resolved:
        raise ExperimentError([resolved["refused"]])
    fields, init = resolved["recipe"], resolved["init"]
    fields["training"].update(steps=t.steps, mixed_precision_param=t.precision)
    fields["debug"]["seed"] = init["debug"]["seed"] = t.seed
    fields["versions"] = init["versions"] = versions
    if t.init_from is not None:  # an anneal: its weights are identified by their digest
        fields["initial_load"] = {"optimizer": t.init_optimizer}
    return Recipe.of(fields, init, resolved["shapes"])


class _Refused(Exception):
    """TorchTitan's parser refused the flags (its message): a stable answer, cached."""


def _resolve_with_titan(flags: list[str]) -> dict[str, Any]:
    env = {**os.environ, **trainer_import_env(), "CUDA_VISIBLE_DEVICES": ""}  # no GPU needed
    done = subprocess.run(
        [sys.executable, "-m", RESOLVER, *flags], capture_output=True, text=True, env=env
    )
    if done.returncode == 2:
        raise _Refused(
            f"model.args: TorchTitan refuses the flags {flags[flags.index('--module') :]}: "
            f"{done.stderr.strip()}. Fix model.args (TorchTitan's own names: python -m "
            "orchestrator.titan.train --help)"
        )
    if done.returncode != 0:
        raise ExperimentError(
            [
                f"model.module={flags[1]!r} / model.config={flags[3]!r}: TorchTitan could not "
                f"build the config (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
            ]
        )
    return json.loads(done.stdout)


def _package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=16)
def _source_digest(module: str) -> str:
    """sha256 of the config module's source and of :data:`TRAINER_SOURCES`; found without
    importing anything (importing the module imports TorchTitan). Once per process: an
    agent's hundreds of plans read the files once."""
    files = sorted(f for pattern in TRAINER_SOURCES for f in _ORCHESTRATOR_DIR.glob(pattern))
    found = _module_file(module)
    if found is not None:
        files.append(found)
    return fingerprint({str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files})


def _module_file(module: str) -> Path | None:
    """The source file of the dotted ``module``, located through ``sys.path``."""
    search: list[str] | None = None
    spec = None
    for part in module.split("."):
        name = part if spec is None else f"{spec.name}.{part}"
        spec = PathFinder.find_spec(name, search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None
