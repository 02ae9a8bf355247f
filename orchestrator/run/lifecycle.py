"""A run, owned by one object: its folder, its records held in memory, its segments, its
tracking and its result.

:class:`Run` reads ``experiment.json`` and ``run.json`` once (:meth:`Run.open`) or makes
them (:meth:`Run.create`), holds them, and is the one writer of ``run.json``
(:meth:`Run.commit`). Everything else asks it: the tracker mirrors it into MLflow
(:class:`~orchestrator.tracking.mirrored_run.MirroredRun`), a launch records its process
groups or Slurm job through the hooks it is given. The phases that use it are in
:mod:`orchestrator.run.api`.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import (
    DISK_FULL_ERRNOS,
    DiskFull,
    ExperimentError,
    NotTracked,
    TrackingError,
)
from orchestrator.experiment import ExperimentConfig, Launcher, write_data_spec
from orchestrator.experiment.run_record import (
    ExperimentRecord,
    Extension,
    RunState,
    RunStatus,
    Segment,
)
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts
from orchestrator.run.identity_index import AnswerKey, index_run
from orchestrator.run.progress import Progress
from orchestrator.run.recipe import Recipe
from orchestrator.run.result import RunResult
from orchestrator.run.run_plan import RunPlan
from orchestrator.run.segment import (
    DISK_FULL_LOG_LINE,
    SegmentHooks,
    SegmentLauncher,
    disk_full_line,
    launch_segment,
    resume_command,
    segment_status,
)
from orchestrator.run.segment_tracking import SegmentTracking, TrackingState
from orchestrator.tracking.mlflow_status import MLFLOW_STATUS
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import resolve_uri


class Run:
    """One run folder's records, held in memory and written by :meth:`commit` alone."""

    def __init__(
        self, folder: RunFolder, experiment: ExperimentRecord, state: RunState, *, on_disk: bool
    ) -> None:
        """Use :meth:`create` or :meth:`open` (``on_disk``: ``run.json`` holds ``state``)."""
        self._folder = folder
        self._experiment = experiment
        self._state = state
        self._written: dict[str, Any] | None = state.to_dict() if on_disk else None

    def __repr__(self) -> str:
        return f"Run({str(self._folder.path)!r}, status={self._state.status})"

    @classmethod
    def create(
        cls,
        folder: RunFolder,
        experiment: ExperimentRecord,
        *,
        sweep: str | None,
        parent_run_id: str | None,
        tracking_enabled: bool,
        key: AnswerKey | None,
    ) -> Run:
        """A new run in ``folder`` (ExperimentError if it holds one), indexed as the run of
        ``key`` (None: a fresh run, which answers nobody): ``experiment.json`` written now,
        ``run.json`` with its first segment (:meth:`train`)."""
        if folder.exists():
            launcher = experiment.config.get("resources", {}).get("launcher")
            again = (
                " (a multi-node run: pass the same --name on every node)"
                if launcher == Launcher.MULTINODE
                else ""
            )
            raise ExperimentError(
                [f"run folder {folder.path} exists; resume it or pick another name{again}"]
            )
        if key is not None:  # first: an entry whose folder is not there yet names no run
            index_run(folder, key)
        folder.write_experiment(experiment)
        state = RunState.new(
            status=RunStatus.CREATED,
            segments=(),
            sweep=sweep,
            parent_run_id=parent_run_id,
            tracking_enabled=tracking_enabled,
        )
        return cls(folder, experiment, state, on_disk=False)

    @classmethod
    def open(cls, folder: RunFolder) -> Run:
        """The run in ``folder``, its records read once (ExperimentError: not a run folder)."""
        if not folder.exists():
            raise ExperimentError([f"{folder.path} is not a run folder (no experiment.json)"])
        experiment, state = folder.records()
        return cls(folder, experiment, state, on_disk=bool(state.present))

    @property
    def folder(self) -> RunFolder:
        return self._folder

    @property
    def experiment(self) -> ExperimentRecord:
        """``experiment.json``: the experiment, its fingerprints, recipe and identity."""
        return self._experiment

    @property
    def state(self) -> RunState:
        """``run.json`` as last committed (or read)."""
        return self._state

    def commit(self, **changes: Any) -> RunState:
        """Set ``changes`` (fields of :class:`RunState`) and write ``run.json`` now, unless
        it holds them already; the new state."""
        self._state = self._state.with_(**changes)
        written = self._state.to_dict()
        if written != self._written:
            self._folder.write_state(self._state)
            self._written = written
        return self._state

    def extend(self, config: ExperimentConfig, recipe: Recipe) -> None:
        """Record a longer schedule, ``config`` with its ``recipe``: the new steps and
        recipe, and the step it changed at (the learning-rate schedule before it was the
        old one's, so the guard counts it)."""
        record = self._experiment
        if record.recipe:
            extension = Extension.new(
                at_step=self._folder.last_checkpoint_step() or 0,
                from_recipe=record.recipe_fingerprint,
            )
            record = record.with_(**recipe.to_dict(), extended=(*record.extended, extension))
        # Its learning rate followed the shorter schedule up to at_step: no fresh run trains
        # what it holds now, so it answers no experiment (nor, longer, the shorter one).
        record = record.with_(config=config.to_dict()).without("identity")
        self._folder.write_experiment(record)
        self._experiment = record

    # -- a segment ----------------------------------------------------------------------------

    def train(
        self,
        plan: RunPlan,
        *,
        tracker: Tracker | None,
        progress: TextIO | None,
        launcher: SegmentLauncher | None = None,
    ) -> RunResult:
        """Train one segment of ``plan`` (``launcher`` starts it and returns its exit
        status; default :func:`launch_segment`), tracked by ``tracker`` (None: untracked, or offline until ``zephon sync``);
        record how it ended and return the run's result."""
        folder, config = self._folder, plan.config
        started = Segment.new(
            dp_size=plan.dp,
            start_step=folder.last_checkpoint_step() or 0,
            device=plan.devices.label,
            started_at=time.time(),
        )
        segments = (*self._state.segments, started)
        write_data_spec(folder.data_spec_path, config.data)  # the trainer's --dataloader.spec
        # where it is tracked, as the tracker would record it: one write, not two
        where: dict[str, Any] = (
            tracker.destination(self._state)
            if tracker is not None
            else {
                "tracking_uri": resolve_uri(config.tracking.uri, Path.cwd()),
                "mlflow_experiment": config.tracking.experiment,
            }
        )
        self.commit(status=RunStatus.RUNNING, segments=segments, **where)
        tracking = SegmentTracking.start(tracker, self, config.tracking.offline_ok)
        bar = Progress(config.train.steps, progress, label=f"{folder.name} dp={plan.dp} ")

        def on_tick(ticked: RunFolder) -> None:
            bar.update(ticked)
            tracking.sync_now_and_then(self)

        hooks = SegmentHooks(
            on_tick=on_tick,
            on_processes=lambda groups: self.commit(launch_process_groups=groups),
            on_job=lambda job_id: self.commit(slurm_job_id=job_id),
        )
        try:
            code = (launcher or launch_segment)(plan, hooks)
        finally:
            bar.close()
        done = max(folder.steps(), default=0)
        status = segment_status(code, done >= config.train.steps)
        ended = started.with_(ended_at=time.time(), returncode=code, end_step=done)
        tail = folder.log_tail() if status == RunStatus.FAILED else ""
        try:  # the records are written to the run's disk, which may be the full one
            self.commit(status=status, segments=(*segments[:-1], ended))
            result = self._ended(plan, ended, status, tracking, log_tail=tail)
        except OSError as e:
            if e.errno not in DISK_FULL_ERRNOS:
                raise
            raise DiskFull(disk_full_line(folder)) from e
        if DISK_FULL_LOG_LINE in tail:
            raise DiskFull(disk_full_line(folder))  # the training's own writes found it full
        return result

    def _ended(
        self,
        plan: RunPlan,
        ended: Segment,
        status: RunStatus,
        tracking: SegmentTracking,
        *,
        log_tail: str,
    ) -> RunResult:
        """The result of the segment ``ended`` with ``status`` (``log_tail``: its log's end,
        if it failed): what to do next in its messages, its tracking finished."""
        folder, steps = self._folder, plan.config.train.steps
        messages = tracking.messages
        if status == RunStatus.INTERRUPTED:
            checkpoint = folder.last_checkpoint_step()
            line = (
                f"{folder.name}: interrupted at step {ended.end_step}/{steps} (last checkpoint: "
                f"{f'step {checkpoint}' if checkpoint else 'none'}); continue: "
                f"{resume_command(folder)}"
            )
            interrupts.note_unfinished(line)
            messages.append(line)
        elif status != RunStatus.SUCCEEDED:
            messages.append(
                f"training {status} (exit status {ended.returncode}); log {folder.log_path}:\n"
                f"{log_tail}"
            )
        tracking.finish(self, status)
        return self.result(ended.returncode, tracking.state, messages)

    # -- tracking and the result ----------------------------------------------------------------

    def sync(self) -> dict[str, int]:
        """``zephon sync``: send everything pending to the store ``run.json`` names; return
        what was sent.

        Creates the MLflow run if the run trained offline from the start. A run whose
        status is final (succeeded, failed, interrupted) is sent (in full if it
        succeeded; see :meth:`Tracker.finish`) and its MLflow run ended accordingly; a
        ``running`` one is synced as during training (steps whose metrics may still come
        are held back). Raises :class:`NotTracked` (a :class:`TrackingError`) if the run was
        never tracked, :class:`TrackingUnavailable` if the store is down.
        """
        uri = self._state.tracking_uri
        if not uri:
            what = (
                "has no run.json" if not self._state.present else "has no tracking_uri in run.json"
            )
            raise NotTracked(
                f"{self._folder.path} was never tracked ({what}): nothing to sync. Runs "
                "launched with tracking record their tracking URI there; check the folder path."
            )
        tracker = Tracker(uri, self._state.mlflow_experiment or "zephon")
        status = self._state.status
        if status is not None and status in MLFLOW_STATUS:
            return tracker.finish(self, status)
        return tracker.sync(self)

    def caught_up(self) -> RunResult:
        """The result of this succeeded run, its tracking sent in full first: a kill of its
        last sync (or a server down then) left some of it only in the folder."""
        if not (self._state.tracking_enabled and self._state.tracking_uri):
            return self.result(0, TrackingState.OFF, [])
        try:
            self.sync()
        except TrackingError as e:
            message = (
                f"tracking unavailable: {e}; send it later with `zephon sync {self._folder.path}`"
            )
            return self.result(0, TrackingState.PENDING, [message])
        return self.result(0, TrackingState.SYNCED, [])

    def result(self, code: int, tracking: TrackingState, messages: list[str]) -> RunResult:
        """The :class:`RunResult` of this run as it stands (``code``: the last exit status)."""
        folder, experiment = self._folder, self._experiment
        evals = folder.evals()
        return RunResult(
            run_name=folder.name,
            folder=str(folder.path.absolute()),
            status=self._state.status or "unknown",
            returncode=code,
            dp_sizes=self._state.dp_sizes,
            steps=max(folder.steps(), default=0),
            data_fingerprint=folder.data_fingerprint(),
            contract_fingerprint=experiment.contract_fingerprint,
            variant=experiment.variant,
            recipe_fingerprint=experiment.recipe_fingerprint,
            eval=evals[max(evals)] if evals else None,
            mlflow_run_id=self._state.mlflow_run_id,
            tracking=str(tracking),
            messages=messages,
        )
