"""The searching sweep: ``hydra.sweeper.mix.search={rounds, per_round, initial, seed}``.

Round 0 runs an initial design; each round's runs are checked by the guard, fitted, and
the next round's mixtures proposed, until the stop signal or ``rounds`` rounds; then the
recommended mixture is confirmed by the guard. The state file
``<runs_root>/<sweep>.search.json`` lets ``hydra.sweeper.resume`` continue a search.

Design: docs/design/search.md
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.utils import JobReturn

from orchestrator.errors import ComparisonRefused, ExperimentError, SweepFailed
from orchestrator.experiment.run_record import RunStatus
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.guard.decisions import Design, Family
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.search import Bounds, Observations, Proposal, fit, initial_design, propose
from orchestrator.search.confirmation import confirmation_confidence
from orchestrator.search.observations import MIN_DISTINCT_MIXTURES
from orchestrator.search.repetition_caps import dataset_tokens, token_budget
from orchestrator.search.run_observations import observations_from_runs
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.tracker import Tracker
from sweeps.config import experiment_from
from sweeps.jobs import Job, job_outcome
from sweeps.mixes import mix_label, variants
from sweeps.search_report import plot_search, report_lines, trajectory
from sweeps.search_state import SearchRound, SearchSpec, SearchState
from sweeps.summary import sweep_report, write_summary
from sweeps.sweeper import MixSweeper

log = logging.getLogger(__name__)


def proposal_from_inputs(inputs: dict[str, Any], observations: Observations) -> Proposal:
    """The proposal a round's ``proposal_inputs`` describe, on ``observations`` of its runs:
    deterministic, so redoing it gives the mixtures the round ran."""
    bounds = Bounds(inputs["bounds"]["lower"], inputs["bounds"]["upper"])
    return propose(
        fit(observations, seed=inputs["seed"]),
        count=inputs["count"],
        bounds=bounds,
        seed=inputs["seed"],
        decimals=inputs["decimals"],
        prior=inputs["prior"],
        min_gain=inputs["min_gain"],
    )


class SearchingMixSweeper(MixSweeper):
    """The mix sweeper, searching when ``hydra.sweeper.mix.search`` is set (module
    docstring), sweeping its fixed list of mixes otherwise."""

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        if self.space.search is None:
            return super().sweep(arguments)
        return MixSearch(self).sweep(arguments)


class MixSearch:
    """The searching mode of :class:`~sweeps.sweeper.MixSweeper` (docs/design/search.md)."""

    def __init__(self, sweeper: MixSweeper) -> None:
        self.sweeper = sweeper
        self.space = sweeper.space
        assert self.space.search is not None
        self.spec = SearchSpec.from_config(dict(self.space.search))
        self.results: list[JobReturn] = []

    def sweep(self, arguments: list[str]) -> list[JobReturn]:
        """Steps 1-4 of docs/design/search.md."""
        sweeper, spec = self.sweeper, self.spec
        assert sweeper.config is not None and sweeper.hydra_context is not None
        combinations = sweeper.combinations(arguments)
        if len(combinations) != 1:
            raise ExperimentError(
                [
                    f"a search runs one setting; these arguments sweep {len(combinations)} "
                    "(e.g. train.steps=10,20): run one search per setting"
                ]
            )
        if sweeper.config.get("dry_run"):
            raise ExperimentError(["a search fits trained runs' scores: drop dry_run"])
        self.other = combinations[0]
        loader = sweeper.hydra_context.config_loader
        base = experiment_from(loader.load_sweep_config(sweeper.config, list(self.other)))
        domains = sorted(base.data.datasets)
        self.tokens = dataset_tokens(base)
        self.bounds = Bounds(dict(self.space.min), dict(self.space.max)).with_repetition_cap(
            self.tokens, token_budget(base), spec.max_epochs
        )
        decimals = self.space.decimals
        design = initial_design(
            domains,
            prior=self.tokens,
            draws=spec.initial,
            seed=spec.seed,
            bounds=self.bounds,
            decimals=decimals,
        )
        self.token_proportional = initial_design(
            domains, prior=self.tokens, draws=0, seed=0, bounds=self.bounds, decimals=decimals
        )[-1]
        if self.space.requests_variants:
            design += [m for m in variants(self.space, domains) if m not in design]
        if len(design) < MIN_DISTINCT_MIXTURES:
            raise ExperimentError(
                [
                    f"the initial design has {len(design)} distinct mixtures; a fit needs "
                    f"{MIN_DISTINCT_MIXTURES}: raise hydra.sweeper.mix.search.initial"
                ]
            )
        design_jobs = sweeper.jobs_for(self.other, design)
        sweeper.validate_jobs(design_jobs)
        opened = sweeper.open_sweep(sweeper.description(design_jobs), len(design_jobs))
        if opened.parent.run_id is None:
            opened.parent.finish(MlflowStatus.FAILED)
            raise ExperimentError(
                [
                    "a search reads its runs' scores from MLflow: the tracking store must be reachable"
                ]
            )
        self.opened = opened
        path = Path(opened.runs_root) / f"{opened.name}.search.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        state = SearchState.load(path) if sweeper.resume else SearchState(path)
        accepted = self._run_rounds(state, design)
        verdict = self._confirm_recommendation(state, accepted)
        return self._finish_search(state, verdict)

    # -- rounds ---------------------------------------------------------------------------

    def _run_rounds(self, state: SearchState, design: list[dict[str, float]]) -> list[str]:
        """Run (or take from ``state``) every round; the accepted runs' MLflow ids."""
        accepted: list[str] = []
        mixtures: list[dict[str, float]] = design
        predicted: list[float | None] = [None] * len(design)
        next_job = 0
        for number in range(self.spec.rounds + 1):
            if number < len(state.rounds):
                record = state.rounds[number]
            else:
                record = SearchRound(number, mixtures, first_job=next_job, predicted=predicted)
                state.rounds.append(record)
                state.save()  # the proposals are fixed before anything of the round runs
            jobs = self.sweeper.jobs_for(self.other, record.mixtures)
            if not record.finished:
                self._run_round(state, record, jobs, accepted)
            accepted += [o["mlflow_run_id"] for o in record.outcomes]
            next_job = record.first_job + len(jobs)
            if record.proposal is None:
                record.proposal_inputs = {
                    "run_ids": list(accepted),
                    "seed": self.spec.seed + number,
                    "count": self.spec.per_round,
                    "bounds": {"lower": dict(self.bounds.lower), "upper": dict(self.bounds.upper)},
                    "decimals": self.space.decimals,
                    "prior": self.tokens,
                    "min_gain": self.spec.min_gain,
                }
                record.proposal = self._propose_from_inputs(record.proposal_inputs).to_json()
                state.save()
            stop = record.proposal["stop"]
            log.info("%s round %d: %s", self.opened.name, number, stop["reason"])
            if (stop["stop"] and self.spec.stop) or number == self.spec.rounds:
                break
            mixtures = [p["mixture"] for p in record.proposal["proposals"]]
            predicted = [p["predicted"] for p in record.proposal["proposals"]]
        return accepted

    def _run_round(
        self, state: SearchState, record: SearchRound, jobs: list[Job], accepted: list[str]
    ) -> None:
        """Launch the round's jobs, then the guard on every accepted run plus these."""
        results = self.sweeper.launch(self.opened, jobs, record.first_job)
        self.results += results
        record.outcomes = [job_outcome(job, r) for job, r in zip(jobs, results, strict=True)]
        failed = [o for o in record.outcomes if o["status"] != RunStatus.SUCCEEDED]
        if failed:
            state.save()
            self._fail_search([f"job {o['job']} {o['status']}: {o['error']}" for o in failed])
        parent = self.opened.parent
        verdict = compare_tracked(
            [*accepted, *(o["mlflow_run_id"] for o in record.outcomes)],
            tracking_uri=parent.uri,
            experiment=parent.experiment,
            parent_run_id=parent.run_id,
            workdir=self.opened.folder / "comparison" / f"round-{record.number}",
        )
        record.accepted = bool(verdict["accepted"])
        record.comparison_run_id = verdict.get("comparison_run_id")
        record.refusals = [r["message"] for r in verdict.get("refusals", [])]
        state.save()
        if not record.accepted:
            self._fail_search(
                [f"round {record.number} refused by the guard: {r}" for r in record.refusals],
                error=ComparisonRefused,
            )

    def _propose_from_inputs(self, inputs: dict[str, Any]) -> Proposal:
        """The proposal ``inputs`` (a round's ``proposal_inputs``) describe."""
        return proposal_from_inputs(inputs, self._read_observations(inputs["run_ids"]))

    def _read_observations(self, run_ids: list[str]) -> Observations:
        parent = self.opened.parent
        return observations_from_runs(
            run_ids, tracking_uri=parent.uri, experiment=parent.experiment
        )

    # -- confirmation ---------------------------------------------------------------------

    def _confirm_recommendation(
        self, state: SearchState, accepted: list[str]
    ) -> dict[str, Any] | None:
        """The recommended mixture against the best initial and the token-proportional mix,
        decided by the guard into the parent run (None: they are one mixture)."""
        observations = self._read_observations(accepted)
        last = state.rounds[-1]
        assert last.proposal is not None
        arms = [last.proposal["recommended"]["mixture"]]
        for mixture in (self._best_initial(state, observations), self.token_proportional):
            if mixture not in arms:
                arms.append(mixture)
        earlier = {
            self._job_key(o["mixture"], o["seed"], o["dp"]): o
            for r in state.rounds
            for o in r.outcomes
        }
        wanted = self.sweeper.jobs_for(self.other, arms)
        missing = [j for j in wanted if self._job_key(j.mixture, j.seed, j.dp) not in earlier]
        record = state.confirmation
        if record is None:
            last_jobs = self.sweeper.jobs_for(self.other, last.mixtures)
            record = SearchRound(
                -1, [j.mixture for j in missing], first_job=last.first_job + len(last_jobs)
            )
            state.confirmation = record
            state.save()
        if missing and not record.outcomes:
            results = self.sweeper.launch(self.opened, missing, record.first_job)
            self.results += results
            record.outcomes = [job_outcome(job, r) for job, r in zip(missing, results, strict=True)]
            state.save()
        failed = [o for o in record.outcomes if o["status"] != RunStatus.SUCCEEDED]
        if failed:
            self._fail_search([f"job {o['job']} {o['status']}: {o['error']}" for o in failed])
        if len(arms) < 2:
            return None
        made = {self._job_key(o["mixture"], o["seed"], o["dp"]): o for o in record.outcomes}
        run_ids = [
            {**earlier, **made}[self._job_key(j.mixture, j.seed, j.dp)]["mlflow_run_id"]
            for j in wanted
        ]
        parent = self.opened.parent
        return compare_tracked(
            run_ids,
            tracking_uri=parent.uri,
            experiment=parent.experiment,
            into_run_id=parent.run_id,
            workdir=self.opened.folder / "comparison" / "confirmation",
            policy=DecisionPolicy(
                confidence=confirmation_confidence(len(arms) - 1),
                family=Family.NONE,  # the confidence is already Bonferroni's over the comparators
                design=Design.FIXED,  # one look, its seeds fixed by the search spec in advance
            ),
        )

    def _best_initial(self, state: SearchState, observations: Observations) -> dict[str, float]:
        """The initial design's mixture with the best mean objective over its runs."""
        objective = dict(zip(observations.ids, observations.objective, strict=True))
        means = {}
        for outcome in state.rounds[0].outcomes:
            label = mix_label(outcome["mixture"], self.space.decimals)
            means.setdefault(label, (outcome["mixture"], []))[1].append(
                objective[outcome["mlflow_run_id"]]
            )
        return min(means.values(), key=lambda pair: sum(pair[1]) / len(pair[1]))[0]

    def _job_key(self, mixture: dict[str, float], seed: int | None, dp: int | None) -> str:
        return f"{mix_label(mixture, self.space.decimals)} seed={seed} dp={dp}"

    # -- the end --------------------------------------------------------------------------

    def _finish_search(self, state: SearchState, verdict: dict[str, Any] | None) -> list[JobReturn]:
        """Trajectory, plots and state into the parent run; sweep.json; the report."""
        parent, folder = self.opened.parent, self.opened.folder
        accepted = [o["mlflow_run_id"] for r in state.rounds for o in r.outcomes]
        observations = self._read_observations(accepted)
        points = trajectory(state, observations, self.space.decimals)
        assert parent.run_id is not None
        tracker = Tracker(parent.uri, parent.experiment)
        for point in points:
            tracker.log_metrics(parent.run_id, point.metrics(), step=point.round)
        plots = plot_search(points, folder)
        tracker.attach_files(parent.run_id, [state.path, *plots])
        jobs = [o for r in [*state.rounds, state.confirmation] if r for o in r.outcomes]
        summary = {
            "sweep": self.opened.name,
            "parent_run_id": parent.run_id,
            "tracking_uri": parent.uri,
            "jobs": jobs,
            "search": {
                **state.to_json(),
                "trajectory": [asdict(p) for p in points],
                "recommended": state.rounds[-1].proposal["recommended"]
                if state.rounds[-1].proposal
                else None,
            },
            "comparison": verdict,
        }
        write_summary(summary, folder)
        print("\n".join(report_lines(state, points, self.space.decimals)))
        print(sweep_report(summary, folder, self.space.decimals))
        if verdict is not None and not verdict.get("accepted", False):
            self._fail_search(
                [r["message"] for r in verdict.get("refusals", [])], error=ComparisonRefused
            )
        parent.finish(MlflowStatus.FINISHED)
        return self.results

    def _fail_search(
        self, reasons: list[str], *, error: type[SweepFailed] = SweepFailed
    ) -> NoReturn:
        self.opened.parent.finish(MlflowStatus.FAILED)
        raise error(f"{self.opened.name}: " + "\n".join(reasons))
