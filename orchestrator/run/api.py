"""Zephon's Python API for one run; the ``zephon`` CLI (:mod:`orchestrator.cli`) is a thin
layer over it.

Every function checks its inputs before it starts anything and returns plain data
(``to_dict()`` is what the CLI prints as JSON)::

    plan(config)                   resolve, validate, fingerprint; nothing is launched
    run(config)                    plan, then train (torchrun), track (MLflow), evaluate
    resume(folder, dp=...)         continue a run from its last checkpoint, any dp size

Comparing runs is :func:`orchestrator.guard.tracked_comparison.compare`; catching up a run's
tracking, :func:`orchestrator.tracking.folder_sync.sync`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import ExperimentError, TrackingError
from orchestrator.experiment import (
    ExperimentConfig,
    Launcher,
    Precision,
    load_experiment,
    validate,
)
from orchestrator.experiment.run_record import (
    ExperimentRecord,
    Extension,
    InitCheckpoint,
    RunStatus,
)
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices
from orchestrator.run import interrupts, warm_start
from orchestrator.run.checkpoint_recovery import set_aside_damaged
from orchestrator.run.identity_index import (
    AnswerKey,
    finished_at,
    identity_lock,
    index_run,
    indexed_key,
    indexed_run,
    link_answer,
)
from orchestrator.run.init_checkpoint import ensure_init_checkpoint
from orchestrator.run.launch import prepare_warm_start, stop_leftover_launch
from orchestrator.run.plan import plan, plan_summary, with_absolute_paths
from orchestrator.run.recipe import recipe_of
from orchestrator.run.result import RunResult, run_result
from orchestrator.run.run_plan import RunPlan, is_follower_node
from orchestrator.run.segment import train_segment
from orchestrator.run.segment_tracking import TrackingState
from orchestrator.tracking.tracker import Tracker, sync_folder
from orchestrator.tracking.uris import reachable_uri

__all__ = ["RunPlan", "RunResult", "plan", "plan_summary", "resume", "run"]


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
    the_plan = plan(config, dp=dp, run_name=run_name, overrides=overrides)
    if interrupts.requested():  # stopped while planning: nothing was created
        raise interrupts.Interrupted()
    if the_plan.is_follower:
        ensure_init_checkpoint(the_plan.config, the_plan.recipe)
        return train_segment(the_plan, tracker=None, progress=progress)
    folder = the_plan.folder
    _prepare_launch(the_plan.config, the_plan.devices)
    # checked before anything is written under runs_root (the identity's lock included)
    tracker = _open_tracker(the_plan.config) if tracking else None
    init = ensure_init_checkpoint(the_plan.config, the_plan.recipe)
    record = ExperimentRecord.new(
        config=the_plan.config.to_dict(),
        **the_plan.fingerprints.to_dict(),
        **the_plan.recipe.to_dict(),
        init_checkpoint=init,
    )
    record = record.with_(identity=record.answer_identity())
    runs_root = folder.path.parent
    new_run = {"sweep": sweep, "parent_run_id": parent_run_id, "tracking": tracking}
    if fresh:  # the caller's own run: no lock, and it answers nobody, so replicates of one
        # identity (replicate_dp, verify-elastic) train side by side
        return _train_new(the_plan, record, init, tracker, progress=progress, key=None, **new_run)
    key = AnswerKey(record.answer_identity(), the_plan.dp if at_dp else None)
    with identity_lock(runs_root, key):  # held to the end: a twin waits
        earlier = indexed_run(runs_root, key) or finished_at(runs_root, key)
        if earlier is None:
            return _train_new(
                the_plan, record, init, tracker, progress=progress, key=key, **new_run
            )
        warm_start.withdraw()  # the speculative server of a launch that is not coming
        return _answer(
            earlier,
            the_plan,
            progress=progress,
            tracker=tracker,
            parent_run_id=parent_run_id,
            sweep=sweep,
        )


def _train_new(
    the_plan: RunPlan,
    record: ExperimentRecord,
    init: InitCheckpoint,
    tracker: Tracker | None,
    *,
    progress: TextIO | None,
    key: AnswerKey | None,
    sweep: str | None,
    parent_run_id: str | None,
    tracking: bool,
) -> RunResult:
    """Create ``the_plan``'s run folder (``experiment.json`` = ``record``), index it under
    ``key`` (None: a fresh run, not indexed), and train it, tracked by ``tracker`` (None: untracked, or
    offline until ``zephon sync``)."""
    folder = the_plan.folder
    if folder.exists():
        again = (
            " (a multi-node run: pass the same --name on every node)"
            if the_plan.config.resources.launcher == Launcher.MULTINODE
            else ""
        )
        raise ExperimentError(
            [f"run folder {folder.path} exists; resume it or pick another name{again}"]
        )
    folder.write_experiment(record)
    folder.update_state(
        status=RunStatus.CREATED,
        segments=[],
        sweep=sweep,
        parent_run_id=parent_run_id,
        tracking_enabled=tracking,
    )
    if key is not None:
        index_run(folder, key)
    return train_segment(
        replace(the_plan, init_path=Path(init.path)), tracker=tracker, progress=progress
    )


def _answer(
    earlier: RunFolder,
    the_plan: RunPlan,
    *,
    progress: TextIO | None,
    tracker: Tracker | None,
    parent_run_id: str | None,
    sweep: str | None,
) -> RunResult:
    """The answer to ``the_plan`` from ``earlier``, the run of its identity: its result if
    it succeeded (with a link in the sweep ``parent_run_id``, if given); else ``earlier``
    resumed on this plan's resources and dp."""
    state = earlier.state()
    if state.status != RunStatus.SUCCEEDED:
        recorded = earlier.experiment().experiment_config()
        like = replace(recorded, resources=the_plan.config.resources)
        config = _recorded_config(earlier, steps=None, like=like, overrides=None)
        # this process holds the identity's lock already: resume() would wait on itself
        result = _continue(earlier, config, dp=the_plan.dp, progress=progress, extending=False)
        result.messages.insert(
            0, f"resumed {earlier.name}: an earlier run of this experiment that had stopped"
        )
        result.answered_from = earlier.name
        return result
    mlflow_run_id = state.mlflow_run_id
    if parent_run_id is not None and tracker is not None:  # the tracker run() opened
        link_answer(tracker, earlier, parent_run_id=parent_run_id, sweep=sweep)
    result = run_result(
        earlier,
        0,
        TrackingState.SYNCED if mlflow_run_id else TrackingState.OFF,
        [
            f"answered from {earlier.name} ({earlier.path.absolute()}), a finished run of the "
            "same experiment: nothing trained (--fresh trains a new run)"
        ],
    )
    result.answered_from = earlier.name
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
    folder = folder if isinstance(folder, RunFolder) else RunFolder(folder)
    if not folder.exists():
        raise ExperimentError([f"{folder.path} is not a run folder (no experiment.json)"])
    config = _recorded_config(folder, steps=steps, like=like, overrides=overrides)
    follower = is_follower_node(config)
    # The run that answers its identity resumes under its lock: no twin answered by resuming
    # it trains beside it. A follower trains beside node 0, which holds it; a fresh run, none.
    key = None if follower else indexed_key(folder)
    if key is None:
        return _continue(folder, config, dp=dp, progress=progress, extending=steps is not None)
    with identity_lock(folder.path.parent, key):
        return _continue(folder, config, dp=dp, progress=progress, extending=steps is not None)


def _continue(
    folder: RunFolder,
    config: ExperimentConfig,
    *,
    dp: int | None,
    progress: TextIO | None,
    extending: bool,
) -> RunResult:
    """:func:`resume`'s work on the experiment ``config`` recorded in ``folder``; the caller
    holds the lock of the run's identity (if it has one)."""
    state = folder.state()
    follower = is_follower_node(config)
    if not follower:  # node 0 keeps the records; a follower only trains beside it
        if state.status == RunStatus.SUCCEEDED and not extending:
            return _caught_up(folder)
        stopped = stop_leftover_launch(folder)
        if stopped:
            print(
                f"[zephon] stopped the leftover launch of {folder.path} (process groups "
                f"{stopped}): its zephon process had died",
                file=sys.stderr,
            )
        if dp is None and config.resources.launcher == Launcher.SLURM and state.segments:
            dp = state.segments[-1].dp_size  # Slurm: the allocation it had, unless told otherwise
    # before the plan, which loads the initial weights only when no checkpoint is left
    set_aside = [] if follower else set_aside_damaged(folder)
    for line in set_aside:
        print(f"[zephon] {line}", file=sys.stderr)
    validate(config, dp)
    if not follower and config.train.steps != folder.experiment().planned_steps:
        _record_extension(folder, config)
    resumed = plan(config, dp=dp, resuming=folder)
    if follower:
        return train_segment(resumed, tracker=None, progress=progress)
    _prepare_launch(config, resumed.devices)
    tracker = _open_tracker(config) if folder.state().tracking_enabled else None
    result = train_segment(resumed, tracker=tracker, progress=progress)
    result.messages[0:0] = set_aside
    return result


def _caught_up(folder: RunFolder) -> RunResult:
    """The result of ``folder``'s succeeded run, its tracking sent in full first: a kill of
    its last sync (or a server down then) left some of it only in the folder."""
    state = folder.state()
    if not (state.tracking_enabled and state.tracking_uri):
        return run_result(folder, 0, TrackingState.OFF, [])
    try:
        sync_folder(folder)
    except TrackingError as e:
        message = f"tracking unavailable: {e}; send it later with `zephon sync {folder.path}`"
        return run_result(folder, 0, TrackingState.PENDING, [message])
    return run_result(folder, 0, TrackingState.SYNCED, [])


def _recorded_config(
    folder: RunFolder,
    *,
    steps: int | None,
    like: ExperimentConfig | None,
    overrides: list[str] | None,
) -> ExperimentConfig:
    """The experiment ``folder`` recorded, with ``like``'s or ``overrides``' resources and
    ``steps`` (see :func:`resume`)."""
    config = folder.experiment().experiment_config()
    if overrides:
        like = load_experiment((like or config).to_dict(), overrides)
    if like is not None:
        _check_same_experiment(folder, config, like)
        config = replace(config, resources=like.resources)
    if steps is not None:
        config = replace(config, train=replace(config.train, steps=steps))
    return config


def _record_extension(folder: RunFolder, config: ExperimentConfig) -> None:
    """Record a longer schedule: the new steps and recipe, and the step it changed at (the
    learning-rate schedule before it was the old one's, so the guard counts it)."""
    record = folder.experiment()
    if record.recipe:
        extension = Extension.new(
            at_step=folder.last_checkpoint_step() or 0, from_recipe=record.recipe_fingerprint
        )
        record = record.with_(**recipe_of(config).to_dict(), extended=(*record.extended, extension))
    # Its learning rate followed the shorter schedule up to at_step: no fresh run trains
    # what it holds now, so it answers no experiment (nor, longer, the shorter one).
    record = record.with_(config=config.to_dict()).without("identity")
    folder.write_experiment(record)


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


def _prepare_launch(config: ExperimentConfig, devices: Devices) -> None:
    """Start the warm server of a CPU launch now (:mod:`orchestrator.run.warm_start`), so
    that its imports overlap the tracking check and the initial checkpoint; end a
    speculative one that no launch of this run will use."""
    prepare_warm_start(devices.kind, config.resources.launcher)


def _open_tracker(config: ExperimentConfig) -> Tracker | None:
    """A Tracker for ``config``, checked now; None when offline training is allowed and needed."""
    t = config.tracking
    uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
    return None if uri is None else Tracker(uri, t.experiment)
