"""One segment of a run: launch its training, keep its tracking in step, record how it ended.

A run trains in segments (its first launch, then one per resume); each appends to
``run.json``'s ``segments`` its dp size, device, steps and exit status. Node k > 0 of a
multi-node run trains the same segment beside node 0 and keeps no records.
"""

from __future__ import annotations

import errno
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator.errors import DISK_FULL_ERRNOS, DiskFull
from orchestrator.experiment import Launcher, write_data_spec
from orchestrator.experiment.run_record import RunStatus, Segment
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts, slurm
from orchestrator.run.launch import Launch, launch_env, run_local
from orchestrator.run.progress import Progress
from orchestrator.run.result import RunResult, run_result, zephon_command
from orchestrator.run.run_plan import RunPlan
from orchestrator.run.segment_tracking import SegmentTracking, TrackingState
from orchestrator.run.trainer_command import launch_command, trainer_args
from orchestrator.tracking.uris import resolve_uri

if TYPE_CHECKING:
    from orchestrator.tracking.tracker import Tracker


DISK_FULL_LOG_LINE = os.strerror(errno.ENOSPC)
"""What a training that found its disk full says in its log."""


def segment_status(code: int, finished: bool) -> RunStatus:
    """A segment's status from its exit status (negative: stopped by a signal)."""
    if code < 0:
        return RunStatus.INTERRUPTED
    return RunStatus.SUCCEEDED if code == 0 and finished else RunStatus.FAILED


def train_segment(plan: RunPlan, *, tracker: Tracker | None, progress: TextIO | None) -> RunResult:
    """Launch one segment of ``plan``'s training and track it; on a follower node, train
    beside node 0 without records."""
    if plan.is_follower:
        return _train_beside_node_zero(plan, progress)
    folder, config = plan.folder, plan.config
    start_step = folder.last_checkpoint_step() or 0
    started = Segment.new(
        dp_size=plan.dp, start_step=start_step, device=plan.devices.label, started_at=time.time()
    )
    segments = (*folder.state().segments, started)
    write_data_spec(folder.data_spec_path, config.data)  # the trainer's --dataloader.spec
    folder.update_state(
        status=RunStatus.RUNNING,
        segments=segments,
        tracking_uri=resolve_uri(config.tracking.uri, Path.cwd()),
        mlflow_experiment=config.tracking.experiment,
    )
    tracking = SegmentTracking.start(tracker, folder, config.tracking.offline_ok)
    bar = Progress(config.train.steps, progress, label=f"{folder.name} dp={plan.dp} ")

    def on_tick(ticked: RunFolder) -> None:
        bar.update(ticked)
        tracking.sync_now_and_then(ticked)

    try:
        if config.resources.launcher == Launcher.SLURM:
            code = slurm.run_slurm(
                folder,
                trainer_args(plan),
                alloc=slurm.allocation(config, plan.dp),
                params=config.resources.slurm,
                timeout_s=config.resources.timeout_s,
                on_tick=on_tick,
            )
        else:
            code = run_local(_local_launch(plan, on_tick))
    finally:
        bar.close()
    done = max(folder.steps(), default=0)
    status = segment_status(code, done >= config.train.steps)
    ended = started.with_(ended_at=time.time(), returncode=code, end_step=done)
    tail = folder.log_tail() if status == RunStatus.FAILED else ""
    try:  # the records are written to the run's disk, which may be the full one
        folder.update_state(status=status, segments=(*segments[:-1], ended))
        result = _ended(plan, ended, status, tracking, log_tail=tail)
    except OSError as e:
        if e.errno not in DISK_FULL_ERRNOS:
            raise
        raise DiskFull(_disk_full_line(folder)) from e
    if DISK_FULL_LOG_LINE in tail:
        raise DiskFull(_disk_full_line(folder))  # the training's own writes found it full
    return result


def _ended(
    plan: RunPlan,
    ended: Segment,
    status: RunStatus,
    tracking: SegmentTracking,
    *,
    log_tail: str,
) -> RunResult:
    """The result of ``plan``'s segment ``ended`` with ``status`` (``log_tail``: its log's
    end, if it failed): what to do next in its messages, its tracking finished."""
    folder, steps = plan.folder, plan.config.train.steps
    messages = tracking.messages
    if status == RunStatus.INTERRUPTED:
        checkpoint = folder.last_checkpoint_step()
        line = (
            f"{folder.name}: interrupted at step {ended.end_step}/{steps} (last checkpoint: "
            f"{f'step {checkpoint}' if checkpoint else 'none'}); continue: {_resume_command(folder)}"
        )
        interrupts.note_unfinished(line)
        messages.append(line)
    elif status != RunStatus.SUCCEEDED:
        messages.append(
            f"training {status} (exit status {ended.returncode}); log {folder.log_path}:\n"
            f"{log_tail}"
        )
    tracking.finish(folder, status)
    return run_result(folder, ended.returncode, tracking.state, messages)


def _resume_command(folder: RunFolder) -> str:
    return shlex.join([*zephon_command(), "resume", str(folder.path.absolute())])


def _disk_full_line(folder: RunFolder) -> str:
    """What to do when the disk holding ``folder`` is full."""
    return (
        f"{folder.name}: the disk holding {folder.path} is full ({DISK_FULL_LOG_LINE}): "
        f"free space, then {_resume_command(folder)} (it trains on from checkpoint "
        f"step-{folder.last_checkpoint_step() or 0}; nothing written before is lost)"
    )


def _local_launch(plan: RunPlan, on_tick: Callable[[RunFolder], None]) -> Launch:
    """The torchrun of ``plan`` on this machine (node 0 keeps the run folder's records)."""
    r = plan.config.resources
    return Launch(
        [launch_command(plan)],
        launch_env(plan.folder, plan.devices, plan.dp // r.nodes, r.max_procs),
        plan.folder,
        timeout_s=r.timeout_s,
        on_tick=on_tick,
        leader=not plan.is_follower,
        node_rank=r.node_rank,
    )


def _train_beside_node_zero(plan: RunPlan, progress: TextIO | None) -> RunResult:
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
    launch = _local_launch(plan, bar.update)
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
