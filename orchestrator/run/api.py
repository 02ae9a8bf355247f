"""Zephon's Python API; the ``zephon`` CLI (:mod:`orchestrator.cli`) is a thin layer over it.

Every function checks its inputs before it starts anything and returns plain
data (``to_dict()`` is what the CLI prints as JSON)::

    plan(config)                   resolve, validate, fingerprint; nothing is launched
    run(config)                    plan, then train (torchrun), track (MLflow), evaluate
    resume(folder, dp=...)         continue a run from its last checkpoint, any dp size
    compare(run_ids | experiment | sweep)   the comparison guard's verdict, logged to MLflow
    sync(folder)                   send what a run folder holds and its tracking lacks
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    ExperimentConfig,
    fingerprints,
    load_experiment,
    phase_outline,
    validate,
    write_data_spec,
)
from orchestrator.experiment.fingerprints import absolute
from orchestrator.experiment.runfolder import RunFolder, RunStatus
from orchestrator.run import interrupts, warm_start
from orchestrator.run.cpu_env import cpu_start_env
from orchestrator.run.devices import Devices, choose_dp, discover
from orchestrator.run.init_checkpoint import (
    InitCheckpoint,
    ensure_init_checkpoint,
    init_checkpoint_path,
)
from orchestrator.run.init_from import check_init_from
from orchestrator.run.launch import (
    Launch,
    Progress,
    launch_env,
    run_local,
    stop_leftover_launch,
)
from orchestrator.run.precision import resolve_precision
from orchestrator.run.recipe import Recipe, recipe_of
from orchestrator.run.segment import (
    RunResult,
    TrackingState,
    launch_command,
    run_result,
    segment_status,
    train_segment,
)
from pipeline import canonical_tokenizer_spec, load_tokenizer

if TYPE_CHECKING:
    from orchestrator.tracking.tracker import Tracker

NODE_OWN_RESOURCES = ("node_rank", "max_procs", "gpu_ids", "oversubscribe", "timeout_s")
"""Resources each node of a multi-node run sets for itself; the run name ignores them."""


@dataclass
class Plan:
    """A resolved, validated experiment and where and how it would run."""

    config: ExperimentConfig
    dp: int
    devices: Devices
    contract: dict[str, Any]
    mixture: dict[str, str]
    contract_fingerprint: str
    variant: str
    recipe: Recipe
    run_name: str
    command: list[str]

    def to_dict(self) -> dict[str, Any]:
        d, t = self.config.data, self.config.train
        lanes_per_rank = d.lanes // self.dp
        tokens_per_step = d.global_batch_size * d.seq_len
        return {
            "run_name": self.run_name,
            "run_folder": str(Path(self.config.runs_root, self.run_name).absolute()),
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
            **self.recipe.to_dict(),
            "init_checkpoint": str(init_checkpoint_path(self.config, self.recipe)),
            "command": self.command,
            "config": self.config.to_dict(),
        }


def plan(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    dp: int | None = None,
    run_name: str | None = None,
    overrides: list[str] | None = None,
) -> Plan:
    """Resolve and validate ``config``, choose dp from the free devices, fingerprint the data."""
    if not isinstance(config, ExperimentConfig) or overrides:
        config = load_experiment(config, overrides)
    config = _with_absolute_paths(config)
    validate(config, dp)
    if config.eval.tasks:  # lm-eval imports in ~2 s: only plans with tasks pay it
        from orchestrator.run.task_lookup import task_manager

        task_dir = config.eval.task_dir
        task_manager(config.eval.tasks, None if task_dir is None else Path(task_dir))
    devices, chosen = _choose_placement(config, dp)
    as_written = config
    # Resolved here, on the machine that trains, and stored in the config: a resume keeps it.
    precision = resolve_precision(config.train.precision, devices.kind)
    config = replace(config, train=replace(config.train, precision=precision))
    prints = fingerprints(config, chosen)
    recipe = recipe_of(config)
    if config.train.init_from is not None:  # before anything launches: shapes, vocabulary
        check_init_from(config, recipe, load_tokenizer(config.data.tokenizer).vocab_size)
    name = run_name or _default_run_name(as_written, prints.variant)
    folder = RunFolder(Path(config.runs_root) / name)
    return Plan(
        config,
        chosen,
        devices,
        prints.contract,
        prints.mixture,
        prints.contract_fingerprint,
        prints.variant,
        recipe,
        name,
        launch_command(config, folder, chosen, init_checkpoint_path(config, recipe)),
    )


def _choose_placement(config: ExperimentConfig, dp: int | None) -> tuple[Devices, int]:
    """The devices ``config`` trains on and its dp size: this machine's free devices, or on
    Slurm the allocation's (:func:`orchestrator.run.slurm.allocation`)."""
    r = config.resources
    if r.launcher == "slurm":
        from orchestrator.run import slurm  # submitit: imported only where Slurm is used

        allocation = slurm.allocation(config, dp)
        return allocation.devices, allocation.dp
    if r.launcher == "local" and r.nodes > 1:
        raise ExperimentError(
            [f"resources.nodes={r.nodes} needs resources.launcher=multinode or slurm"]
        )
    devices = discover(config.resources.device, config.resources.gpu_ids)
    return devices, choose_dp(config, devices, dp)


def _default_run_name(as_written: ExperimentConfig, variant: str) -> str:
    """``<name>-<variant>-<time>-<random>``; for a multi-node run, a name every node derives
    alike from the experiment as written (before this machine resolves anything) and its
    rendezvous, not from the time: all nodes meet under one rendezvous id (the name) and
    agree on the run folder."""
    if as_written.resources.launcher != "multinode":
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        return f"{as_written.name}-{variant[:8]}-{stamp}"
    shared = as_written.to_dict()
    for key in NODE_OWN_RESOURCES:
        del shared["resources"][key]
    digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()
    return f"{as_written.name}-{variant[:8]}-nodes-{digest[:8]}"


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
) -> RunResult:
    """Plan, then train ``config`` to the end; see :class:`RunResult`.

    Refuses before launch (``ExperimentError``, ``TrackingError``) when the experiment
    is invalid or its tracking server is unreachable (unless ``tracking.offline_ok``).
    A failed launch returns status ``failed`` with the log tail in ``messages``.
    """
    the_plan = plan(config, dp=dp, run_name=run_name, overrides=overrides)
    if interrupts.requested():  # stopped while planning: nothing was created
        raise interrupts.Interrupted()
    folder = RunFolder(Path(the_plan.config.runs_root) / the_plan.run_name)
    if _is_follower_node(the_plan.config):
        init = ensure_init_checkpoint(the_plan.config, the_plan.recipe)
        record = {
            "contract_fingerprint": the_plan.contract_fingerprint,
            "variant": the_plan.variant,
        }
        record.update(the_plan.recipe.to_dict())
        return _train_follower_node(
            folder, the_plan.config, the_plan.dp, the_plan.devices, progress, init, record
        )
    if folder.exists():
        again = (
            " (a multi-node run: pass the same --name on every node)"
            if (the_plan.config.resources.launcher == "multinode")
            else ""
        )
        raise ExperimentError(
            [f"run folder {folder.path} exists; resume it or pick another name{again}"]
        )
    _prepare_launch(the_plan.config, the_plan.devices)
    tracker = _open_tracker(the_plan.config) if tracking else None
    init = ensure_init_checkpoint(the_plan.config, the_plan.recipe)
    folder.write_experiment(
        {
            "config": the_plan.config.to_dict(),
            "contract": the_plan.contract,
            "mixture": the_plan.mixture,
            "contract_fingerprint": the_plan.contract_fingerprint,
            "variant": the_plan.variant,
            **the_plan.recipe.to_dict(),
            "init_checkpoint": init.to_dict(),
        }
    )
    folder.update_state(
        status=RunStatus.CREATED,
        segments=[],
        sweep=sweep,
        parent_run_id=parent_run_id,
        tracking_enabled=tracking,
    )
    return train_segment(
        folder, the_plan.config, the_plan.dp, the_plan.devices, tracker, progress, init
    )


def _is_follower_node(config: ExperimentConfig) -> bool:
    """Whether this machine is node k > 0 of a multi-node run (node 0 keeps the records)."""
    return config.resources.launcher == "multinode" and config.resources.node_rank > 0


def _train_follower_node(
    folder: RunFolder,
    config: ExperimentConfig,
    dp: int,
    devices: Devices,
    progress: TextIO | None,
    init: InitCheckpoint | None,
    record: dict[str, Any],
) -> RunResult:
    """Train node ``node_rank`` > 0 of a multi-node run alongside node 0; keep no records.

    Node 0 owns the run folder's records (``experiment.json``, ``run.json``, the digests,
    tracking). On a file system the nodes share, this node trains in the same folder (its
    ranks' checkpoint shards land beside node 0's, so the run can resume on any nodes);
    otherwise in a local folder of the same name that holds its ranks' files and its log.
    """
    r = config.resources
    folder.path.mkdir(parents=True, exist_ok=True)
    write_data_spec(folder.data_spec_path, config.data)  # the same bytes as node 0's
    command = launch_command(config, folder, dp, None if init is None else init.path)
    bar = Progress(config.train.steps, progress, label=f"{folder.name} node {r.node_rank} ")
    launch = Launch(
        [command],
        launch_env(folder, devices, dp // r.nodes, r.max_procs),
        folder,
        timeout_s=r.timeout_s,
        on_tick=bar.update,
        leader=False,
        node_rank=r.node_rank,
    )
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
        dp_sizes=[dp],
        steps=max(folder.steps(), default=0),
        data_fingerprint=folder.data_fingerprint(),
        contract_fingerprint=record["contract_fingerprint"],
        variant=record["variant"],
        recipe_fingerprint=record.get("recipe_fingerprint"),
        eval=None,
        mlflow_run_id=None,
        tracking=TrackingState.OFF,
        messages=messages,
    )


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
    record = folder.experiment()
    config = load_experiment(record["config"])
    if "precision" not in record["config"]["train"]:  # recorded before it: TorchTitan's default
        config = replace(config, train=replace(config.train, precision="bfloat16"))
    if "order" not in record["config"]["data"]:  # recorded before orders had versions: v1
        config = replace(config, data=replace(config.data, order="v1"))
    if overrides:
        like = load_experiment((like or config).to_dict(), overrides)
    if like is not None:
        _check_same_experiment(folder, config, like)
        config = replace(config, resources=like.resources)
    if steps is not None:
        config = replace(config, train=replace(config.train, steps=steps))
    if _is_follower_node(config):  # node 0 resumes the records; this node only trains beside it
        validate(config, dp)
        devices, chosen = _choose_placement(config, dp)
        return _train_follower_node(
            folder, config, chosen, devices, progress, _init_of(folder, config), record
        )
    state = folder.state()
    if state.get("status") == RunStatus.SUCCEEDED and steps is None:
        tracked = TrackingState.SYNCED if state.get("mlflow_run_id") else TrackingState.OFF
        return run_result(folder, 0, tracked, [])
    stopped = stop_leftover_launch(folder)
    if stopped:
        print(
            f"[zephon] stopped the leftover launch of {folder.path} (process groups "
            f"{stopped}): its zephon process had died",
            file=sys.stderr,
        )
    segments = state.get("segments", [])
    if dp is None and config.resources.launcher == "slurm" and segments:
        dp = segments[-1]["dp_size"]  # Slurm: the allocation it had, unless told otherwise
    validate(config, dp)
    if config.train.steps != record["config"]["train"]["steps"]:
        _record_extension(folder, config)
    devices, chosen = _choose_placement(config, dp)
    _prepare_launch(config, devices)
    tracker = _open_tracker(config) if folder.state().get("tracking_enabled", True) else None
    init = _init_of(folder, config)
    return train_segment(folder, config, chosen, devices, tracker, progress, init)


def _record_extension(folder: RunFolder, config: ExperimentConfig) -> None:
    """Record a longer schedule: the new steps and recipe, and the step it changed at (the
    learning-rate schedule before it was the old one's, so the guard counts it)."""
    record = folder.experiment()
    if record.get("recipe"):
        recipe = recipe_of(config)
        extended = {
            "at_step": folder.last_checkpoint_step() or 0,
            "from_recipe": record.get("recipe_fingerprint"),
        }
        record.update(recipe.to_dict(), extended=[*record.get("extended", []), extended])
    record["config"] = config.to_dict()
    folder.write_experiment(record)


def _init_of(folder: RunFolder, config: ExperimentConfig) -> InitCheckpoint | None:
    """The initial checkpoint a resumed run needs: none once it has its own checkpoint (or
    when it was recorded without one); else the recorded one, made again if it is gone."""
    recorded = folder.experiment().get("init_checkpoint")
    if not recorded or folder.last_checkpoint_step() is not None:
        return None
    init = InitCheckpoint(**recorded)
    if Path(init.path).is_dir():
        return init
    made = ensure_init_checkpoint(config, recipe_of(config))
    if made.sha256 != init.sha256:
        raise ExperimentError(
            [
                f"{folder.path} started from initial checkpoint {init.sha256[:12]}, which is "
                f"gone; this machine makes {made.sha256[:12]} for its recipe (another torch or "
                "TorchTitan version?). Start the run again instead of resuming it"
            ]
        )
    return made


def _with_absolute_paths(config: ExperimentConfig) -> ExperimentConfig:
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


def _check_same_experiment(
    folder: RunFolder, recorded: ExperimentConfig, wanted: ExperimentConfig
) -> None:
    """ExperimentError naming each section where ``wanted`` differs from the recorded run."""
    mine, theirs = recorded.to_dict(), _with_absolute_paths(wanted).to_dict()
    if theirs["train"]["precision"] == "auto":  # resolved when the run was planned
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
    if devices.kind == "cpu" and config.resources.launcher != "slurm":
        warm_start.prepare(cpu_start_env())
    else:
        warm_start.withdraw()


def _open_tracker(config: ExperimentConfig) -> Tracker | None:
    """A Tracker for ``config``, checked now; None when offline training is allowed and needed."""
    from orchestrator.tracking.tracker import Tracker
    from orchestrator.tracking.uris import reachable_uri

    t = config.tracking
    uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
    return None if uri is None else Tracker(uri, t.experiment)


def sync(folder: str | Path | RunFolder) -> dict[str, Any]:
    """Send everything ``folder`` holds that its MLflow run lacks (after an outage)."""
    from orchestrator.tracking.tracker import sync_folder

    folder = folder if isinstance(folder, RunFolder) else RunFolder(folder)
    if not folder.exists():
        raise ExperimentError([f"{folder.path} is not a run folder (no experiment.json)"])
    return {
        "run_folder": str(folder.path),
        "sent": sync_folder(folder),
        "mlflow_run_id": folder.state().get("mlflow_run_id"),
    }


def compare(
    run_ids: list[str] | None = None,
    *,
    experiment: str | None = None,
    sweep: str | None = None,
    tracking_uri: str | None = None,
    parent_run_id: str | None = None,
    workdir: str | Path | None = None,
    into_run_id: str | None = None,
    threshold: float = 0.0,
    decide_on: list[str] | None = None,
    confidence: float = 0.95,
    family: str = "holm",
) -> dict[str, Any]:
    """The comparison guard over MLflow runs (by id, or all runs of an experiment or sweep).

    Returns the verdict (``accepted``, ``rows``, ``refusals``, and the decision on every
    pair of variants, ``pairs``, at the decision ``threshold`` in bits per byte, on the mean
    of the held-out domains ``decide_on``, default all), the
    comparison run's id and its artifacts; the verdict is logged to MLflow either way: to
    a new comparison run (a child of ``parent_run_id`` if given), or into the run
    ``into_run_id``. ``confidence``: of each pair's interval (a caller deciding several
    pairs as one question lowers the error of each, e.g. a search's confirmation).
    ``family``: ``holm`` (default), ``bh`` or ``none``, the correction of the pairs'
    decisions for their number (:class:`orchestrator.guard.decisions.Family`).
    """
    from orchestrator import guard
    from orchestrator.tracking.reading import training_run_ids
    from orchestrator.tracking.tracker import Tracker
    from orchestrator.tracking.uris import resolve_uri

    guard.decisions.check_options(threshold, confidence)  # before any run is read
    correction = guard.decisions.family_of(family)
    uri = resolve_uri(tracking_uri, Path.cwd())
    tracker = Tracker(uri, experiment or "zephon")
    if not run_ids:
        run_ids = training_run_ids(uri, experiment=experiment, sweep=sweep)
    runs = guard.load_runs(tracker, list(run_ids))
    comparison = guard.compare(
        runs,
        threshold=threshold,
        confidence=confidence,
        decide_on=decide_on,
        family=correction,
    )
    with tempfile.TemporaryDirectory(prefix="zephon-compare-") as scratch:  # MLflow keeps them
        comparison_run = guard.log_comparison(
            tracker,
            comparison,
            runs,
            parent_run_id=parent_run_id,
            workdir=Path(workdir) if workdir else Path(scratch),
            into_run_id=into_run_id,
        )
    return {
        **comparison.to_json(),
        "comparison_run_id": comparison_run,
        "tracking_uri": uri,
        "markdown": comparison.to_markdown(),
    }
