"""A run's plan: the resolved, validated experiment and where and how it trains.

:func:`plan` resolves an experiment (paths, precision, devices, dp), fingerprints its data
and resolves its recipe; the :class:`RunPlan` it returns is what every launch of the run
takes (:mod:`orchestrator.run.segment`). Nothing is launched or written.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    ExperimentConfig,
    Fingerprints,
    Launcher,
    fingerprints,
    load_experiment,
    phase_outline,
    validate,
)
from orchestrator.experiment.fingerprints import absolute
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices, choose_dp, discover
from orchestrator.machine.precision import resolve_precision
from orchestrator.run import slurm
from orchestrator.run.init_checkpoint import init_checkpoint_path
from orchestrator.run.init_from import check_init_from
from orchestrator.run.recipe import Recipe, recipe_of
from orchestrator.run.trainer_command import launch_command
from pipeline import canonical_tokenizer_spec, load_tokenizer

NODE_OWN_RESOURCES = ("node_rank", "max_procs", "gpu_ids", "oversubscribe", "timeout_s")
"""Resources each node of a multi-node run sets for itself; the run name ignores them."""


@dataclass(frozen=True)
class RunPlan:
    """A resolved, validated experiment and where and how it trains (module docstring)."""

    config: ExperimentConfig
    """The experiment: paths absolute, ``train.precision`` resolved for this machine."""
    folder: RunFolder
    dp: int
    devices: Devices
    fingerprints: Fingerprints
    """The data contract, the mixture, and their fingerprints (the run's variant)."""
    recipe: Recipe
    init_path: Path | None
    """The initial checkpoint the launch loads; None once the run folder has its own."""

    @property
    def run_name(self) -> str:
        return self.folder.name

    @property
    def contract(self) -> dict[str, Any]:
        return self.fingerprints.contract

    @property
    def mixture(self) -> dict[str, str]:
        return self.fingerprints.mixture

    @property
    def contract_fingerprint(self) -> str:
        return self.fingerprints.contract_fingerprint

    @property
    def variant(self) -> str:
        return self.fingerprints.variant

    @property
    def command(self) -> list[str]:
        """This machine's launch command (:func:`~orchestrator.run.trainer_command.launch_command`)."""
        return launch_command(self)

    @property
    def is_follower(self) -> bool:
        """Whether this machine is node k > 0 of a multi-node run (node 0 keeps the records)."""
        return is_follower_node(self.config)

    def to_dict(self) -> dict[str, Any]:
        """What ``zephon plan`` prints."""
        d, t = self.config.data, self.config.train
        lanes_per_rank = d.lanes // self.dp
        tokens_per_step = d.global_batch_size * d.seq_len
        return {
            "run_name": self.run_name,
            "run_folder": str(self.folder.path.absolute()),
            "device": self.devices.label,
            "free_devices": self.devices.count,
            "dp_size": self.dp,
            "lanes": d.lanes,
            "lanes_per_rank": {
                r: [r * lanes_per_rank + i for i in range(lanes_per_rank)] for r in range(self.dp)
            },
            "steps": t.steps,
            "tokens_per_step": tokens_per_step,
            "tokens": tokens_per_step * t.steps,
            "micro_batches_per_step": d.global_batch_size // (self.dp * t.microbatch_size),
            "precision": t.precision,
            "mixture": self.mixture,
            **({"phases": [o.to_dict() for o in phase_outline(d, t.steps)]} if d.phases else {}),
            "contract": self.contract,
            "contract_fingerprint": self.contract_fingerprint,
            "variant": self.variant,
            **({"varied": self.fingerprints.varied} if self.fingerprints.varied else {}),
            **self.recipe.to_dict(),
            "init_checkpoint": None if self.init_path is None else str(self.init_path),
            "command": self.command,
            "config": self.config.to_dict(),
        }


def is_follower_node(config: ExperimentConfig) -> bool:
    """Whether ``config`` trains node k > 0 of a multi-node run here (node 0 keeps the records)."""
    r = config.resources
    return r.launcher == Launcher.MULTINODE and r.node_rank > 0


def plan(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    dp: int | None = None,
    run_name: str | None = None,
    overrides: list[str] | None = None,
) -> RunPlan:
    """Resolve and validate ``config``, choose dp from the free devices, fingerprint the data."""
    if not isinstance(config, ExperimentConfig) or overrides:
        config = load_experiment(config, overrides)
    config = with_absolute_paths(config)
    validate(config, dp)
    if config.eval.tasks:
        # deferred: lm-eval's task index takes seconds to import; only plans with tasks pay it
        from orchestrator.evaluation.task_lookup import task_manager

        task_dir = config.eval.task_dir
        task_manager(config.eval.tasks, None if task_dir is None else Path(task_dir))
    devices, chosen = placement(config, dp)
    as_written = config
    # Resolved here, on the machine that trains, and stored in the config: a resume keeps it.
    precision = resolve_precision(config.train.precision, devices.kind)
    config = replace(config, train=replace(config.train, precision=precision))
    prints = fingerprints(config, chosen)
    recipe = recipe_of(config)
    if config.train.init_from is not None:  # before anything launches: shapes, vocabulary
        vocab_size = load_tokenizer(config.data.tokenizer).vocab_size
        check_init_from(config, recipe.parameter_shapes, vocab_size)
    name = run_name or _default_run_name(as_written, prints.variant)
    return RunPlan(
        config=config,
        folder=RunFolder(Path(config.runs_root) / name),
        dp=chosen,
        devices=devices,
        fingerprints=prints,
        recipe=recipe,
        init_path=init_checkpoint_path(config, recipe),
    )


def placement(config: ExperimentConfig, dp: int | None) -> tuple[Devices, int]:
    """The devices ``config`` trains on and its dp size: this machine's free devices, or on
    Slurm the allocation's (:func:`orchestrator.run.slurm.allocation`)."""
    r = config.resources
    if r.launcher == Launcher.SLURM:
        allocation = slurm.allocation(config, dp)
        return allocation.devices, allocation.dp
    if r.launcher == Launcher.LOCAL and r.nodes > 1:
        raise ExperimentError(
            [f"resources.nodes={r.nodes} needs resources.launcher=multinode or slurm"]
        )
    devices = discover(r.device, r.gpu_ids)
    return devices, choose_dp(config, devices, dp)


def _default_run_name(as_written: ExperimentConfig, variant: str) -> str:
    """``<name>-<variant>-<time>-<random>``; for a multi-node run, a name every node derives
    alike from the experiment as written (before this machine resolves anything) and its
    rendezvous, not from the time: all nodes meet under one rendezvous id (the name) and
    agree on the run folder."""
    if as_written.resources.launcher != Launcher.MULTINODE:
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        return f"{as_written.name}-{variant[:8]}-{stamp}"
    shared = as_written.to_dict()
    for key in NODE_OWN_RESOURCES:
        del shared["resources"][key]
    digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()
    return f"{as_written.name}-{variant[:8]}-nodes-{digest[:8]}"


def with_absolute_paths(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` naming its tokenizer file, task folder and initial checkpoint by absolute
    path: the trainer starts in another folder (dataset paths are made absolute in the data
    spec)."""
    data = replace(config.data, tokenizer=canonical_tokenizer_spec(config.data.tokenizer))
    task_dir, init_from = config.eval.task_dir, config.train.init_from
    return replace(
        config,
        data=data,
        train=replace(config.train, init_from=None if init_from is None else absolute(init_from)),
        eval=replace(config.eval, task_dir=None if task_dir is None else absolute(task_dir)),
    )
