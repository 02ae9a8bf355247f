"""Zephon's Python API; the ``zephon`` CLI (:mod:`orchestrator.cli`) is a thin layer over it.

Every function checks its inputs before it starts anything and returns plain
data (``to_dict()`` is what the CLI prints as JSON)::

    plan(config)                   resolve, validate, fingerprint; nothing is launched
    run(config)                    plan, then train (torchrun), track (MLflow), evaluate
    resume(folder, dp=...)         continue a run from its last checkpoint, any dp size
    compare(run_ids | experiment | sweep)   the comparison guard's verdict, logged to MLflow
    verify_elastic(config, dp, dp) train on one dp size, resume on another, check every digest
    sync(folder)                   send what a run folder holds and its tracking lacks
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import ExperimentError, LaunchError, TrackingError
from orchestrator.experiment import (
    ExperimentConfig,
    ResourcesSection,
    fingerprints,
    load_experiment,
    split_step_problems,
    validate,
    write_data_spec,
)
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import interrupts, warm_start
from orchestrator.run.devices import Devices, choose_dp, discover
from orchestrator.run.init_checkpoint import (
    InitCheckpoint,
    ensure_init_checkpoint,
    init_checkpoint_path,
)
from orchestrator.run.launch import (
    Launch,
    Progress,
    cpu_start_env,
    launch_env,
    run_local,
    stop_leftover_launch,
    trainer_args,
)
from orchestrator.run.launch import torchrun_command as build_torchrun_command
from orchestrator.run.precision import resolve_precision
from orchestrator.run.recipe import Recipe, recipe_of

SYNC_EVERY_S = 10.0
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
            "contract": self.contract,
            "contract_fingerprint": self.contract_fingerprint,
            "variant": self.variant,
            **self.recipe.to_dict(),
            "init_checkpoint": str(init_checkpoint_path(self.recipe)),
            "command": self.command,
            "config": self.config.to_dict(),
        }


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
    """``synced``, ``pending`` (run ``zephon sync``) or ``off``."""
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    validate(config, dp)
    devices, chosen = _placement(config, dp)
    as_written = config
    # Resolved here, on the machine that trains, and stored in the config: a resume keeps it.
    precision = resolve_precision(config.train.precision, devices.kind)
    config = replace(config, train=replace(config.train, precision=precision))
    prints = fingerprints(config, chosen)
    recipe = recipe_of(config)
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
        _command(config, folder, chosen, init_checkpoint_path(recipe)),
    )


def _placement(config: ExperimentConfig, dp: int | None) -> tuple[Devices, int]:
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


def _command(
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
    if _follows(the_plan.config):
        init = ensure_init_checkpoint(the_plan.config, the_plan.recipe)
        record = {
            "contract_fingerprint": the_plan.contract_fingerprint,
            "variant": the_plan.variant,
        }
        record.update(the_plan.recipe.to_dict())
        return _follow(
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
    tracker = _tracker(the_plan.config) if tracking else None
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
        status="created",
        segments=[],
        sweep=sweep,
        parent_run_id=parent_run_id,
        tracking_enabled=tracking,
    )
    return _train(folder, the_plan.config, the_plan.dp, the_plan.devices, tracker, progress, init)


def _follows(config: ExperimentConfig) -> bool:
    """Whether this machine is node k > 0 of a multi-node run (node 0 keeps the records)."""
    return config.resources.launcher == "multinode" and config.resources.node_rank > 0


def _follow(
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
    command = _command(config, folder, dp, None if init is None else init.path)
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
    status = _status(code, code == 0)
    messages = [f"node {r.node_rank} of {r.nodes}: node 0 keeps this run's records and tracking"]
    if status != "succeeded":
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
        tracking="off",
        messages=messages,
    )


def _status(code: int, finished: bool) -> str:
    """A segment's status from its exit status (negative: stopped by a signal)."""
    if code < 0:
        return "interrupted"
    return "succeeded" if code == 0 and finished else "failed"


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
    if overrides:
        like = load_experiment((like or config).to_dict(), overrides)
    if like is not None:
        _check_same_experiment(folder, config, like)
        config = replace(config, resources=like.resources)
    if steps is not None:
        config = replace(config, train=replace(config.train, steps=steps))
    if _follows(config):  # node 0 resumes the records; this node only trains beside it
        validate(config, dp)
        devices, chosen = _placement(config, dp)
        return _follow(folder, config, chosen, devices, progress, _init_of(folder, config), record)
    state = folder.state()
    if state.get("status") == "succeeded" and steps is None:
        return _result(folder, 0, "synced" if state.get("mlflow_run_id") else "off", [])
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
    devices, chosen = _placement(config, dp)
    _prepare_launch(config, devices)
    tracker = _tracker(config) if folder.state().get("tracking_enabled", True) else None
    return _train(folder, config, chosen, devices, tracker, progress, _init_of(folder, config))


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


def _check_same_experiment(
    folder: RunFolder, recorded: ExperimentConfig, wanted: ExperimentConfig
) -> None:
    """ExperimentError naming each section where ``wanted`` differs from the recorded run."""
    mine, theirs = recorded.to_dict(), wanted.to_dict()
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
    that its imports overlap the tracking check and the initial checkpoint."""
    if devices.kind == "cpu" and config.resources.launcher != "slurm":
        warm_start.prepare(cpu_start_env())


def _tracker(config: ExperimentConfig) -> Any:
    """A Tracker for ``config``, checked now; None when offline training is allowed and needed."""
    from orchestrator.tracking.tracker import Tracker, reachable_uri

    t = config.tracking
    uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
    return None if uri is None else Tracker(uri, t.experiment)


def _train(
    folder: RunFolder,
    config: ExperimentConfig,
    dp: int,
    devices: Devices,
    tracker: Any,
    progress: TextIO | None,
    init: InitCheckpoint | None,
) -> RunResult:
    """Launch one segment of ``folder``'s training on ``dp`` ranks (from the initial
    checkpoint ``init`` unless the folder has its own) and track it."""
    from orchestrator.tracking.tracker import resolve_uri

    state = folder.state()
    messages: list[str] = []
    start_step = folder.last_checkpoint_step() or 0
    segments = [
        *state.get("segments", []),
        {
            "dp_size": dp,
            "start_step": start_step,
            "device": devices.label,
            "started_at": time.time(),
        },
    ]
    write_data_spec(folder.data_spec_path, config.data)  # the trainer's --dataloader.spec
    folder.update_state(
        status="running",
        segments=segments,
        tracking_uri=resolve_uri(config.tracking.uri, Path.cwd()),
        mlflow_experiment=config.tracking.experiment,
    )
    tracking = "off" if tracker is None else "synced"
    if tracker is not None:
        try:
            tracker.start(folder)  # tags and parent from the folder, as `zephon sync` does
        except TrackingError as e:
            messages.append(f"tracking unavailable, training continues: {e}")
            tracker, tracking = None, "pending"
    if tracker is None and config.tracking.offline_ok and tracking == "off":
        tracking = "pending"

    bar = Progress(config.train.steps, progress, label=f"{folder.name} dp={dp} ")
    last_sync = [time.monotonic()]

    def tick(f: RunFolder) -> None:
        nonlocal tracking
        bar.update(f)
        if tracker is not None and time.monotonic() - last_sync[0] >= SYNC_EVERY_S:
            last_sync[0] = time.monotonic()
            try:
                tracker.sync(f)
                tracking = "synced"
            except TrackingError as e:
                if tracking != "pending":
                    messages.append(f"tracking unavailable, metrics kept in {f.path}: {e}")
                tracking = "pending"

    r = config.resources
    init_path = None if init is None else init.path
    try:
        if r.launcher == "slurm":
            from orchestrator.run import slurm

            code = slurm.run_slurm(
                folder,
                trainer_args(config, folder, init_path),
                slurm.allocation(config, dp),
                r.slurm,
                timeout_s=r.timeout_s,
                on_tick=tick,
            )
        else:
            launch = Launch(
                [_command(config, folder, dp, init_path)],
                launch_env(folder, devices, dp // r.nodes, r.max_procs),
                folder,
                timeout_s=r.timeout_s,
                on_tick=tick,
            )
            code = run_local(launch)
    finally:
        bar.close()
    done = max(folder.steps(), default=0)
    status = _status(code, done >= config.train.steps)
    segments[-1].update(ended_at=time.time(), returncode=code, end_step=done)
    state = folder.update_state(status=status, segments=segments)
    if status == "interrupted":
        checkpoint = folder.last_checkpoint_step()
        line = (
            f"{folder.name}: interrupted at step {done}/{config.train.steps} (last checkpoint: "
            f"{f'step {checkpoint}' if checkpoint else 'none'}); continue: "
            f"{shlex.join([*zephon_command(), 'resume', str(folder.path.absolute())])}"
        )
        interrupts.note_unfinished(line)
        messages.append(line)
    elif status != "succeeded":
        messages.append(
            f"training {status} (exit status {code}); log {folder.log_path}:\n{folder.log_tail()}"
        )
    if tracker is not None:
        try:
            tracker.finish(folder, status)
            tracking = "synced"
        except TrackingError as e:
            tracking = "pending"
            messages.append(f"tracking unavailable: {e}")
    if tracking == "pending":
        messages.append(
            f"metrics are kept in {folder.path}; send them with `zephon sync {folder.path}`"
        )
    return _result(folder, code, tracking, messages)


def zephon_command() -> list[str]:
    """How to call the ``zephon`` CLI of this installation (for the commands Zephon prints)."""
    beside = Path(sys.executable).parent / "zephon"
    found = shutil.which("zephon")
    if found and (not beside.exists() or Path(found).resolve() == beside.resolve()):
        return ["zephon"]
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "orchestrator.cli"]


def _result(folder: RunFolder, code: int, tracking: str, messages: list[str]) -> RunResult:
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
        tracking=tracking,
        messages=messages,
    )


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
) -> dict[str, Any]:
    """The comparison guard over MLflow runs (by id, or all runs of an experiment or sweep).

    Returns the verdict (``accepted``, ``rows``, ``refusals``, and the decision on every
    pair of variants, ``pairs``, at the decision ``threshold`` in bits per byte, on the mean
    of the held-out domains ``decide_on``, default all), the
    comparison run's id and its artifacts; the verdict is logged to MLflow either way: to
    a new comparison run (a child of ``parent_run_id`` if given), or into the run
    ``into_run_id``. ``confidence``: of each pair's interval (a caller deciding several
    pairs as one question lowers the error of each, e.g. a search's confirmation).
    """
    from orchestrator import guard
    from orchestrator.tracking.tracker import Tracker, resolve_uri, training_run_ids

    guard.decisions.check_options(threshold, confidence)  # before any run is read
    uri = resolve_uri(tracking_uri, Path.cwd())
    tracker = Tracker(uri, experiment or "zephon")
    if not run_ids:
        run_ids = training_run_ids(uri, experiment=experiment, sweep=sweep)
    runs = guard.load_runs(tracker, list(run_ids))
    comparison = guard.compare(
        runs, threshold=threshold, confidence=confidence, decide_on=decide_on
    )
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="zephon-compare-"))
    comparison_run = guard.log_comparison(
        tracker,
        comparison,
        runs,
        parent_run_id=parent_run_id,
        workdir=work,
        into_run_id=into_run_id,
    )
    return {
        **comparison.to_json(),
        "comparison_run_id": comparison_run,
        "tracking_uri": uri,
        "markdown": comparison.to_markdown(),
    }


def verify_elastic(
    config: ExperimentConfig | dict[str, Any] | str | Path,
    *,
    first_dp: int,
    second_dp: int,
    split_step: int | None = None,
    overrides: list[str] | None = None,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Train to ``split_step`` on ``first_dp`` ranks and to the end uninterrupted on
    ``first_dp``; resume the first on ``second_dp``; report whether every digest matches.

    The two first runs are independent: where the free devices hold both, they train side by
    side, each on half of them (CPU: half the cores; CUDA: half the GPUs).
    """
    base = load_experiment(config, overrides)
    steps = base.train.steps
    problems = split_step_problems(steps, split_step)
    if problems:
        raise ExperimentError(problems)
    split = steps // 2 if split_step is None else split_step
    base = replace(
        base,
        train=replace(base.train, checkpoint_interval=split, keep_checkpoints=0),
        eval=replace(base.eval, enable=False),
    )
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    short = replace(base, train=replace(base.train, steps=split))
    jobs = {"ref": base, "split": short}
    halves = _halves(base.resources, first_dp)
    if halves is not None:  # room for both at once, and they are independent
        jobs = {n: replace(c, resources=h) for (n, c), h in zip(jobs.items(), halves, strict=True)}
    with ThreadPoolExecutor(1 if halves is None else 2) as pool:
        futures = {
            n: pool.submit(
                run,
                c,
                dp=first_dp,
                run_name=f"{base.name}-verify-{stamp}-{n}",
                progress=progress,
                tracking=False,
            )
            for n, c in jobs.items()
        }
        reference, first = futures["ref"].result(), futures["split"].result()
    if first.status != "succeeded" or reference.status != "succeeded":
        raise LaunchError("\n".join(reference.messages + first.messages))
    # like=short: on the resources of the experiment, not of the half it trained on
    resumed = resume(Path(first.folder), dp=second_dp, progress=progress, steps=steps, like=short)
    want = RunFolder(reference.folder).digests()
    got = RunFolder(resumed.folder).digests()
    mismatched = sorted(s for s in want if got.get(s) != want[s])
    return {
        "ok": not mismatched and resumed.status == "succeeded",
        "first_dp": first_dp,
        "second_dp": second_dp,
        "split_step": split,
        "steps": steps,
        "matched_steps": len(want) - len(mismatched),
        "first_mismatch": mismatched[0] if mismatched else None,
        "reference_folder": reference.folder,
        "resumed_folder": resumed.folder,
        "messages": resumed.messages,
    }


def _halves(r: ResourcesSection, dp: int) -> tuple[ResourcesSection, ResourcesSection] | None:
    """``r`` split into two halves of this node's free devices that each hold ``dp``
    processes (CPU: cores, CUDA: GPUs); None where the devices do not hold two."""
    if r.nodes != 1 or r.launcher != "local":
        return None
    devices = discover(r.device, r.gpu_ids)
    if devices.kind == "cuda":
        ids = list(devices.gpu_ids)
        if len(ids) < 2 * dp:
            return None
        return replace(r, gpu_ids=ids[:dp]), replace(r, gpu_ids=ids[dp : 2 * dp])
    cores = r.max_procs or devices.count
    if cores < 2 * dp:
        return None
    return replace(r, max_procs=cores // 2), replace(r, max_procs=cores // 2)
