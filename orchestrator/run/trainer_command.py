"""The trainer's command line: TorchTitan's flags for a run, and the torchrun (or Slurm task)
that starts it.

Every flag Zephon gives TorchTitan comes from here: the recipe's
(:func:`orchestrator.run.recipe.recipe_flags`), then the run's own (:func:`trainer_args`). Commands are argument lists, never shell strings.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.experiment import Launcher
from orchestrator.run.cpu_env import TRAIN_MODULE
from orchestrator.run.initial_weights import checkpoint_digest, initial_load_flags
from orchestrator.run.launch import train_command
from orchestrator.run.recipe import recipe_flags
from orchestrator.run.run_plan import RunPlan

TRAIN_TIMEOUT_S = 600
"""``--comm.train-timeout-seconds``: oversubscribed CPUs can take seconds a step."""


def trainer_args(plan: RunPlan) -> list[str]:
    """TorchTitan's flags for ``plan`` (``zephon-train`` parses them): the recipe's, then the
    run's own. The data config is one file, the run folder's ``data.json``
    (:mod:`orchestrator.experiment.dataspec`, written before each launch); the plan's initial
    checkpoint is the one every run of the recipe loads
    (:mod:`orchestrator.run.initial_weights`), unless the run folder has its own; its
    digest lets the trainer reuse the initial model's evaluation
    (:mod:`orchestrator.evaluation.step_zero_cache`)."""
    config, folder = plan.config, plan.folder
    t, e = config.train, config.eval
    args = [
        *recipe_flags(config),
        *("--dump-folder", str(folder.titan_dir.absolute())),
        *("--dataloader.spec", str(folder.data_spec_path.absolute())),
        *("--checkpoint.enable", "--checkpoint.interval", str(t.checkpoint_interval)),
        *("--checkpoint.keep-latest-k", str(t.keep_checkpoints)),
        *("--metrics.log-freq", "1"),
        *("--comm.train-timeout-seconds", str(TRAIN_TIMEOUT_S)),
    ]
    if plan.init_path is not None:
        args += ["--checkpoint.initial-load-path", str(Path(plan.init_path).absolute())]
        args += initial_load_flags(config)
    if e.enable:
        args += ["--validator.enable", "--validator.freq", str(e.interval)]
        if e.initial:
            args += ["--validator.initial"]
            if plan.init_path is not None and Path(plan.init_path).is_dir():
                # the digest the run records, remembered by the files' stat: no second read
                digest = checkpoint_digest(Path(plan.init_path))
                args += ["--validator.initial-digest", digest]
    if e.tasks:
        args += ["--validator.tasks", ",".join(e.tasks)]  # TorchTitan parses lists as A,B,C
        if e.task_dir is not None:
            args += ["--validator.task-dir", e.task_dir]
        if e.tasks_at_every_eval:
            args += ["--validator.tasks-at-every-eval"]
        if e.task_limit is not None:
            args += ["--validator.task-limit", str(e.task_limit)]
    return args


def launch_command(plan: RunPlan) -> list[str]:
    """This machine's command for ``plan``: its node's torchrun, or on Slurm one task's
    trainer (the job is the launcher)."""
    r, args = plan.config.resources, trainer_args(plan)
    if r.launcher == Launcher.SLURM:
        return slurm_task_command(args)
    rendezvous = None
    if r.nodes > 1 or r.launcher == Launcher.MULTINODE:
        rendezvous = c10d_rendezvous(
            r.nodes, r.node_rank, endpoint=str(r.rdzv_endpoint), run_id=plan.folder.name
        )
    assert plan.dp % r.nodes == 0, f"dp ({plan.dp}) must be a multiple of nodes ({r.nodes})"
    return train_command(plan.dp // r.nodes, args, rendezvous)


def slurm_task_command(args: list[str]) -> list[str]:
    """What each Slurm task runs: the trainer itself with TorchTitan flags ``args``."""
    return [sys.executable, "-m", TRAIN_MODULE, *args]


def c10d_rendezvous(nodes: int, node_rank: int, *, endpoint: str, run_id: str) -> list[str]:
    """torchrun's flags for node ``node_rank`` of ``nodes`` meeting at ``endpoint``
    (``host:port``) under ``run_id``."""
    return [
        f"--nnodes={nodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
    ]
