"""One unit of the benchmark's work, run in a worker process and answered as plain data:
a strategy's search on a truth (with the confirmations of Zephon's pick), or the RegMix
evaluation at one number of runs."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.mix_search import regmix
from benchmarks.mix_search.confirmation import confirm, names_a_winner
from benchmarks.mix_search.strategies import (
    STRATEGIES,
    ZEPHON,
    SearchTrace,
    as_array,
    repetition_bounds,
)
from benchmarks.mix_search.truths import DOMAINS, Truth
from orchestrator.search.propose import canonical_within_bounds

DESIGN_BEST = "initial design's best"
PRIOR = "token-proportional"


@dataclass(frozen=True)
class SearchTask:
    """``strategy`` spends ``budget`` runs on ``truth`` under ``seed``; ``confirm``: also
    confirm Zephon's pick against the initial design's best and the prior mix, and
    ``reconfirmations`` more times with other fresh seeds (how often the guard names a
    winner for these very picks)."""

    strategy: str
    truth: Truth
    budget: int
    seed: int
    confirm: bool = False
    reconfirmations: int = 0

    @property
    def cost(self) -> float:
        """Rough relative cost, to start the slow tasks first."""
        return 100.0 + self.budget if self.strategy == ZEPHON else self.budget / 100


@dataclass(frozen=True)
class RegmixTask:
    """Zephon's models on the first ``runs`` of RegMix's training runs."""

    runs: int
    data: Path

    @property
    def cost(self) -> float:
        """Rough relative cost: on 512 runs the Gaussian process's validation takes long."""
        return 200.0 if self.runs > 256 else 1.0


def mixture_json(mixture: np.ndarray) -> dict[str, float]:
    """Shares in ``DOMAINS`` order as a dict, rounded for the report."""
    return {d: round(float(w), 4) for d, w in zip(DOMAINS, mixture, strict=True)}


def run_search(task: SearchTask) -> dict[str, object]:
    """The search of ``task``, with the true regret of its pick."""
    truth = task.truth
    trace = STRATEGIES[task.strategy](truth, task.budget, task.seed)
    record: dict[str, object] = {
        "kind": "search",
        "strategy": task.strategy,
        "truth": truth.name,
        "flat": truth.is_flat,
        "budget": task.budget,
        "seed": task.seed,
        "runs": len(trace.observations.ids),
        "pick": mixture_json(trace.pick),
        "regret": truth.regret(trace.pick),
        "share_of_gain": truth.share_of_gain(trace.pick),
        "best_observed_regret": truth.regret(trace.best_observed),
    }
    if task.strategy == ZEPHON:
        record |= {"stop_at": trace.stop_at, "model": trace.model}
    if task.confirm:
        picks = comparators(truth, trace)
        rng = np.random.default_rng([task.seed, task.budget, 7])
        first = confirm(truth, trace.pick, picks, rng)
        again = [confirm(truth, trace.pick, picks, rng) for _ in range(task.reconfirmations)]
        record["confirmations"] = [c.to_json() for c in first]
        record["reconfirmations"] = {
            "sweeps": len(again),
            "naming_a_winner": sum(names_a_winner(sweep) for sweep in again),
            "per_comparator": {
                name: sum(
                    c.names_a_winner for sweep in again for c in sweep if c.comparator == name
                )
                for name in picks
            },
        }
    return record


def comparators(truth: Truth, trace: SearchTrace) -> dict[str, np.ndarray]:
    """What the sweep confirms Zephon's pick against: the best run of its initial design and
    the token-proportional mix (as the design ran it: within the bounds, rounded)."""
    (prior,) = canonical_within_bounds(
        as_array(truth.prior)[None], DOMAINS, repetition_bounds(truth), decimals=3
    )
    return {DESIGN_BEST: trace.design_best, PRIOR: as_array(prior)}


def run_regmix(task: RegmixTask) -> dict[str, object]:
    """The RegMix evaluation of ``task``."""
    return {"kind": "regmix", **regmix.evaluate(task.runs, task.data)}


def run_task(task: SearchTask | RegmixTask) -> dict[str, object]:
    """Either kind of task (the worker's entry point), with the CPU seconds it took."""
    from threadpoolctl import threadpool_limits

    start = time.process_time()
    # One BLAS thread: the workers already use every core, and a result must not depend on
    # how many threads summed its numbers.
    with threadpool_limits(limits=1):
        record = run_search(task) if isinstance(task, SearchTask) else run_regmix(task)
    return record | {"cpu_s": round(time.process_time() - start, 2)}
