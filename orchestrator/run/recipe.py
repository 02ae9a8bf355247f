"""A run's recipe: what decides the training arithmetic apart from the data.

Its type (:class:`Recipe`), the TorchTitan flags that make it (:func:`recipe_flags`, the
learning rate an anneal continues from included: :func:`base_learning_rate`), and how it
is resolved and fingerprinted (:func:`recipe_of`: TorchTitan's own parser in a subprocess,
cached under ``$ZEPHON_HOME/recipes``). Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import ExperimentConfig, Precision
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run.cpu_env import trainer_import_env
from pipeline import fingerprint, load_tokenizer
from pipeline.paths import zephon_home

RESOLVER = "orchestrator.titan.recipe_resolver"
RECIPE_PACKAGES = ("torch", "torchtitan", "zephon")
"""Packages whose versions are part of every recipe."""
TRAINER_SOURCES = ("titan/*.py", "evaluation/**/*.py")
"""What the trainer process runs of Zephon (under ``orchestrator/``): part of every recipe."""
_ORCHESTRATOR_DIR = Path(__file__).resolve().parents[1]
LR_FLAG = "--optimizer.param-groups.0.optimizer-kwargs.lr"
"""The peak learning rate's flag (``train.lr``)."""
STEP_FOLDER = re.compile(r"step-(\d+)")
"""A checkpoint's folder: ``step-<N>``."""
SCHEDULE_FIELDS = ("warmup_steps", "decay_ratio", "decay_type", "min_lr_factor", "total_steps")
"""TorchTitan's ``lr_scheduler`` fields that shape the schedule."""


@dataclass(frozen=True)
class Recipe:
    """A resolved recipe: what decides the training arithmetic apart from the data
    (:func:`orchestrator.run.recipe.recipe_of`)."""

    fields: dict[str, Any]
    """TorchTitan's resolved settings that the recipe keeps, and ``versions``."""
    fingerprint: str
    init: dict[str, Any]
    """The part of ``fields`` that decides the initial weights."""
    init_key: str
    parameter_shapes: dict[str, Any] = field(default_factory=dict)
    """The model's parameter shapes by TorchTitan name (``titan``) and, if it has a
    state-dict adapter, by Hugging Face name (``hf``): what ``train.init_from`` must hold."""

    @classmethod
    def of(
        cls, fields: dict[str, Any], init: dict[str, Any], parameter_shapes: dict[str, Any]
    ) -> Recipe:
        """The recipe of TorchTitan's resolved ``fields``, fingerprinted: the whole, and the
        part ``init`` that decides the initial weights (its ``init_key``)."""
        return cls(fields, fingerprint(fields), init, fingerprint(init), parameter_shapes)

    @property
    def parameters(self) -> int | None:
        """The model's parameter count (None: its shapes were not resolved)."""
        shapes = self.parameter_shapes.get("titan")
        return sum(math.prod(shape) for shape in shapes.values()) if shapes else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.fields,
            "recipe_fingerprint": self.fingerprint,
            "init_key": self.init_key,
            "parameters": self.parameters,
        }


def recipe_flags(config: ExperimentConfig) -> list[str]:
    """The TorchTitan flags that make ``config``'s recipe (the trainer gets them too)."""
    d, t = config.data, config.train
    assert t.precision != Precision.AUTO, "plan() resolves train.precision before the recipe"
    return [
        *("--module", config.model.module, "--config", config.model.config),
        *("--tokenizer.name", d.tokenizer, "--training.seq-len", str(d.seq_len)),
        *("--training.local-batch-size", str(t.microbatch_size)),
        *("--training.steps", str(t.steps), "--debug.seed", str(t.seed)),
        *("--training.mixed-precision-param", t.precision),
        *schedule_flags(config),
        *config.model.args,
    ]


def schedule_flags(config: ExperimentConfig) -> list[str]:
    """TorchTitan's flags for the learning rate and schedule fields ``config.train`` sets."""
    t = config.train
    lr = base_learning_rate(Path(t.init_from)) if t.lr_from_init and t.init_from else t.lr
    flags = [] if lr is None else [LR_FLAG, repr(float(lr))]
    for name, value in (
        ("warmup-steps", t.warmup_steps),
        ("decay-ratio", t.decay_ratio),
        ("decay-type", t.decay_type),
        ("min-lr-factor", t.min_lr_factor),
    ):
        if value is not None:
            flags += [f"--lr-scheduler.{name}", str(value)]
    return flags


def base_learning_rate(checkpoint: Path) -> float:
    """The learning rate of the Zephon run that saved ``checkpoint`` (``<run>/titan/
    checkpoint/step-N``) for its step N + 1, the first step it would have trained next.
    Raises ``ExperimentError`` if ``checkpoint`` is not such a folder."""
    step = STEP_FOLDER.fullmatch(checkpoint.name)
    folder = RunFolder(checkpoint.parents[2]) if len(checkpoint.parents) > 2 else None
    try:
        recipe = folder.experiment().recipe if folder is not None and step else None
    except (OSError, ValueError):
        recipe = None
    if recipe is None:
        raise ExperimentError(
            [
                f"train.lr_from_init: {checkpoint} is not a step folder of a Zephon run "
                "(<run>/titan/checkpoint/step-N beside <run>/experiment.json), so its "
                "schedule is unknown; set train.lr instead"
            ]
        )
    # torch and TorchTitan: only plans of such anneals pay their import (~2 s), not every CLI.
    import torch
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

    schedule = {k: v for k, v in recipe["lr_scheduler"].items() if k in SCHEDULE_FIELDS}
    peak = float(recipe["optimizer"]["param_groups"][0]["optimizer_kwargs"]["lr"])
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    schedulers = LRSchedulersContainer.Config(**schedule).build(
        optimizers=[probe], training_steps=int(recipe["training"]["steps"])
    )
    # TorchTitan's step s trains with the factor at s - 1: step N + 1 with the factor at N.
    return peak * schedulers.schedulers[0].lr_lambdas[0](int(step.group(1)))


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
