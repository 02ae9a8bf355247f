"""One segment of a run: how it is launched, what it calls back, how its end reads.

A run trains in segments (its first launch, then one per resume); the run that owns them
(:class:`orchestrator.run.lifecycle.Run`) records each. Node k > 0 of a multi-node run
trains the same segment beside node 0 and keeps no records (:func:`follow_node_zero`).
"""

from __future__ import annotations

import errno
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from orchestrator.experiment import Launcher, write_data_spec
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import slurm
from orchestrator.run.launch import Launch, launch_env, run_local
from orchestrator.run.progress import Progress
from orchestrator.run.result import RunResult, zephon_command
from orchestrator.run.run_plan import RunPlan
from orchestrator.run.segment_tracking import TrackingState
from orchestrator.run.trainer_command import launch_command, trainer_args

DISK_FULL_LOG_LINE = os.strerror(errno.ENOSPC)
"""What a training that found its disk full says in its log."""


def segment_status(code: int, finished: bool) -> RunStatus:
    """A segment's status from its exit status (negative: stopped by a signal)."""
    if code < 0:
        return RunStatus.INTERRUPTED
    return RunStatus.SUCCEEDED if code == 0 and finished else RunStatus.FAILED


@dataclass(frozen=True)
class SegmentHooks:
    """What a launch calls while its segment trains (given by the run that owns it)."""

    on_tick: Callable[[RunFolder], None]
    """About once a second while training runs: the progress line, the tracking sync."""
    on_processes: Callable[[tuple[int, ...]], object]
    """With the process groups of the torchruns started here (a later resume stops them
    if this process dies without cleanup)."""
    on_job: Callable[[str], object]
    """With the id of the Slurm job submitted."""


SegmentLauncher = Callable[[RunPlan, SegmentHooks], int]
"""Starts one segment of a plan and returns its exit status (:func:`launch_segment`, or a
stand-in that trains nothing)."""


def launch_segment(plan: RunPlan, hooks: SegmentHooks) -> int:
    """Train one segment of ``plan`` on node 0: a torchrun here, or a Slurm job; its exit
    status (negative: stopped by a signal)."""
    config = plan.config
    if config.resources.launcher == Launcher.SLURM:
        return slurm.run_slurm(
            plan.folder,
            trainer_args(plan),
            alloc=slurm.allocation(config, plan.dp),
            params=config.resources.slurm,
            timeout_s=config.resources.timeout_s,
            on_tick=hooks.on_tick,
            on_job=hooks.on_job,
        )
    return run_local(_local_launch(plan, hooks.on_tick, on_processes=hooks.on_processes))


def resume_command(folder: RunFolder) -> str:
    """The command that continues the run in ``folder``."""
    return shlex.join([*zephon_command(), "resume", str(folder.path.absolute())])


def disk_full_line(folder: RunFolder) -> str:
    """What to do when the disk holding ``folder`` is full."""
    return (
        f"{folder.name}: the disk holding {folder.path} is full ({DISK_FULL_LOG_LINE}): "
        f"free space, then {resume_command(folder)} (it trains on from checkpoint "
        f"step-{folder.last_checkpoint_step() or 0}; nothing written before is lost)"
    )


def _local_launch(
    plan: RunPlan,
    on_tick: Callable[[RunFolder], None],
    *,
    on_processes: Callable[[tuple[int, ...]], object] | None,
) -> Launch:
    """The torchrun of ``plan`` on this machine (``on_processes``: node 0, which keeps the
    run folder's records; None on the other nodes)."""
    r = plan.config.resources
    return Launch(
        [launch_command(plan)],
        launch_env(plan.folder, plan.devices, plan.dp // r.nodes, r.max_procs),
        plan.folder,
        timeout_s=r.timeout_s,
        on_tick=on_tick,
        on_processes=on_processes,
        node_rank=r.node_rank if plan.is_follower else 0,
    )


def follow_node_zero(plan: RunPlan, progress: TextIO | None) -> RunResult:
    """Train node ``node_rank`` > 0 of a multi-node run alongside node 0; keep no records.

    Node 0 owns the run folder's records (``experiment.json``, ``run.json``, the digests,
    tracking). On a file system the nodes share, this node trains in the same folder (its
    ranks' checkpoint shards land beside node 0's, so the run can resume on any nodes);
    otherwise in a local folder of the same name that holds its ranks' files and its log.
    """
    folder, r = plan.folder, plan.config.resources
    folder.path.mkdir(parents=True, exist_ok=True)
    write_data_spec(folder.data_spec_path, plan.config.data)  # the same bytes as node 0's
    bar = Progress(plan.config.train.steps, progress, label=f"{folder.name} node {r.node_rank} ")
    launch = _local_launch(plan, bar.update, on_processes=None)
    try:
        code = run_local(launch)
    finally:
        bar.close()
    status = segment_status(code, code == 0)
    messages = [f"node {r.node_rank} of {r.nodes}: node 0 keeps this run's records and tracking"]
    if status != RunStatus.SUCCEEDED:
        messages.append(f"training {status} (exit status {code}); log {launch.log_path}")
    return RunResult(
        run_name=folder.name,
        folder=str(folder.path.absolute()),
        status=status,
        returncode=code,
        dp_sizes=[plan.dp],
        steps=max(folder.steps(), default=0),
        data_fingerprint=folder.data_fingerprint(),
        contract_fingerprint=plan.contract_fingerprint,
        variant=plan.variant,
        recipe_fingerprint=plan.recipe.fingerprint,
        eval=None,
        mlflow_run_id=None,
        tracking=TrackingState.OFF,
        messages=messages,
    )
