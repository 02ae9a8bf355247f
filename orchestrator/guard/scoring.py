"""The comparison guard's scoring: one table row per variant and a decision on every pair.

:func:`compare` applies the rules (:mod:`orchestrator.guard.rules`) and, if none refuses,
scores each variant at the common eval step, ranks the variants and decides every pair
(:mod:`orchestrator.guard.decisions`). What a row holds: ``docs/design/guard.md``.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from orchestrator.evaluation import DEFAULT_METRIC
from orchestrator.experiment.variant_axis import AXIS_FIELD
from orchestrator.guard import decisions
from orchestrator.guard.comparison import (
    HELD_OUT_SCORE,
    SHORT,
    Comparison,
    ComparisonRow,
    RunSummary,
    ordered_runs,
)
from orchestrator.guard.decision_policy import DEFAULT_POLICY, DecisionPolicy
from orchestrator.guard.eval_smoothing import check_smoothed_score, smoothed_runs, smoothing_steps
from orchestrator.guard.held_out_metrics import metric_choice, with_metric_scores
from orchestrator.guard.rules import apply_rules, runs_by_arm
from orchestrator.guard.rules.variants import run_labels
from orchestrator.guard.signal_noise import DECIDED_ON, YardstickNoise, yardstick_noise
from orchestrator.guard.tasks import task_choice, with_task_scores
from pipeline import fingerprint


@dataclass(frozen=True)
class _ScoredVariant:
    """One variant's runs scored at the eval step, before the variants are ranked."""

    arm: str
    """:func:`~orchestrator.guard.rules.arm_key` of its runs."""
    runs: list[RunSummary]
    """Its runs, in :func:`ordered_runs` order."""
    blocks: dict[str, list[RunSummary]]
    """Seed block -> its runs."""
    aggregates: dict[str, float]
    """Run id -> the run's mean bits per byte over the decided-on domains."""
    bpb: dict[str, float]
    """Held-out domain -> mean bits per byte over seed blocks of the blocks' means."""
    aggregate_bpb: float
    """``aggregates`` averaged like ``bpb``: what the variants are ranked by."""
    document_bits: decisions.Scores
    """Seed block -> decided-on domain -> per-document bits, mean over the block's runs."""
    aggregate_se: float
    """The aggregate's standard error from the held-out sample of documents."""
    initial_bpb: dict[str, float]
    """Held-out domain -> step 0's bits per byte, averaged like ``bpb`` ({} unless every run
    scored its initial model)."""

    @property
    def variant_id(self) -> str:
        """Its runs' variant under one seed block, else a hash of :attr:`arm` (across seeds)."""
        if len(self.blocks) == 1:
            return self.runs[0].variant
        return hashlib.sha256(self.arm.encode()).hexdigest()

    @property
    def mixture(self) -> str:
        """Its variant as text (:attr:`RunSummary.label`)."""
        return self.runs[0].label

    def to_row(self, *, rank: int, vs_best: float, tier: int, best: bool) -> ComparisonRow:
        """Its row in the table, once ranked (``vs_best``: its difference to the first row)."""
        aggregates = list(self.aggregates.values())
        return ComparisonRow(
            rank=rank,
            variant=self.variant_id[:SHORT],
            variant_id=self.variant_id,
            mixture=self.mixture,
            shares={k: float(v) for k, v in sorted(self.runs[0].mixture.items())},
            replicates=len(self.runs),
            seeds=len(self.blocks),
            dp_sizes=",".join(str(n) for n in sorted({n for r in self.runs for n in r.dp_sizes})),
            bpb=self.bpb,
            aggregate_bpb=self.aggregate_bpb,
            aggregate_se=self.aggregate_se,
            aggregate_range=_value_range(aggregates),
            aggregate_std=statistics.stdev(aggregates) if len(aggregates) > 1 else 0.0,
            dp_range=max(
                _value_range([self.aggregates[r.run_id] for r in block])
                for block in self.blocks.values()
            ),
            runs=[r.name for r in self.runs],
            run_ids=[r.run_id for r in self.runs],
            run_aggregates=aggregates,
            vs_best=vs_best,
            tier=tier,
            best=best,
            initial_bpb=self.initial_bpb,
        )


def _score_variant(
    arm: str,
    runs: list[RunSummary],
    *,
    step: int,
    domains: list[str],
    chosen: list[str],
    doc_bytes: dict[str, np.ndarray],
) -> _ScoredVariant:
    """Score the variant ``arm`` (its ``runs``) at ``step``, its aggregate over ``chosen``."""
    blocks: dict[str, list[RunSummary]] = {}
    for run in runs:
        blocks.setdefault(run.seed, []).append(run)
    document_bits = {
        seed: {d: np.mean([r.documents[step][d]["bits"] for r in block], axis=0) for d in chosen}
        for seed, block in blocks.items()
    }
    aggregates = {r.run_id: _mean_bpb(r, step, chosen) for r in runs}
    scored_initial = step != 0 and all(0 in r.evals for r in runs)
    return _ScoredVariant(
        arm=arm,
        runs=runs,
        blocks=blocks,
        aggregates=aggregates,
        bpb={d: _mean_over_blocks(blocks, lambda r, d=d: float(r.evals[step][d])) for d in domains},
        aggregate_bpb=_mean_over_blocks(blocks, lambda r: aggregates[r.run_id]),
        document_bits=document_bits,
        aggregate_se=decisions.sampling_error(document_bits, doc_bytes),
        initial_bpb={
            d: _mean_over_blocks(blocks, lambda r, d=d: float(r.evals[0][d])) for d in domains
        }
        if scored_initial
        else {},
    )


def compare(runs: list[RunSummary], policy: DecisionPolicy = DEFAULT_POLICY) -> Comparison:
    """Check ``runs`` and, if nothing is refused, score each variant at the common eval step
    and decide every pair of variants under ``policy`` (:mod:`orchestrator.guard.decisions`):
    a difference counts only if its whole interval is beyond ``policy.threshold``.

    The aggregate (ranking and decisions) is the mean over the held-out domains
    ``policy.decide_on`` names (default: all of them) of bits per byte, or of another
    held-out metric with ``("METRIC",)`` or ``("METRIC:DOMAIN", ...)``
    (:mod:`orchestrator.guard.held_out_metrics`), or a task's score with
    ``("task:NAME[:METRIC]",)`` (:mod:`orchestrator.guard.tasks`). ``policy.family`` corrects
    the pairs' decisions for their number (:class:`~orchestrator.guard.decisions.Family`).
    ``policy.design``: ``sequential`` spends ``1 - confidence`` over every look as seeds are
    added, up to ``max_seeds``; ``fixed`` decides this one look at it
    (:mod:`orchestrator.guard.decisions.looks`). ``policy.smooth_last``: score each run on the
    mean of its last this many held-out evals (:mod:`orchestrator.guard.eval_smoothing`).
    ``ValueError`` when the runs cannot be scored as the policy asks (an unknown domain, a
    task they lack, fewer evals than ``smooth_last``)."""
    outcome = apply_rules(runs)
    step, domains = outcome.eval_step, outcome.domains
    if outcome.refusals or step is None:
        return Comparison(
            accepted=False,
            refusals=outcome.refusals,
            eval_step=step,
            rows=[],
            domains=domains,
            common_steps=outcome.common_steps,
            smooth_last=policy.smooth_last,
        )
    smoothed_steps = smoothing_steps(runs, step, last=policy.smooth_last)
    runs = smoothed_runs(runs, step, last=policy.smooth_last)
    score = HELD_OUT_SCORE
    task = task_choice(policy.decide_on)
    if task is not None:
        runs, key, score = with_task_scores(runs, step, *task)
        chosen = [key]
    else:
        metric, chosen = metric_choice(policy.decide_on, domains)
        if metric.name != DEFAULT_METRIC:
            runs, chosen, score = with_metric_scores(runs, step, metric, chosen)
    check_smoothed_score(policy.smooth_last, score)
    first_run = ordered_runs(runs)[0]
    doc_bytes = {
        d: np.asarray(first_run.documents[step][d]["bytes"], dtype=np.float64) for d in chosen
    }
    variants = sorted(
        (
            _score_variant(
                arm, group, step=step, domains=domains, chosen=chosen, doc_bytes=doc_bytes
            )
            for arm, group in runs_by_arm(runs).items()
        ),
        key=lambda v: (v.aggregate_bpb, v.mixture, v.variant_id),
    )
    order = [v.arm for v in variants]
    seeds = sorted({r.seed for r in runs})
    plan = policy.look_plan()
    level = plan.level(len(seeds))
    decided = decisions.decide_all(
        order,
        {v.arm: v.document_bits for v in variants},
        doc_bytes=doc_bytes,
        threshold=policy.threshold,
        confidence=1 - level if level > 0 else policy.confidence,
        family=policy.family,
        plan=plan,
    )
    if level == 0:  # one seed decides nothing; past max_seeds the budget is spent
        decided = [replace(p, decision=decisions.CANNOT_TELL) for p in decided]
    tier, best = decisions.tiers(order, decided), decisions.best(order, decided)
    top = variants[0].aggregate_bpb
    rows = [
        v.to_row(rank=rank, vs_best=v.aggregate_bpb - top, tier=tier[v.arm], best=best[v.arm])
        for rank, v in enumerate(variants, 1)
    ]
    row_of_arm = dict(zip(order, rows, strict=True))
    cost = _cost_per_seed(runs, len(variants))
    pairs = [
        {
            **pair.to_json(),
            "next_step": _next_step_json(pair, seeds=len(seeds), cost=cost),
            "a": row_of_arm[pair.a].variant,
            "b": row_of_arm[pair.b].variant,
            "a_mixture": row_of_arm[pair.a].mixture,
            "b_mixture": row_of_arm[pair.b].mixture,
        }
        for pair in decided
    ]
    labels = run_labels(runs)
    return Comparison(
        accepted=True,
        refusals=[],
        eval_step=step,
        rows=rows,
        domains=domains,
        common_steps=outcome.common_steps,
        contract_fingerprint=first_run.contract_fingerprint,
        recipe_fingerprint=first_run.recipe_fingerprint,
        pairs=pairs,
        seeds=seeds,
        threshold=policy.threshold,
        confidence=policy.confidence,
        design=policy.design,
        max_seeds=policy.max_seeds,
        look_level=level,
        sequence=fingerprint(
            {
                "contract": first_run.contract_fingerprint,
                "recipe": first_run.recipe_fingerprint,
                "variants": sorted(str(v.arm) for v in variants),
                "decided_on": chosen,
                "threshold": policy.threshold,
                "plan": plan.to_json(),
                "family": str(policy.family),
                **({"smooth_last": policy.smooth_last} if policy.smooth_last > 1 else {}),
            }
        ),
        cost_per_seed=cost,
        family=str(policy.family),
        decided_on=chosen,
        score=score,
        compared=str(first_run.contract.get(AXIS_FIELD, "mixture")),
        smooth_last=policy.smooth_last,
        smoothed_steps=smoothed_steps,
        yardsticks=_signal_noise(variants, step=step, domains=domains),
        data_read={labels[r.run_id]: r.data_read() for r in ordered_runs(runs) if r.data_read()},
    )


def _yardstick_scores(run: RunSummary, step: int, domains: list[str]) -> dict[str, float]:
    """Every yardstick ``run`` has at ``step`` (:mod:`orchestrator.guard.signal_noise`): each
    held-out domain's bits per byte, each other held-out metric per domain, each task's
    metrics (mean over its items)."""
    out = {f"bpb:{d}": float(run.evals[step][d]) for d in domains}
    for metric, scores in run.held_out.get(step, {}).items():
        out.update({f"{metric}:{d}": float(x) for d, x in scores.scores.items()})
    for task, items in run.task_items.get(step, {}).items():
        for metric in sorted({m for values in items.values() for m in values}):
            measured = [values[metric] for values in items.values() if metric in values]
            out[f"task:{task}:{metric}"] = statistics.fmean(measured)
    return out


def _signal_noise(
    variants: list[_ScoredVariant], *, step: int, domains: list[str]
) -> list[YardstickNoise]:
    """Each yardstick every run has, and the decided-on aggregate: its signal, noise and each
    variant's seed spread ([] for one variant)."""
    if len(variants) < 2:
        return []
    scores = {
        v.variant_id[:SHORT]: {
            seed: [
                {**_yardstick_scores(r, step, domains), DECIDED_ON: v.aggregates[r.run_id]}
                for r in block
            ]
            for seed, block in v.blocks.items()
        }
        for v in variants
    }
    runs = [run for by_seed in scores.values() for block in by_seed.values() for run in block]
    shared = set.intersection(*(set(run) for run in runs))
    return [
        yardstick_noise(
            name,
            {
                variant: {
                    seed: statistics.fmean(run[name] for run in block)
                    for seed, block in by_seed.items()
                }
                for variant, by_seed in scores.items()
            },
        )
        for name in [DECIDED_ON, *sorted(shared - {DECIDED_ON})]
    ]


def _cost_per_seed(runs: list[RunSummary], variants: int) -> dict[str, Any]:
    """One more seed: a run per variant, and their device-hours at the runs' mean."""
    known = [r.device_seconds for r in runs if r.device_seconds is not None]
    hours = None if not known else variants * statistics.fmean(known) / 3600
    return {"runs": variants, "device_hours": hours}


def _next_step_json(
    pair: decisions.PairDecision, *, seeds: int, cost: dict[str, Any]
) -> dict[str, Any] | None:
    """A pair that cannot be told: the seeds that would decide it, what they cost."""
    step = pair.next_step
    if step is None or pair.decision != decisions.CANNOT_TELL:
        return None
    more = None if step.seeds is None else step.seeds - seeds
    hours = cost.get("device_hours")
    return {
        **step.to_json(),
        "more_seeds": more,
        "runs": None if more is None else more * cost["runs"],
        "device_hours": None if more is None or hours is None else more * hours,
        "stop": step.seeds is None,
    }


def _mean_bpb(run: RunSummary, step: int, domains: list[str]) -> float:
    """``run``'s aggregate at ``step`` over ``domains``: the mean of their bits per byte."""
    return statistics.fmean(float(run.evals[step][d]) for d in domains)


def _mean_over_blocks(
    blocks: dict[str, list[RunSummary]], score: Callable[[RunSummary], float]
) -> float:
    """The mean over seed blocks of the mean ``score`` of a block's runs."""
    return statistics.fmean(statistics.fmean(score(r) for r in block) for block in blocks.values())


def _value_range(values: list[float]) -> float:
    """Largest minus smallest of ``values``."""
    return max(values) - min(values)
