"""One segment of a run: launch its training, keep its tracking in step, record how it ended.

A run trains in segments (its first launch, then one per resume); each appends to
``run.json``'s ``segments`` its dp size, device, steps and exit status. Tracking is
best-effort during a segment: the run folder is the record, MLflow mirrors it
(:class:`SegmentTracking`), and a run whose tracking lagged says how to catch up.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from orchestrator.errors import TrackingError
from orchestrator.experiment import ExperimentConfig, write_data_spec
from orchestrator.experiment.runfolder import RunFolder, RunStatus
from orchestrator.run import interrupts
from orchestrator.run.devices import Devices
from orchestrator.run.init_checkpoint import InitCheckpoint
from orchestrator.run.launch import Launch, Progress, launch_env, run_local, trainer_args
from orchestrator.run.launch import torchrun_command as build_torchrun_command

if TYPE_CHECKING:
    from orchestrator.tracking.tracker import Tracker

SYNC_EVERY_S = 10.0
"""Seconds between two syncs of a training run's records to its tracking server."""


class TrackingState(StrEnum):
    """Where a run's records stand with its tracking server."""

    OFF = "off"
    """Not tracked."""
    SYNCED = "synced"
    """MLflow holds everything the run folder holds."""
    PENDING = "pending"
    """The server was unreachable: ``zephon sync <folder>`` sends what it lacks."""


@dataclass
class RunResult:
    """What a finished (or failed) run left: status, fingerprints, scores, tracking."""

    run_name: str
    folder: str
    status: str
    returncode: int
    dp_sizes: list[int]
    steps: int
    data_fingerprint: str | None
    contract_fingerprint: str
    variant: str
    recipe_fingerprint: str | None
    eval: dict[str, Any] | None
    mlflow_run_id: str | None
    tracking: str
    """``synced``, ``pending`` (run ``zephon sync``) or ``off`` (:class:`TrackingState`)."""
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SegmentTracking:
    """A segment's tracking: its tracker (None once unreachable), its state, its messages."""

    tracker: Tracker | None
    state: TrackingState
    messages: list[str] = field(default_factory=list)
    last_sync: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, tracker: Tracker | None, folder: RunFolder, offline_ok: bool) -> SegmentTracking:
        """Open the run's MLflow run (tags and parent from the folder, as ``zephon sync``
        does); an unreachable server leaves the records pending and training goes on."""
        if tracker is None:
            return cls(None, TrackingState.PENDING if offline_ok else TrackingState.OFF)
        try:
            tracker.start(folder)
        except TrackingError as e:
            message = f"tracking unavailable, training continues: {e}"
            return cls(None, TrackingState.PENDING, [message])
        return cls(tracker, TrackingState.SYNCED)

    def sync_now_and_then(self, folder: RunFolder) -> None:
        """Send the folder's new records if ``SYNC_EVERY_S`` passed since the last time."""
        if self.tracker is None or time.monotonic() - self.last_sync < SYNC_EVERY_S:
            return
        self.last_sync = time.monotonic()
        try:
            self.tracker.sync(folder)
            self.state = TrackingState.SYNCED
        except TrackingError as e:
            if self.state != TrackingState.PENDING:
                self.messages.append(f"tracking unavailable, metrics kept in {folder.path}: {e}")
            self.state = TrackingState.PENDING

    def finish(self, folder: RunFolder, status: RunStatus) -> None:
        """Send the rest and end the MLflow run with ``status``; say how to catch up if not."""
        if self.tracker is not None:
            try:
                self.tracker.finish(folder, status)
                self.state = TrackingState.SYNCED
            except TrackingError as e:
                self.state = TrackingState.PENDING
                self.messages.append(f"tracking unavailable: {e}")
        if self.state == TrackingState.PENDING:
            self.messages.append(
                f"metrics are kept in {folder.path}; send them with `zephon sync {folder.path}`"
            )


def launch_command(
    config: ExperimentConfig, folder: RunFolder, dp: int, init_path: str | Path | None
) -> list[str]:
    """This machine's command for ``folder``: torchrun, or on Slurm one task's trainer."""
    r = config.resources
    if r.launcher == "slurm":
        from orchestrator.run import slurm

        return slurm.task_command(trainer_args(config, folder, init_path))
    return build_torchrun_command(
        config,
        folder,
        dp,
        nodes=r.nodes,
        node_rank=r.node_rank,
        rdzv_endpoint=r.rdzv_endpoint if r.launcher == "multinode" else None,
        init_path=init_path,
    )


def segment_status(code: int, finished: bool) -> RunStatus:
    """A segment's status from its exit status (negative: stopped by a signal)."""
    if code < 0:
        return RunStatus.INTERRUPTED
    return RunStatus.SUCCEEDED if code == 0 and finished else RunStatus.FAILED


def train_segment(
    folder: RunFolder,
    config: ExperimentConfig,
    dp: int,
    devices: Devices,
    tracker: Tracker | None,
    progress: TextIO | None,
    init: InitCheckpoint | None,
) -> RunResult:
    """Launch one segment of ``folder``'s training on ``dp`` ranks (from the initial
    checkpoint ``init`` unless the folder has its own) and track it."""
    from orchestrator.tracking.uris import resolve_uri

    start_step = folder.last_checkpoint_step() or 0
    segments = [
        *folder.state().get("segments", []),
        {
            "dp_size": dp,
            "start_step": start_step,
            "device": devices.label,
            "started_at": time.time(),
        },
    ]
    write_data_spec(folder.data_spec_path, config.data)  # the trainer's --dataloader.spec
    folder.update_state(
        status=RunStatus.RUNNING,
        segments=segments,
        tracking_uri=resolve_uri(config.tracking.uri, Path.cwd()),
        mlflow_experiment=config.tracking.experiment,
    )
    tracking = SegmentTracking.start(tracker, folder, config.tracking.offline_ok)
    bar = Progress(config.train.steps, progress, label=f"{folder.name} dp={dp} ")

    def on_tick(ticked: RunFolder) -> None:
        bar.update(ticked)
        tracking.sync_now_and_then(ticked)

    code = _launch_segment(folder, config, dp, devices, init, on_tick, bar)
    done = max(folder.steps(), default=0)
    status = segment_status(code, done >= config.train.steps)
    segments[-1].update(ended_at=time.time(), returncode=code, end_step=done)
    folder.update_state(status=status, segments=segments)
    messages = tracking.messages
    if status == RunStatus.INTERRUPTED:
        checkpoint = folder.last_checkpoint_step()
        line = (
            f"{folder.name}: interrupted at step {done}/{config.train.steps} (last checkpoint: "
            f"{f'step {checkpoint}' if checkpoint else 'none'}); continue: "
            f"{shlex.join([*zephon_command(), 'resume', str(folder.path.absolute())])}"
        )
        interrupts.note_unfinished(line)
        messages.append(line)
    elif status != RunStatus.SUCCEEDED:
        messages.append(
            f"training {status} (exit status {code}); log {folder.log_path}:\n{folder.log_tail()}"
        )
    tracking.finish(folder, status)
    return run_result(folder, code, tracking.state, messages)


def _launch_segment(
    folder: RunFolder,
    config: ExperimentConfig,
    dp: int,
    devices: Devices,
    init: InitCheckpoint | None,
    on_tick: Callable[[RunFolder], None],
    bar: Progress,
) -> int:
    """Run the segment's training here or on Slurm; its exit status."""
    r = config.resources
    init_path = None if init is None else init.path
    try:
        if r.launcher == "slurm":
            from orchestrator.run import slurm

            return slurm.run_slurm(
                folder,
                trainer_args(config, folder, init_path),
                slurm.allocation(config, dp),
                r.slurm,
                timeout_s=r.timeout_s,
                on_tick=on_tick,
            )
        launch = Launch(
            [launch_command(config, folder, dp, init_path)],
            launch_env(folder, devices, dp // r.nodes, r.max_procs),
            folder,
            timeout_s=r.timeout_s,
            on_tick=on_tick,
        )
        return run_local(launch)
    finally:
        bar.close()


def zephon_command() -> list[str]:
    """How to call the ``zephon`` CLI of this installation (for the commands Zephon prints)."""
    beside = Path(sys.executable).parent / "zephon"
    found = shutil.which("zephon")
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return ["zephon"]
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "orchestrator.cli"]


def run_result(
    folder: RunFolder, code: int, tracking: TrackingState, messages: list[str]
) -> RunResult:
    """The :class:`RunResult` of ``folder`` as it stands."""
    state = folder.state()
    experiment = folder.experiment()
    evals = folder.evals()
    return RunResult(
        run_name=folder.name,
        folder=str(folder.path.absolute()),
        status=state.get("status", "unknown"),
        returncode=code,
        dp_sizes=[s["dp_size"] for s in state.get("segments", [])],
        steps=max(folder.steps(), default=0),
        data_fingerprint=folder.data_fingerprint(),
        contract_fingerprint=experiment["contract_fingerprint"],
        variant=experiment["variant"],
        recipe_fingerprint=experiment.get("recipe_fingerprint"),
        eval=evals[max(evals)] if evals else None,
        mlflow_run_id=state.get("mlflow_run_id"),
        tracking=str(tracking),
        messages=messages,
    )
