"""The ``zephon_mix`` Hydra sweeper: data-mix variants x other sweeps x replicates, one
parent MLflow run, the comparison guard at the end.

Every job is composed and validated before any is launched; the sweep fails (Hydra exits
non-zero) when a job fails or the guard refuses, after everything is logged. With
``hydra.sweeper.mix.search`` set it searches instead (:mod:`sweeps.search`).

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from orchestrator.errors import ExperimentError, SweepFailed
from orchestrator.experiment import validate
from orchestrator.experiment.runfolder import RunFolder, RunStatus
from orchestrator.guard.comparison import SEED_SETTINGS
from orchestrator.guard.decisions import family_of
from orchestrator.guard.ladder import ladder, ladder_markdown
from orchestrator.guard.tracked import compare_tracked
from orchestrator.run import interrupts
from sweeps.config import experiment_from
from sweeps.mixes import MixSpace, describe, mix_label, override_strings, variants

log = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"


@dataclass
class MixSweeperConf:
    """``hydra/sweeper=zephon_mix``; set fields as ``hydra.sweeper.<field>=...``."""

    _target_: str = "hydra_plugins.zephon.MixSweeper"
    mix: Any = field(default_factory=lambda: _to_untyped_data(MixSpace()))
    """The mixes to try: the fields of :class:`sweeps.mixes.MixSpace` (explicit list,
    simplex grid, Dirichlet draws, perturbations, bounds). Untyped, so that
    ``mix.max={i18n:0.5}`` and ``mix.explicit=[{code:1,docs:1}]`` work from the command
    line; ``MixSpace`` checks the values."""
    replicate_dp: list[int] = field(default_factory=list)
    """Run every variant on each of these dp sizes; empty: once, dp chosen by the launcher."""
    replicate_seeds: list[int] = field(default_factory=list)
    """Run every variant under each of these seeds, one seed setting ``data.seed``,
    ``data.shuffle_seed`` and ``train.seed`` (data order and initial weights), so that
    variants under one seed pair up in the comparison; empty: the configured seeds."""
    replicate_models: list[str] = field(default_factory=list)
    """Train every variant at each of these model presets (``conf/model/<name>.yaml``, small
    to large), with the same data contract, seeds and dp sizes: each size is compared on its
    own, then the sizes' decisions side by side (:mod:`orchestrator.guard.ladder`)."""
    params: dict[str, str] = field(default_factory=dict)
    """Ordinary sweeps, as on the command line: ``{train.steps: "10,20"}``."""
    compare: bool = True
    """Run the comparison guard over the sweep's runs at the end."""
    family: str = "holm"
    """The comparison's correction of its decisions for the number of pairs: ``holm``,
    ``bh`` or ``none`` (``zephon compare --family``)."""
    resume: str | None = None
    """Continue the interrupted sweep of this name (run with the arguments it was started
    with): finished jobs are kept, unfinished ones resume from their last checkpoint,
    the rest start; the same parent and child MLflow runs."""


@dataclass
class Job:
    """One job of the sweep: its overrides and what they mean."""

    overrides: list[str]
    mixture: dict[str, float]
    dp: int | None
    other: list[str]
    seed: int | None = None


class MixSweeper(Sweeper):
    """Hydra sweeper over data mixes (docs/design/sweeps_sweeper.md)."""

    def __init__(
        self,
        mix: DictConfig | dict[str, Any],
        replicate_dp: list[int],
        replicate_seeds: list[int] | None = None,
        params: dict[str, str] | None = None,
        compare: bool = True,
        resume: str | None = None,
        family: str = "holm",
        replicate_models: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.resume = resume
        self.family = family_of(family).value
        self.replicate_models = [str(name) for name in replicate_models or []]
        fields = mix if isinstance(mix, dict) else _to_plain_dict(mix)
        self.space = MixSpace(**{k: v for k, v in fields.items() if v is not None})
        self.replicate_dp = [int(k) for k in replicate_dp]
        self.replicate_seeds = [int(k) for k in replicate_seeds or []]
        self.params = dict(params or {})
        self.compare = compare
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Launcher | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        if type(self.launcher).__name__ == "SlurmLauncher":  # hydra-submitit-launcher's
            from orchestrator.run.slurm import use_squeue_without_accounting

            use_squeue_without_accounting()  # else a job Slurm cancels is waited on for ever

    # -- planning -------------------------------------------------------------------------

    def plan(self, arguments: list[str]) -> list[Job]:
        """Steps 1-3 of docs/design/sweeps_sweeper.md: every job, validated; nothing launched."""
        assert self.hydra_context is not None
        loader = self.hydra_context.config_loader
        jobs: list[Job] = []
        for other in self.combinations(arguments):
            base = experiment_from(loader.load_sweep_config(self.config, list(other)))
            self.check_phase(base.data.phases)
            jobs += self.jobs_for(other, variants(self.space, sorted(base.data.datasets)))
        self.validate_jobs(jobs)
        return jobs

    def combinations(self, arguments: list[str]) -> list[list[str]]:
        """The ordinary overrides crossed like Hydra's basic sweeper (``[[]]``: none), after
        refusing those the sweeper sets itself and bad replicate lists."""
        assert self.config is not None and self.hydra_context is not None
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        loader = self.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [*(f"{k}={v}" for k, v in self.params.items()), *arguments]
        )
        seeded = SEED_SETTINGS if self.replicate_seeds else ()
        for override in parsed:
            key = override.get_key_element()
            mixture_key = self.space.mixture_key
            if key.startswith((mixture_key, "mix", "data.compared_phase")):
                raise ExperimentError(
                    [
                        f"{override.input_line!r}: the mix sweeper sets {mixture_key} (and "
                        "data.compared_phase) itself; describe the mixes with "
                        "hydra.sweeper.mix.* instead"
                    ]
                )
            if key == "model" and self.replicate_models:
                raise ExperimentError(
                    [
                        f"{override.input_line!r}: hydra.sweeper.replicate_models sets the "
                        "model itself; list the sizes there instead"
                    ]
                )
            if key in seeded:
                raise ExperimentError(
                    [
                        f"{override.input_line!r}: hydra.sweeper.replicate_seeds sets "
                        f"{', '.join(SEED_SETTINGS)} itself; list the seeds there instead"
                    ]
                )
        if any(k < 1 for k in self.replicate_dp) or len(set(self.replicate_dp)) != len(
            self.replicate_dp
        ):
            raise ExperimentError(
                [f"hydra.sweeper.replicate_dp={self.replicate_dp}: use distinct sizes >= 1"]
            )
        seeds = self.replicate_seeds
        if any(k < 0 for k in seeds) or len(set(seeds)) != len(seeds):
            raise ExperimentError(
                [f"hydra.sweeper.replicate_seeds={seeds}: use distinct seeds >= 0"]
            )
        models = self.replicate_models
        if len(set(models)) != len(models):
            raise ExperimentError(
                [f"hydra.sweeper.replicate_models={models}: list each model preset once"]
            )
        crossed = [list(c) for c in BasicSweeper.split_arguments(parsed, None)[0]] or [[]]
        # a model size is one more setting crossed with the others: compared on its own
        return [[*c, f"model={name}"] for c in crossed for name in models] if models else crossed

    def jobs_for(self, other: list[str], mixtures: list[dict[str, float]]) -> list[Job]:
        """One job per mixture x replicate seed x replicate dp, under the overrides ``other``."""
        jobs = []
        for mixture in mixtures:
            for seed in self.replicate_seeds or [None]:
                for dp in self.replicate_dp or [None]:
                    overrides = [
                        *other,
                        *override_strings(mixture, self.space.decimals, self.space.mixture_key),
                    ]
                    if self.space.phase is not None:
                        overrides.append(f"data.compared_phase={self.space.phase}")
                    if seed is not None:
                        overrides += [f"{key}={seed}" for key in SEED_SETTINGS]
                    if dp is not None:
                        overrides.append(f"resources.dp={dp}")
                    jobs.append(Job(overrides, mixture, dp, list(other), seed))
        return jobs

    def check_phase(self, phases: list[Any]) -> None:
        """ExperimentError unless ``hydra.sweeper.mix.phase`` names one of ``phases`` (the
        experiment's ``data.phases``), or is unset for an experiment of one mixture."""
        phase = self.space.phase
        if phase is None and phases:
            raise ExperimentError(
                [
                    f"the experiment stages its mixture in {len(phases)} phases (data.phases): "
                    "say which phase's mixture the sweep varies with hydra.sweeper.mix.phase=K"
                ]
            )
        if phase is not None and not 0 <= phase < len(phases):
            raise ExperimentError(
                [
                    f"hydra.sweeper.mix.phase={phase}, but the experiment has "
                    f"{len(phases)} phases in data.phases: use an index in "
                    f"[0, {len(phases) - 1}]"
                    if phases
                    else f"hydra.sweeper.mix.phase={phase} needs a staged mixture (data.phases)"
                ]
            )

    def validate_jobs(self, jobs: list[Job]) -> None:
        """Compose and validate every job like any experiment; ExperimentError lists every
        problem of every job."""
        assert self.hydra_context is not None
        loader = self.hydra_context.config_loader
        problems: list[str] = []
        for number, job in enumerate(jobs):
            try:
                validate(experiment_from(loader.load_sweep_config(self.config, job.overrides)))
            except ExperimentError as e:
                problems += [f"job {number} ({' '.join(job.overrides)}): {p}" for p in e.problems]
        if problems:
            raise ExperimentError(problems)

    # -- the sweep ------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        assert self.config is not None and self.launcher is not None
        jobs = self.plan(arguments)
        opened = self.open_sweep(self.description(jobs), len(jobs))
        results = self.launch(opened, jobs, first_number=0)
        outcomes = [job_outcome(job, r) for job, r in zip(jobs, results, strict=True)]
        parent = opened.parent
        verdict = (
            parent.compare(
                outcomes, opened.folder, family=self.family, models=self.replicate_models
            )
            if self.compare
            else None
        )
        summary = {
            "sweep": opened.name,
            "parent_run_id": parent.run_id,
            "tracking_uri": parent.uri,
            "jobs": outcomes,
            "comparison": verdict,
        }
        (opened.folder / SWEEP_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        failed = [o for o in outcomes if o["status"] != RunStatus.SUCCEEDED]
        refused = verdict is not None and not verdict.get("accepted", False)
        parent.finish(status="FAILED" if failed or refused else "FINISHED")
        print(sweep_report(summary, opened.folder, self.space.decimals))
        if failed or refused:
            reasons = [f"job {o['job']} {o['status']}: {o['error']}" for o in failed]
            if refused:
                reasons += [r["message"] for r in verdict.get("refusals", [])] or [
                    str(verdict.get("error"))
                ]
            raise SweepFailed(f"{opened.name}: " + "\n".join(reasons))
        return results

    def open_sweep(self, description: dict[str, Any], jobs: int) -> OpenSweep:
        """The sweep's folder, name and parent MLflow run (reopened when resuming)."""
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        name = self.resume or f"sweep-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        base = experiment_from(self.config)
        if self.config.get("dry_run"):  # plans only: nothing to track
            parent = _ParentRun(uri="", experiment=base.tracking.experiment, run_id=None)
        elif self.resume:
            parent = _ParentRun.reopen(base, name, description)
        else:
            parent = _ParentRun.start(base, name, description)
        log.info("%s: %d jobs, parent MLflow run %s", name, jobs, parent.run_id)
        return OpenSweep(sweep_dir, name, base.runs_root, parent)

    def launch(self, opened: OpenSweep, jobs: list[Job], first_number: int) -> list[JobReturn]:
        """Run ``jobs``, numbered from ``first_number``, through the configured launcher.

        An interrupt ends the parent run KILLED and raises ``Interrupted`` with the jobs not
        started and the command that continues the sweep; a launcher that fails (e.g. a job
        Slurm cancelled) ends it FAILED and raises :class:`SweepFailed` the same way."""
        assert self.launcher is not None
        name, parent = opened.name, opened.parent
        job_overrides = [
            [
                *job.overrides,
                f"sweep.name={name}",
                f"run_name={_run_name(name, number)}",
                *([f"sweep.parent_run_id={parent.run_id}"] if parent.run_id else []),
                *(["resume=true"] if self.resume else []),
            ]
            for number, job in enumerate(jobs, start=first_number)
        ]
        last = first_number + len(jobs)
        try:
            results = list(self.launcher.launch(job_overrides, initial_job_idx=first_number))
            if interrupts.requested():
                raise interrupts.Interrupted()
        except BaseException as error:
            if not interrupts.requested():
                if not isinstance(error, Exception):
                    raise
                # e.g. a job that Slurm cancelled, reported by hydra-submitit-launcher: the
                # other jobs' runs are kept, and the sweep continues like an interrupted one
                parent.finish(status="FAILED")
                said = " ".join(str(error).splitlines()[:2])  # submitit: the job, its state
                raise SweepFailed(
                    "\n".join(
                        [
                            f"{name}: the launcher failed: {type(error).__name__}: {said}",
                            *self._report_unfinished(name, opened.runs_root, last),
                        ]
                    )
                ) from None
            parent.finish(status="KILLED")
            raise interrupts.Interrupted(
                self._report_unfinished(name, opened.runs_root, last)
            ) from None
        return results

    def _report_unfinished(self, name: str, runs_root: str, jobs: int) -> list[str]:
        """Report lines of an interrupted sweep: jobs never started, and the command that
        continues the whole sweep (interrupted jobs are noted by their runs)."""
        lines = [
            f"{_run_name(name, number)}: not started"
            for number in range(jobs)
            if not RunFolder(Path(runs_root, _run_name(name, number))).exists()
        ]
        # `python -m sweeps.app` leaves the module's file in argv[0]: repeat the interpreter's
        argv = sys.orig_argv if sys.argv[0].endswith(".py") else sys.argv
        kept = [a for a in argv if not a.startswith("hydra.sweeper.resume=")]
        command = shlex.join([*kept, f"hydra.sweeper.resume={name}"])
        lines.append(
            f"{name}: finished jobs are kept, the others resume in the same MLflow runs and the "
            f"comparison follows; continue the sweep with: {command}"
        )
        return lines

    def description(self, jobs: list[Job]) -> dict[str, Any]:
        """The sweep as parent-run parameters (a continued sweep must match them)."""
        return {
            "jobs": len(jobs),
            "variants": len({mix_label(j.mixture, self.space.decimals) for j in jobs}),
            "replicate_dp": ",".join(map(str, self.replicate_dp)) or "auto",
            "replicate_seeds": ",".join(map(str, self.replicate_seeds)) or "configured",
            # only when set: sweeps started before model ladders resume with their parameters
            **(
                {"replicate_models": ",".join(self.replicate_models)}
                if self.replicate_models
                else {}
            ),
            **{f"mix.{k}": v for k, v in describe(self.space).items()},
            **{f"sweep.{k}": v for k, v in self.params.items()},
        }


@dataclass(frozen=True)
class OpenSweep:
    """A started (or reopened) sweep: where its files go and its parent MLflow run."""

    folder: Path
    """Hydra's sweep folder: multirun.yaml, sweep.json, comparisons."""
    name: str
    """The sweep's name: its parent run's name and its run folders' prefix."""
    runs_root: str
    """Where the jobs' run folders are."""
    parent: _ParentRun


def _seed_label(seed: int | None) -> str:
    return "" if seed is None else f"seed={seed} "


def _run_name(sweep: str, number: int) -> str:
    """The run folder name of job ``number``: stable, so that a resumed sweep finds it."""
    return f"{sweep}-{number:03d}"


def _to_untyped_data(space: MixSpace) -> dict[str, Any]:
    """``space`` as plain data with empty containers as None (replaced, not merged, by
    Hydra overrides: a struct config refuses new keys in an existing dict)."""
    return {
        k: (v if v or not isinstance(v, dict | list) else None) for k, v in asdict(space).items()
    }


def _to_plain_dict(node: DictConfig) -> dict[str, Any]:
    container = OmegaConf.to_container(node, resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def job_outcome(job: Job, result: JobReturn) -> dict[str, Any]:
    """What one job left, as plain data for sweep.json and the report."""
    outcome: dict[str, Any] = {
        "job": int(result.hydra_cfg.hydra.job.num) if result.hydra_cfg else None,
        "overrides": job.overrides,
        "mixture": job.mixture,
        "dp": job.dp,
        "seed": job.seed,
        "other": job.other,
    }
    if result.status == JobStatus.COMPLETED and isinstance(result.return_value, dict):
        value = result.return_value
        outcome.update(status=value.get("status", RunStatus.SUCCEEDED), error=None)
        for key in (
            "run_name",
            "mlflow_run_id",
            "variant",
            "recipe_fingerprint",
            "data_fingerprint",
            "dp_sizes",
            "eval",
            "folder",
        ):
            outcome[key] = value.get(key)
        if "dp_size" in value:  # a dry run's plan
            outcome["dp_sizes"] = [value["dp_size"]]
    else:
        error = result._return_value
        # an exception without a message (a bare assert) still says what it was
        outcome.update(status=RunStatus.FAILED, error=str(error) or repr(error))
    return outcome


@dataclass
class _ParentRun:
    """The sweep's parent MLflow run (None id: tracking is off and allowed to be)."""

    uri: str
    experiment: str
    run_id: str | None

    @classmethod
    def start(cls, base: Any, name: str, params: dict[str, Any]) -> _ParentRun:
        """Create the parent run; TrackingUnavailable unless ``tracking.offline_ok``."""
        from orchestrator.tracking.names import TAG_SWEEP
        from orchestrator.tracking.tracker import Tracker
        from orchestrator.tracking.uris import reachable_uri, resolve_uri

        t = base.tracking
        uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
        if uri is None:
            log.warning("tracking unavailable: the sweep has no parent run; compare later")
            return cls(resolve_uri(t.uri, Path.cwd()), t.experiment, None)
        run_id = Tracker(uri, t.experiment).new_run(
            name, kind="sweep", tags={TAG_SWEEP: name}, params=params
        )
        return cls(uri, t.experiment, run_id)

    @classmethod
    def reopen(cls, base: Any, name: str, params: dict[str, Any]) -> _ParentRun:
        """The parent run of the sweep ``name``, RUNNING again; ExperimentError if there is
        none, or if it was started with other jobs (``params`` differ)."""
        from orchestrator.tracking.names import TAG_KIND, TAG_SWEEP
        from orchestrator.tracking.store import param_value
        from orchestrator.tracking.tracker import Tracker
        from orchestrator.tracking.uris import reachable_uri

        t = base.tracking
        uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
        if uri is None:
            raise ExperimentError(
                [f"hydra.sweeper.resume={name}: the tracking store is unreachable"]
            )
        tracker = Tracker(uri, t.experiment)
        found = tracker.find_runs(f"tags.{TAG_KIND} = 'sweep' and tags.`{TAG_SWEEP}` = '{name}'")
        if not found:
            raise ExperimentError(
                [
                    f"hydra.sweeper.resume={name}: no such sweep in MLflow experiment "
                    f"{t.experiment!r} of {uri}; a sweep's name is its parent run's name"
                ]
            )
        then = found[0].data.params
        now = {key: param_value(value) for key, value in params.items()}
        differing = [
            f"{key}: {then.get(key)} then, {now.get(key)} now"
            for key in sorted(now.keys() | then.keys())
            if now.get(key) != then.get(key)
        ]
        if differing:
            raise ExperimentError(
                [
                    f"hydra.sweeper.resume={name}: the sweep was started with other jobs "
                    f"({'; '.join(differing)}); continue it with the arguments it was started with"
                ]
            )
        tracker.reopen_run(found[0].info.run_id)
        return cls(uri, t.experiment, found[0].info.run_id)

    def compare(
        self,
        outcomes: list[dict[str, Any]],
        sweep_dir: Path,
        *,
        family: str = "holm",
        models: list[str] | None = None,
    ) -> dict[str, Any] | None:
        """The guard over the sweep's tracked runs, one comparison per combination of the
        other sweeps, logged into the parent run (one combination) or into child comparison
        runs of it (several: a sweep that also crosses e.g. ``train.steps`` never ranks runs
        of different recipes). Seed replicates of a combination are compared together."""

        groups: dict[str, list[str]] = {}
        for o in outcomes:
            if o.get("mlflow_run_id"):
                groups.setdefault(" ".join(o["other"]), []).append(o["mlflow_run_id"])
        if self.run_id is None or not groups:
            return None
        try:
            if len(groups) == 1:
                return compare_tracked(
                    next(iter(groups.values())),
                    tracking_uri=self.uri,
                    experiment=self.experiment,
                    into_run_id=self.run_id,
                    workdir=sweep_dir / "comparison",
                    family=family,
                )
            verdicts = {
                combination: compare_tracked(
                    run_ids,
                    tracking_uri=self.uri,
                    experiment=self.experiment,
                    parent_run_id=self.run_id,
                    workdir=sweep_dir / "comparison" / str(number),
                    family=family,
                )
                for number, (combination, run_ids) in enumerate(groups.items())
            }
        except Exception as e:  # the sweep's runs are kept; the verdict can be redone later
            log.exception("comparison failed")
            return {"accepted": False, "refusals": [], "error": f"comparison failed: {e}"}
        return self._per_combination(verdicts, models or [])

    def _per_combination(
        self, verdicts: dict[str, dict[str, Any]], models: list[str]
    ) -> dict[str, Any]:
        """One verdict of the per-combination comparisons, tagged on the parent run; with
        model sizes, each setting's sizes side by side (:func:`ladders`)."""
        from orchestrator.tracking.names import TAG_NOTE, TAG_VERDICT
        from orchestrator.tracking.tracker import Tracker

        sections = [
            f"### {combination or 'The base settings'}: compared on its own\n\n"
            f"{verdict.get('markdown', '')}"
            for combination, verdict in verdicts.items()
        ]
        found = ladders(verdicts, models)
        sections += [ladder_markdown(result) for result in found.values()]
        accepted = all(v.get("accepted") for v in verdicts.values())
        markdown = "\n".join(sections)
        assert self.run_id is not None
        Tracker(self.uri, self.experiment).tag_run(
            self.run_id, {TAG_VERDICT: "accepted" if accepted else "refused", TAG_NOTE: markdown}
        )
        return {
            "accepted": accepted,
            "refusals": [r for v in verdicts.values() for r in v.get("refusals", [])],
            "markdown": markdown,
            "comparisons": verdicts,
            **({"ladders": found} if found else {}),
        }

    def finish(self, status: str) -> None:
        """End the parent run: ``FINISHED``, ``FAILED`` or ``KILLED`` (interrupted)."""
        if self.run_id is None:
            return
        from orchestrator.tracking.tracker import Tracker

        Tracker(self.uri, self.experiment).end_run(self.run_id, status)


def ladders(verdicts: dict[str, dict[str, Any]], models: list[str]) -> dict[str, dict[str, Any]]:
    """Per setting of the other sweeps (a combination without its ``model=...``), the
    :func:`~orchestrator.guard.ladder.ladder` of its sizes' verdicts, in ``models`` order;
    {} without two or more model sizes."""
    if len(models) < 2:
        return {}
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for combination, verdict in verdicts.items():
        words = combination.split(" ")
        size = next(w.removeprefix("model=") for w in words if w.startswith("model="))
        rest = " ".join(w for w in words if not w.startswith("model="))
        grouped.setdefault(rest, {})[size] = verdict
    return {
        rest: ladder({m: by_size[m] for m in models if m in by_size})
        for rest, by_size in grouped.items()
    }


def sweep_report(summary: dict[str, Any], sweep_dir: Path, decimals: int) -> str:
    """What the user reads at the end of a sweep: the table (or why not) and where to look."""
    verdict = summary["comparison"] or {}
    lines = [
        f"== {summary['sweep']}: {len(summary['jobs'])} jobs, summary in {sweep_dir / SWEEP_FILE}"
    ]
    lines += [
        f"  job {o['job']}: {o['status']:9} {mix_label(o['mixture'], decimals)} "
        f"{_seed_label(o.get('seed'))}"
        f"dp={o.get('dp_sizes')} {o.get('run_name') or ''}"
        for o in summary["jobs"]
    ]
    if verdict.get("markdown"):
        lines += ["", verdict["markdown"]]
    elif verdict.get("error"):
        lines += ["", verdict["error"]]
    uri = summary["tracking_uri"] or ""
    if uri.startswith("sqlite:"):
        lines.append(
            f"Look at it: mlflow ui --backend-store-uri {uri}  (parent run "
            f"{summary['parent_run_id']})"
        )
    elif uri:
        lines.append(f"Look at it: {uri} (parent run {summary['parent_run_id']})")
    return "\n".join(lines)
