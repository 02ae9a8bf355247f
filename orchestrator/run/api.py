"""Zephon's Python API for one run; the ``zephon`` CLI (:mod:`orchestrator.cli`) is a thin
layer over it.

Every function checks its inputs before it starts anything and returns plain data
(``to_dict()`` is what the CLI prints as JSON)::

    plan(config)                   resolve, validate, fingerprint; nothing is launched
    run(config)                    plan, then train (torchrun), track (MLflow), evaluate
    resume(folder, dp=...)         continue a run from its last checkpoint, any dp size

    sync(folder)                   send what a run holds and its MLflow run lacks

Comparing runs is :func:`orchestrator.guard.tracked_comparison.compare`.

A run goes through phases, each one function: plan (:func:`plan`: resolved, validated,
fingerprinted, nothing written) -> prepare (the tracking server checked, the warm server
started, the initial weights, whose digest is part of the run's identity) -> answer (under
the identity's lock: an earlier run's result, that run resumed, or a new run) -> launch
(:meth:`Run.train <orchestrator.run.lifecycle.Run.train>`), or on a follower node follow
node 0 (:func:`~orchestrator.run.segment.follow_node_zero`) -> finish (the segment recorded,
its tracking sent, the :class:`RunResult`). The run's records have one owner,
:class:`~orchestrator.run.lifecycle.Run`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    ExperimentConfig,
    Launcher,
    Precision,
    load_experiment,
)
from orchestrator.experiment.run_record import ExperimentRecord, RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts, warm_start
from orchestrator.run.checkpoint_recovery import set_aside_damaged
from orchestrator.run.identity_index import (
    AnswerKey,
    finished_at,
    identity_lock,
    indexed_key,
    indexed_run,
    link_answer,
)
from orchestrator.run.initial_weights import ensure_init_checkpoint
from orchestrator.run.launch import prepare_warm_start, stop_leftover_launch
from orchestrator.run.lifecycle import Run
from orchestrator.run.planner import plan, plan_summary, with_absolute_paths
from orchestrator.run.result import RunResult
from orchestrator.run.run_plan import RunPlan, is_follower_node
from orchestrator.run.segment import follow_node_zero
from orchestrator.run.segment_tracking import TrackingState
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import reachable_uri

__all__ = ["RunPlan", "RunResult", "plan", "plan_summary", "resume", "run", "sync"]


def run(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    dp: int | None = None,
    run_name: str | None = None,
    overrides: list[str] | None = None,
    progress: TextIO | None = None,
    parent_run_id: str | None = None,
    sweep: str | None = None,
    tracking: bool = True,
    fresh: bool = False,
    at_dp: bool = False,
) -> RunResult:
    """Plan, then train ``config`` to the end; see :class:`RunResult`.

    An experiment whose identity (:mod:`orchestrator.run.identity_index`) is that of a run
    under the same ``runs_root`` that succeeded is answered from it, training nothing
    (``answered_from`` names it); one whose run stopped (killed, interrupted, failed)
    resumes that run. ``fresh`` trains a new run all the same. ``at_dp``: a replicate asked
    for at this plan's dp size (``replicate_dp``), answered only by a run of its identity
    that trained at that size.

    Refuses before launch (``ExperimentError``, ``TrackingError``) when the experiment
    is invalid or its tracking server is unreachable (unless ``tracking.offline_ok``).
    A failed launch returns status ``failed`` with the log tail in ``messages``.
    """
    # plan: resolved, validated, fingerprinted; nothing written
    the_plan = plan(config, dp=dp, run_name=run_name, overrides=overrides)
    if interrupts.requested():  # stopped while planning: nothing was created
        raise interrupts.Interrupted()
    if the_plan.is_follower:
        ensure_init_checkpoint(the_plan.config, the_plan.recipe)
        return follow_node_zero(the_plan, progress)
    # prepare, before anything is written under runs_root (the identity's lock included):
    # the tracking server checked, the warm server starting, the initial weights, whose
    # digest is part of the identity the answer looks up
    tracker = _prepare_launch(the_plan, tracking=tracking)
    init = ensure_init_checkpoint(the_plan.config, the_plan.recipe)
    record = ExperimentRecord.new(
        config=the_plan.config.to_dict(),
        **the_plan.fingerprints.to_dict(),
        **the_plan.recipe.to_dict(),
        init_checkpoint=init,
    )
    identity = record.answer_identity()
    record = record.with_(identity=identity)
    new_run = NewRun(record, sweep=sweep, parent_run_id=parent_run_id, tracking=tracking)
    # answer: an earlier run of this identity, or a new run indexed for it. A fresh run is
    # the caller's own: no lock, and it answers nobody, so replicates of one identity
    # (replicate_dp, verify-elastic) train side by side.
    key = None if fresh else AnswerKey(identity, the_plan.dp if at_dp else None)
    runs_root = the_plan.folder.path.parent
    with identity_lock(runs_root, key):  # held to the end: a twin waits
        earlier = (
            None if key is None else indexed_run(runs_root, key) or finished_at(runs_root, key)
        )
        if earlier is None:
            return new_run.train(the_plan, tracker, progress=progress, key=key)
        warm_start.withdraw()  # the speculative server of a launch that is not coming
        return _answer(
            Run.open(earlier), the_plan, tracker=tracker, new_run=new_run, progress=progress
        )


@dataclass(frozen=True)
class NewRun:
    """What a new run is created with, besides its plan: its ``experiment.json`` and where
    it belongs (a sweep, its parent MLflow run, tracked or not)."""

    record: ExperimentRecord
    sweep: str | None
    parent_run_id: str | None
    tracking: bool

    def train(
        self,
        the_plan: RunPlan,
        tracker: Tracker | None,
        *,
        progress: TextIO | None,
        key: AnswerKey | None,
    ) -> RunResult:
        """Create ``the_plan``'s run, indexed under ``key`` (None: a fresh run, not
        indexed), and train it, tracked by ``tracker`` (None: untracked, or offline until
        ``zephon sync``)."""
        new = Run.create(
            the_plan.folder,
            self.record,
            sweep=self.sweep,
            parent_run_id=self.parent_run_id,
            tracking_enabled=self.tracking,
            key=key,
        )
        return new.train(the_plan, tracker=tracker, progress=progress)


def _answer(
    earlier: Run,
    the_plan: RunPlan,
    *,
    tracker: Tracker | None,
    new_run: NewRun,
    progress: TextIO | None,
) -> RunResult:
    """The answer to ``the_plan`` from ``earlier``, the run of its identity: its result if
    it succeeded (with a link in the sweep's parent run, if any); else ``earlier`` resumed
    on this plan's resources and dp."""
    if earlier.state.status != RunStatus.SUCCEEDED:
        recorded = earlier.experiment.experiment_config()
        like = replace(recorded, resources=the_plan.config.resources)
        config = _recorded_config(earlier, steps=None, like=like, overrides=None)
        # this process holds the identity's lock already: resume() would wait on itself
        result = _continue(earlier, config, dp=the_plan.dp, progress=progress, extending=False)
        result.messages.insert(
            0, f"resumed {earlier.folder.name}: an earlier run of this experiment that had stopped"
        )
        result.answered_from = earlier.folder.name
        return result
    if new_run.parent_run_id is not None and tracker is not None:  # the tracker run() opened
        link_answer(tracker, earlier, parent_run_id=new_run.parent_run_id, sweep=new_run.sweep)
    result = earlier.result(
        0,
        TrackingState.SYNCED if earlier.state.mlflow_run_id else TrackingState.OFF,
        [
            f"answered from {earlier.folder.name} ({earlier.folder.path.absolute()}), a "
            "finished run of the same experiment: nothing trained (--fresh trains a new run)"
        ],
    )
    result.answered_from = earlier.folder.name
    return result


def resume(
    folder: str | Path | RunFolder,
    *,
    dp: int | None = None,
    progress: TextIO | None = None,
    steps: int | None = None,
    like: ExperimentConfig | None = None,
    overrides: list[str] | None = None,
) -> RunResult:
    """Continue a run from its last checkpoint on ``dp`` ranks (any divisor of its lanes),
    in the same MLflow run. ``steps`` extends the schedule. ``like``: the experiment the
    caller means (a re-run sweep job): it must be the recorded one but for
    ``resources``, which it replaces (where the run trains now, not what it trains).
    ``overrides``: ``resources.*=value`` changes to the recorded experiment, e.g.
    ``resources.launcher=local resources.nodes=1`` to resume a multi-node run on one node.
    A run that already succeeded (and is not extended) is returned as it is."""
    the_run = Run.open(folder if isinstance(folder, RunFolder) else RunFolder(folder))
    config = _recorded_config(the_run, steps=steps, like=like, overrides=overrides)
    if is_follower_node(config):  # trains beside node 0, which keeps the records
        return follow_node_zero(plan(config, dp=dp, resuming=the_run), progress)
    # The run that answers its identity resumes under its lock: no twin answered by resuming
    # it trains beside it. A fresh run has none.
    with identity_lock(the_run.folder.path.parent, indexed_key(the_run)):
        return _continue(the_run, config, dp=dp, progress=progress, extending=steps is not None)


def _continue(
    the_run: Run,
    config: ExperimentConfig,
    *,
    dp: int | None,
    progress: TextIO | None,
    extending: bool,
) -> RunResult:
    """:func:`resume`'s work on node 0 for the experiment ``config`` recorded in
    ``the_run``; the caller holds the lock of the run's identity (if it has one)."""
    folder, state = the_run.folder, the_run.state
    if state.status == RunStatus.SUCCEEDED and not extending:
        return the_run.caught_up()
    stopped = stop_leftover_launch(folder, state.launch_process_groups)
    if stopped:
        print(
            f"[zephon] stopped the leftover launch of {folder.path} (process groups "
            f"{stopped}): its zephon process had died",
            file=sys.stderr,
        )
    if dp is None and config.resources.launcher == Launcher.SLURM and state.segments:
        dp = state.segments[-1].dp_size  # Slurm: the allocation it had, unless told otherwise
    # before the plan, which loads the initial weights only when no checkpoint is left
    set_aside = set_aside_damaged(folder)
    for line in set_aside:
        print(f"[zephon] {line}", file=sys.stderr)
    resumed = plan(config, dp=dp, resuming=the_run)  # validated here, once
    if config.train.steps != the_run.experiment.planned_steps:
        the_run.extend(config, resumed.recipe)
    tracker = _prepare_launch(resumed, tracking=state.tracking_enabled)
    result = the_run.train(resumed, tracker=tracker, progress=progress)
    result.messages[0:0] = set_aside
    return result


def _recorded_config(
    the_run: Run,
    *,
    steps: int | None,
    like: ExperimentConfig | None,
    overrides: list[str] | None,
) -> ExperimentConfig:
    """The experiment ``the_run`` recorded, with ``like``'s or ``overrides``' resources and
    ``steps`` (see :func:`resume`)."""
    config = the_run.experiment.experiment_config()
    if overrides:
        like = load_experiment((like or config).to_dict(), overrides)
    if like is not None:
        _check_same_experiment(the_run.folder, config, like)
        config = replace(config, resources=like.resources)
    if steps is not None:
        config = replace(config, train=replace(config.train, steps=steps))
    return config


def _check_same_experiment(
    folder: RunFolder, recorded: ExperimentConfig, wanted: ExperimentConfig
) -> None:
    """ExperimentError naming each section where ``wanted`` differs from the recorded run."""
    mine, theirs = recorded.to_dict(), with_absolute_paths(wanted).to_dict()
    if theirs["train"]["precision"] == Precision.AUTO:  # resolved when the run was planned
        theirs["train"]["precision"] = mine["train"]["precision"]
    differing = [
        f"{folder.path} holds another experiment: {key} is {mine[key]} there, {theirs[key]} now"
        for key in mine
        if key != "resources" and mine[key] != theirs.get(key)
    ]
    if differing:
        raise ExperimentError(
            [*differing, "run it with the arguments it was started with, or pick another name"]
        )


def _prepare_launch(the_plan: RunPlan, *, tracking: bool) -> Tracker | None:
    """Start the warm server of a CPU launch now (:mod:`orchestrator.run.warm_start`), so
    that its imports overlap the tracking check and the initial checkpoint (or end a
    speculative one that no launch of this run will use); then check the tracking server:
    a Tracker for it, or None when the run is not tracked or may train offline."""
    prepare_warm_start(the_plan.devices.kind, the_plan.config.resources.launcher)
    if not tracking:
        return None
    t = the_plan.config.tracking
    uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
    return None if uri is None else Tracker(uri, t.experiment)


def sync(folder: str | Path | RunFolder) -> dict[str, Any]:
    """``zephon sync``: send everything ``folder`` holds that its MLflow run lacks
    (:meth:`Run.sync`): the folder, what was sent, and the MLflow run's id."""
    the_run = Run.open(folder if isinstance(folder, RunFolder) else RunFolder(folder))
    sent = the_run.sync()
    return {
        "run_folder": str(the_run.folder.path),
        "sent": sent,
        "mlflow_run_id": the_run.state.mlflow_run_id,
    }
