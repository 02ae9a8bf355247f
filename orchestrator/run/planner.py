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
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    ExperimentConfig,
    Launcher,
    fingerprints,
    load_experiment,
    validate,
)
from orchestrator.experiment.fingerprints import absolute
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices, choose_dp, discover
from orchestrator.machine.precision import resolve_precision
from orchestrator.run import slurm
from orchestrator.run.initial_weights import check_init_from, init_checkpoint_path, resumed_init
from orchestrator.run.recipe import recipe_of
from orchestrator.run.run_plan import RunPlan
from orchestrator.run.trainer_command import launch_command
from orchestrator.tracking.mirrored_run import MirroredRun
from pipeline import canonical_tokenizer_spec, load_tokenizer

NODE_OWN_RESOURCES = ("node_rank", "max_procs", "gpu_ids", "oversubscribe", "timeout_s")
"""Resources each node of a multi-node run sets for itself; the run name ignores them."""


def plan(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    dp: int | None = None,
    run_name: str | None = None,
    overrides: list[str] | None = None,
    resuming: MirroredRun | None = None,
) -> RunPlan:
    """Resolve and validate ``config``, choose dp from the free devices, fingerprint the data.

    The one constructor of a plan: a new run, a follower node, a service attempt, and with
    ``resuming`` the next segment of that run (``config`` is then the experiment it
    recorded): its recorded fingerprints and name, and the initial checkpoint only while
    the folder has no checkpoint of its own."""
    if not isinstance(config, ExperimentConfig) or overrides:
        config = load_experiment(config, overrides)
    config = with_absolute_paths(config)
    validate(config, dp)
    if config.eval.tasks and resuming is None:  # a resume's tasks were looked up at its start
        # deferred: lm-eval's task index takes seconds to import; only plans with tasks pay it
        from orchestrator.evaluation.task_lookup import task_manager

        task_dir = config.eval.task_dir
        task_manager(config.eval.tasks, None if task_dir is None else Path(task_dir))
    devices, chosen = placement(config, dp)
    as_written = config
    # Resolved here, on the machine that trains, and stored in the config: a resume keeps it.
    precision = resolve_precision(config.train.precision, devices.kind)
    config = replace(config, train=replace(config.train, precision=precision))
    recipe = recipe_of(config)
    if resuming is not None:
        folder, prints = resuming.folder, resuming.experiment.fingerprints
        init = resumed_init(resuming, config, recipe)
        init_path = None if init is None else Path(init.path)
    else:
        prints = fingerprints(config, chosen)
        if config.train.init_from is not None:  # before anything launches: shapes, vocabulary
            vocab_size = load_tokenizer(config.data.tokenizer).vocab_size
            check_init_from(config, recipe.parameter_shapes, vocab_size)
        init_path = init_checkpoint_path(config, recipe)
        name = run_name or _default_run_name(as_written, prints.variant)
        folder = RunFolder(Path(config.runs_root) / name)
    return RunPlan(
        config=config,
        folder=folder,
        dp=chosen,
        devices=devices,
        fingerprints=prints,
        recipe=recipe,
        init_path=init_path,
    )


def plan_summary(the_plan: RunPlan) -> dict[str, Any]:
    """What ``zephon plan`` prints: the plan and this machine's launch command."""
    return {**the_plan.to_dict(), "command": launch_command(the_plan)}


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
    """``config`` naming its tokenizer files (the run's and the token files' declared ones),
    task folder and initial checkpoint by absolute path: the trainer starts in another folder (dataset paths are made absolute in the data
    spec)."""
    data = replace(
        config.data,
        tokenizer=canonical_tokenizer_spec(config.data.tokenizer),
        pretokenized={
            name: replace(declared, tokenizer=canonical_tokenizer_spec(declared.tokenizer))
            for name, declared in config.data.pretokenized.items()
        },
    )
    task_dir, init_from = config.eval.task_dir, config.train.init_from
    return replace(
        config,
        data=data,
        train=replace(config.train, init_from=None if init_from is None else absolute(init_from)),
        eval=replace(config.eval, task_dir=None if task_dir is None else absolute(task_dir)),
    )
