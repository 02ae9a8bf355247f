"""Zephon's MCP tools over one job service (:class:`ServiceTools`): the job service's
functions (:mod:`orchestrator.service.client`), the guard and the mix search. Each tool is
a method: its name, its type hints (the tool's JSON schema) and its docstring (its
description) are what agents see.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import WithJsonSchema

from orchestrator.experiment.schema import experiment_json_schema
from orchestrator.guard.decision_policy import DecisionPolicy
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.search import Bounds, FitResult, Observations
from orchestrator.search import fit as fit_models
from orchestrator.search import propose as propose_mixtures
from orchestrator.search.observations import observations_from_records, records_from_json
from orchestrator.search.run_observations import observations_from_runs
from orchestrator.service import client
from orchestrator.service.admission import verify_request
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.job import JobKind, JobState


def spec_json_schema() -> dict[str, Any]:
    """The experiment's JSON Schema as the schema of a tool's ``spec`` argument."""
    schema = experiment_json_schema()
    del schema["$schema"]  # the dialect is declared at a schema's root: the tool's inputSchema
    return schema


# FastMCP builds a tool's inputSchema from a pydantic model of its signature (its
# func_metadata(), then model_json_schema()), where dict[str, Any] is an opaque "object".
# WithJsonSchema puts the experiment's schema in its place, so tools/list shows an agent
# every field, its type, default and description. It changes the advertised schema only:
# the argument is still validated as a dict, and admission refuses a wrong spec with every
# reason, in its own words.
ExperimentSpec = Annotated[dict[str, Any], WithJsonSchema(spec_json_schema())]


def predictions(fitted: FitResult, mixtures: list[dict[str, float]]) -> list[dict[str, Any]]:
    """The ``fit`` tool's ``predictions``: ``{score, interval}`` of each of ``mixtures``
    (domain -> weight, normalised; a domain the fit does not know is refused)."""
    domains = fitted.observations.domains
    unknown = sorted({d for m in mixtures for d in m} - set(domains))
    if unknown:
        raise ValueError(f"predict names domains {unknown}; the fit knows {list(domains)}")
    wanted = np.array([[float(m.get(d, 0.0)) for d in domains] for m in mixtures])
    if (wanted < 0).any() or (wanted.sum(axis=1) <= 0).any():
        raise ValueError("predict: every mixture needs weights >= 0, at least one > 0")
    wanted = wanted / wanted.sum(axis=1, keepdims=True)
    return [
        {"score": p.predicted, "interval": p.to_json()["interval"]}
        for p in fitted.predictions(wanted)
    ]


class ServiceTools:
    """The MCP tools over the job service rooted at ``root`` (its ``service.json`` is read
    again by every call)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _service(self) -> ServiceConfig:
        """The job service, as its root's ``service.json`` says now."""
        return load_service(self.root)

    def submit(
        self,
        spec: ExperimentSpec,
        key: str,
        *,
        kind: JobKind = JobKind.RUN,
        fresh: bool = False,
    ) -> dict[str, Any]:
        """Queue an experiment (a Zephon experiment as a JSON object: data, train, eval, ...;
        data.datasets from list_datasets; leave runs_root, data.cache_dir, tracking.uri and
        model.args out, the service sets them). A retry with the same key returns the same
        job; kind "plan" only plans it. An experiment that already trained is answered from
        that run (its result names it in answered_from); fresh=true trains a new run."""
        return client.submit(self._service(), spec, key=key, kind=kind, fresh=fresh)

    @staticmethod
    def experiment_schema() -> dict[str, Any]:
        """The JSON Schema of an experiment (submit's spec): every section and field, with
        its type, default and description."""
        return experiment_json_schema()

    def list_datasets(self, max_files_per_dataset: int = 1000) -> dict[str, Any]:
        """The datasets under the service's data roots: per dataset its name, its data files
        (absolute paths to put in a spec's data.datasets), their sizes in bytes and the
        total; missing roots, and symlinks leaving the roots (skipped), are reported."""
        return client.list_datasets(self._service(), max_files_per_dataset=max_files_per_dataset)

    def status(self, job_id: str) -> dict[str, Any]:
        """A job's state (queued, running, succeeded, failed, cancelled, preempted), its
        history and, when finished, its result: fingerprints, eval scores, MLflow run id;
        usage: each submitter's daily budget (runs, device_hours: used, limit, left;
        renews_at, 00:00 UTC)."""
        return client.status(self._service(), job_id)

    def wait(self, job_id: str, timeout_s: float = 600) -> dict[str, Any]:
        """Wait until the job is final or timeout_s passes; then its status."""
        return client.wait(self._service(), job_id, timeout_s=timeout_s)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a queued job now, or stop a running one."""
        return client.cancel(self._service(), job_id)

    def list_jobs(
        self,
        states: list[JobState] | None = None,
        submitter: str | None = None,
        *,
        kind: JobKind | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Jobs, oldest first, filtered by states, submitter and kind; counts per state;
        usage: each submitter's daily budget (runs, device_hours: used, limit, left;
        renews_at, 00:00 UTC)."""
        return client.list_jobs(
            self._service(), states=states, submitter=submitter, kind=kind, limit=limit
        )

    def compare(
        self,
        run_ids: list[str] | None = None,
        *,
        sweep: str | None = None,
        experiment: str | None = None,
        threshold: float = 0.0,
        decide_on: list[str] | None = None,
        family: str = "holm",
        design: str = "sequential",
        max_seeds: int = 8,
        smooth_last: int = 1,
    ) -> dict[str, Any]:
        """The comparison guard over MLflow runs: a table of held-out scores per variant and a
        decision per pair (a_better / b_better / cannot_tell, with its interval; ``threshold``:
        the smallest difference in bits per byte that matters; ``decide_on``: held-out domains
        to rank and decide on, default all; ``family``: holm (default), bh or none, the
        correction of the decisions for the number of pairs; ``design``: sequential (default:
        one 5% error budget for every comparison of these variants as seeds are added, up to
        ``max_seeds``) or fixed (a seed count fixed in advance); ``smooth_last``: score each
        run on the mean of its last this many held-out evals, default 1: the last alone), or
        a refusal naming the diverging step or the differing contract fields. A pair that
        cannot be told has a
        ``next_step``: the seeds that would decide it with 80% power and what they cost in
        runs and device-hours, or ``stop``; ``look`` numbers this comparison in its
        sequence."""
        if not run_ids and not sweep and not experiment:
            raise ValueError("name the runs: run_ids, sweep or experiment")
        return compare_tracked(
            run_ids,
            sweep=sweep,
            experiment=experiment,
            tracking_uri=self._service().rules().tracking_uri,
            policy=DecisionPolicy(
                threshold=threshold,
                decide_on=decide_on,
                family=family,
                design=design,
                max_seeds=max_seeds,
                smooth_last=smooth_last,
            ),
        )

    def _observations(
        self,
        runs: list[dict[str, Any]] | None,
        targets: list[str] | None,
        *,
        run_ids: list[str] | None,
        sweep: str | None,
        experiment: str | None,
    ) -> Observations:
        """The observations a fit or proposal reads: the inline table ``runs``, else the
        service's runs the guard accepts (``run_ids``, ``sweep`` or ``experiment``)."""
        if runs:
            return observations_from_records(records_from_json(runs), targets or [], "runs")
        return observations_from_runs(
            run_ids,
            sweep=sweep,
            experiment=experiment,
            tracking_uri=self._service().rules().tracking_uri,
            targets=targets,
        )

    def fit(
        self,
        targets: list[str] | None = None,
        runs: list[dict[str, Any]] | None = None,
        *,
        run_ids: list[str] | None = None,
        sweep: str | None = None,
        experiment: str | None = None,
        predict: list[dict[str, float]] | None = None,
        seed: int = 0,
        at_size: float | None = None,
    ) -> dict[str, Any]:
        """Fit mixture -> score models (per-domain mixing law, Gaussian process, LightGBM) and
        report each one's k-fold out-of-sample Spearman and regret@1 (never in-sample) and the
        chosen one. Observations: the service's runs (run_ids, sweep or experiment; the guard
        must accept them; targets: held-out domains, default all) or an inline table, runs=
        [{"id", "mixture": {domain: weight}, "scores": {target: score}}] with targets naming
        score keys (and "params", each run's model size in parameters, for runs of several
        sizes: then at_size, default the largest, is the size predicted at). Lower scores are
        better; the objective is the targets' mean. predict: a list of mixtures to predict,
        answered as predictions=[{score, interval}] in order."""
        result = fit_models(
            self._observations(runs, targets, run_ids=run_ids, sweep=sweep, experiment=experiment),
            seed=seed,
            at_size=at_size,
        )
        payload = result.to_json()
        if predict:
            payload["predictions"] = predictions(result, predict)
        return payload

    def propose(
        self,
        n: int = 4,
        *,
        min: dict[str, float] | None = None,
        max: dict[str, float] | None = None,
        targets: list[str] | None = None,
        runs: list[dict[str, Any]] | None = None,
        run_ids: list[str] | None = None,
        sweep: str | None = None,
        experiment: str | None = None,
        prior: dict[str, float] | None = None,
        seed: int = 0,
        at_size: float | None = None,
    ) -> dict[str, Any]:
        """The next n mixtures to run (Thompson sampling over bootstrap refits of the chosen
        model, within min/max shares per domain), each with its predicted objective and 90%
        interval; recommended: the mixture the fit believes best now; stop: {stop, reason},
        true when no proposal is likely to beat the best run; the models' k-fold figures.
        Same observations (and at_size) as fit. Deterministic for a seed: submit the proposals
        with submit, then compare."""
        fitted = fit_models(
            self._observations(runs, targets, run_ids=run_ids, sweep=sweep, experiment=experiment),
            seed=seed,
            at_size=at_size,
        )
        proposal = propose_mixtures(
            fitted, count=n, bounds=Bounds(min or {}, max or {}), seed=seed, prior=prior
        )
        return proposal.to_json()

    def verify_elastic(
        self,
        spec: ExperimentSpec,
        *,
        dp: int,
        resume_dp: int,
        key: str,
        split_step: int | None = None,
        wait_s: float = 0,
    ) -> dict[str, Any]:
        """Queue an elasticity check (a job of kind "verify", idempotent per key): train the
        experiment on dp ranks, checkpoint at split_step (default half-way), resume on
        resume_dp ranks, and check every step's global batch digest against an
        uninterrupted run. Returns the job; with wait_s > 0, waits like `wait` and returns
        its status: result.ok, first_mismatch, matched_steps."""
        request = verify_request(spec, dp, resume_dp, split_step)
        submitted = client.submit(self._service(), request, key=key, kind=JobKind.VERIFY)
        if wait_s <= 0:
            return submitted
        return client.wait(self._service(), submitted["job"]["id"], timeout_s=wait_s)
