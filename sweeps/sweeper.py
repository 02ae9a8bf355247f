"""The ``zephon_mix`` Hydra sweeper: data-mix variants x other sweeps x replicates, one
parent MLflow run, the comparison guard at the end.

Every job is composed and validated before any is launched; the sweep fails (Hydra exits
non-zero) when a job fails or the guard refuses, after everything is logged. With
``hydra.sweeper.mix.search`` set it searches instead (:mod:`sweeps.search`).

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import logging
import secrets
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from orchestrator.errors import ComparisonRefused, ExperimentError, SweepFailed
from orchestrator.experiment import validate
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.experiment.variant_axis import parse_axis
from orchestrator.guard.comparison import SEED_SETTINGS
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.run import interrupts
from orchestrator.run.slurm import use_squeue_without_accounting
from orchestrator.tracking.mlflow_status import MlflowStatus
from sweeps.composition import Compositions
from sweeps.config import experiment_from
from sweeps.jobs import Job, job_outcome, run_name
from sweeps.mixes import MixSpace, describe, mix_label, override_strings, variants
from sweeps.parent_run import ParentRun
from sweeps.summary import sweep_report, write_summary

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
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
    design: str = "sequential"
    """How the comparison's decisions are calibrated: ``sequential`` (one error budget over
    every look as seeds are added) or ``fixed`` (a seed count fixed in advance; ``zephon
    compare --design``)."""
    smooth_last: int = 1
    """The comparison scores each run on the mean of its last this many held-out evals (1:
    the last eval alone; ``zephon compare --smooth-last``)."""
    decide_on: list[str] = field(default_factory=list)
    """What the comparison ranks and decides on: held-out domains or eval sets (their mean),
    a held-out metric or a task, as ``zephon compare --decide-on`` takes them; empty: the
    mean bits per byte over every domain."""
    resume: str | None = None
    """Continue the interrupted sweep of this name (run with the arguments it was started
    with): finished jobs are kept, unfinished ones resume from their last checkpoint,
    the rest start; the same parent and child MLflow runs."""


class MixSweeper(Sweeper):
    """Hydra sweeper over data mixes (docs/design/sweeps_sweeper.md)."""

    def __init__(
        self,
        mix: DictConfig | dict[str, Any],
        replicate_dp: list[int],
        *,
        replicate_seeds: list[int] | None = None,
        params: dict[str, str] | None = None,
        compare: bool = True,
        resume: str | None = None,
        family: str = "holm",
        design: str = "sequential",
        replicate_models: list[str] | None = None,
        smooth_last: int = 1,
        decide_on: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.resume = resume
        self.policy = DecisionPolicy(
            family=family,
            design=design,
            smooth_last=smooth_last,
            decide_on=[str(d) for d in decide_on or []],
        )
        """What the sweep's comparison decides on and how (``hydra.sweeper.family``,
        ``design``, ``smooth_last`` and ``decide_on``)."""
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
        self.compositions: Compositions | None = None
        """The jobs' configs, what a setting's jobs share composed once (set up by Hydra)."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.compositions = Compositions(hydra_context.config_loader, config)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        if type(self.launcher).__name__ == "SlurmLauncher":  # hydra-submitit-launcher's
            use_squeue_without_accounting()  # else a job Slurm cancels is waited on for ever

    # -- planning -------------------------------------------------------------------------

    def plan(self, arguments: list[str]) -> list[Job]:
        """Steps 1-3 of docs/design/sweeps_sweeper.md: every job, validated; nothing launched."""
        assert self.compositions is not None
        jobs: list[Job] = []
        for combination in self.combinations(arguments):
            # the setting its jobs share, composed once for them (without a data.compared
            # setting, the same overrides in the same order)
            base = experiment_from(self.compositions.of(combination, []))
            self.check_phase(base.data.phases)
            # The setting data.compared lets differ is part of the variant, not a setting
            # compared on its own (a dataset version, a processing chain).
            setting = parse_axis(base.data.compared).setting
            varied = [o for o in combination if o.split("=", 1)[0].lstrip("+") == setting]
            other = [o for o in combination if o not in varied]
            mixtures = variants(self.space, sorted(base.data.datasets))
            jobs += self.jobs_for(other, mixtures, varied=varied)
        self.validate_jobs(jobs)
        return jobs

    def combinations(self, arguments: list[str]) -> list[list[str]]:
        """The ordinary overrides crossed like Hydra's basic sweeper (``[[]]``: none), after
        refusing those the sweeper sets itself and bad replicate lists."""
        assert self.config is not None and self.hydra_context is not None
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

    def jobs_for(
        self, other: list[str], mixtures: list[dict[str, float]], *, varied: list[str] = ()
    ) -> list[Job]:
        """One job per mixture x replicate seed x replicate dp, under the overrides ``other``
        (and ``varied``: what else the variant sets, along ``data.compared``)."""
        jobs = []
        for mixture in mixtures:
            for seed in self.replicate_seeds or [None]:
                for dp in self.replicate_dp or [None]:
                    overrides = [
                        *varied,
                        *other,
                        *override_strings(mixture, self.space.decimals, self.space.mixture_key),
                    ]
                    if self.space.phase is not None:
                        overrides.append(f"data.compared_phase={self.space.phase}")
                    if seed is not None:
                        overrides += [f"{key}={seed}" for key in SEED_SETTINGS]
                    if dp is not None:
                        overrides.append(f"resources.dp={dp}")
                    if len(self.replicate_dp) > 1:  # dp is no part of an identity: ask for
                        overrides.append("at_dp=true")  # an answer trained at this dp size
                    jobs.append(
                        Job(
                            overrides,
                            mixture,
                            dp=dp,
                            other=list(other),
                            seed=seed,
                            varied=list(varied),
                        )
                    )
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
        """Compose and validate every job like any experiment (a setting's jobs differ in the
        sweeper's own overrides: :class:`~sweeps.composition.Compositions`); ExperimentError
        lists every problem of every job."""
        assert self.compositions is not None
        problems: list[str] = []
        for number, job in enumerate(jobs):
            setting = [*job.varied, *job.other]
            try:
                config = self.compositions.of(setting, job.overrides[len(setting) :])
                experiment = experiment_from(config)
                validate(experiment)
            except ExperimentError as e:
                problems += [f"job {number} ({' '.join(job.overrides)}): {p}" for p in e.problems]
                continue
            if number == 0 and experiment.eval.enable:
                # every job scores the same held-out domains (the data contract's)
                data = experiment.data
                try:
                    self.policy.check_decide_on(sorted({*data.datasets, *data.eval_sets}))
                except ValueError as e:
                    decide_on = list(self.policy.decide_on or [])
                    problems.append(f"hydra.sweeper.decide_on={decide_on}: {e}")
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
                outcomes, opened.folder, policy=self.policy, models=self.replicate_models
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
        write_summary(summary, opened.folder)
        failed = [o for o in outcomes if o["status"] != RunStatus.SUCCEEDED]
        refused = verdict is not None and not verdict.get("accepted", False)
        parent.finish(MlflowStatus.FAILED if failed or refused else MlflowStatus.FINISHED)
        print(sweep_report(summary, opened.folder, self.space.decimals))
        if failed or refused:
            reasons = [f"job {o['job']} {o['status']}: {o['error']}" for o in failed]
            if refused:
                reasons += [r["message"] for r in verdict.get("refusals", [])] or [
                    str(verdict.get("error"))
                ]
            error = SweepFailed if failed else ComparisonRefused
            raise error(f"{opened.name}: " + "\n".join(reasons))
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
            parent = ParentRun(uri="", experiment=base.tracking.experiment, run_id=None)
        elif self.resume:
            parent = ParentRun.reopen(base, name, description)
        else:
            parent = ParentRun.start(base, name, description)
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
                f"run_name={run_name(name, number)}",
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
                parent.finish(MlflowStatus.FAILED)
                said = " ".join(str(error).splitlines()[:2])  # submitit: the job, its state
                raise SweepFailed(
                    "\n".join(
                        [
                            f"{name}: the launcher failed: {type(error).__name__}: {said}",
                            *self._report_unfinished(name, opened.runs_root, last),
                        ]
                    )
                ) from None
            parent.finish(MlflowStatus.KILLED)
            raise interrupts.Interrupted(
                self._report_unfinished(name, opened.runs_root, last)
            ) from None
        return results

    def _report_unfinished(self, name: str, runs_root: str, jobs: int) -> list[str]:
        """Report lines of an interrupted sweep: jobs never started, and the command that
        continues the whole sweep (interrupted jobs are noted by their runs)."""
        lines = [
            f"{run_name(name, number)}: not started"
            for number in range(jobs)
            if not RunFolder(Path(runs_root, run_name(name, number))).exists()
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
    parent: ParentRun


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
