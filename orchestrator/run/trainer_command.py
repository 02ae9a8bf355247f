"""The trainer's command line: TorchTitan's flags for a run, and the torchrun (or Slurm task)
that starts it.

Every flag Zephon gives TorchTitan is made here: the recipe's (:func:`recipe_flags`, which
:mod:`orchestrator.run.recipe` resolves and fingerprints), then the run's own
(:func:`trainer_args`). Commands are argument lists, never shell strings.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from orchestrator.experiment import ExperimentConfig, Launcher, Precision
from orchestrator.run.base_schedule import base_learning_rate
from orchestrator.run.cpu_env import TRAIN_MODULE
from orchestrator.run.init_from import initial_load_flags
from orchestrator.run.run_plan import RunPlan

LR_FLAG = "--optimizer.param-groups.0.optimizer-kwargs.lr"
"""The peak learning rate's flag (``train.lr``)."""
TRAIN_TIMEOUT_S = 600
"""``--comm.train-timeout-seconds``: oversubscribed CPUs can take seconds a step."""


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


def trainer_args(plan: RunPlan) -> list[str]:
    """TorchTitan's flags for ``plan`` (``zephon-train`` parses them): the recipe's, then the
    run's own. The data config is one file, the run folder's ``data.json``
    (:mod:`orchestrator.experiment.dataspec`, written before each launch); the plan's initial
    checkpoint is the one every run of the recipe loads
    (:mod:`orchestrator.run.init_checkpoint`), unless the run folder has its own."""
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
    r = plan.config.resources
    if r.launcher == Launcher.SLURM:
        return slurm_task_command(trainer_args(plan))
    rendezvous = None
    if r.nodes > 1 or r.launcher == Launcher.MULTINODE:
        rendezvous = c10d_rendezvous(
            r.nodes, r.node_rank, endpoint=str(r.rdzv_endpoint), run_id=plan.folder.name
        )
    assert plan.dp % r.nodes == 0, f"dp ({plan.dp}) must be a multiple of nodes ({r.nodes})"
    return train_command(plan.dp // r.nodes, trainer_args(plan), rendezvous)


def slurm_task_command(args: list[str]) -> list[str]:
    """What each Slurm task runs: the trainer itself with TorchTitan flags ``args``."""
    return [sys.executable, "-m", TRAIN_MODULE, *args]


def train_command(
    procs_per_node: int, args: list[str], rendezvous: list[str] | None = None
) -> list[str]:
    """torchrun of :data:`TRAIN_MODULE` with TorchTitan flags ``args`` on ``procs_per_node``
    processes; ``rendezvous`` (torchrun's flags) defaults to one node on a free local port.

    Also for launches whose flags do not come from a plan (the initial checkpoint, benchmarks).
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *(rendezvous or [f"--master-port={free_port()}"]),
        f"--nproc-per-node={procs_per_node}",
        "-m",
        TRAIN_MODULE,
        *args,
    ]


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


def free_port() -> int:
    """A TCP port free on the loopback interface now (for a rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
