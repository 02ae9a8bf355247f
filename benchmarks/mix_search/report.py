"""The report: summaries of the task records, the goals met or missed, the markdown page.

Everything the markdown shows is computed from the JSON report alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from scipy.stats import binomtest

from benchmarks.mix_search import truths
from benchmarks.mix_search.confirmation import DOCUMENT_NOISE_SD, DOCUMENTS, HARDNESS_SD, SEEDS
from benchmarks.mix_search.regmix import CHOSEN, REGMIX_LIGHTGBM
from benchmarks.mix_search.strategies import ZEPHON
from benchmarks.mix_search.tasks import DESIGN_BEST, PRIOR
from orchestrator.guard.decisions import A_BETTER, B_BETTER, CANNOT_TELL

SEARCH_GOAL_BUDGETS = (32, 128)
"""The goal: Zephon's median regret at 32 runs <= random sampling's at 128."""
FLAT_WINNER_GOAL = 0.05
"""Largest share of flat-truth searches whose confirmation names a winner."""
FLAT_MIN_SEARCHES = 20
"""Fewest flat-truth searches the share is judged on (fewer: not measured)."""
REGMIX_GOAL = (64, 0.97)
"""Spearman on RegMix's test runs of the chosen model fitted on 64 runs."""
BEST_OBSERVED = "zephon (best observed run)"
"""The row of the best run Zephon's search observed (not its pick)."""


def _median_or_none(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def strategy_rows(searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy and budget over the non-flat truths: runs, median regret and its
    quartiles, the median share of the achievable gain reached. Zephon's best observed run
    is a row of its own."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in searches:
        if record["flat"]:
            continue
        groups.setdefault((record["strategy"], record["budget"]), []).append(record)
        if record["strategy"] == ZEPHON:
            best = {**record, "regret": record["best_observed_regret"], "share_of_gain": None}
            groups.setdefault((BEST_OBSERVED, record["budget"]), []).append(best)
    rows = []
    for (strategy, budget), records in groups.items():
        regrets = [r["regret"] for r in records]
        shares = [r["share_of_gain"] for r in records if r["share_of_gain"] is not None]
        rows.append(
            {
                "strategy": strategy,
                "budget": budget,
                "searches": len(records),
                "median_regret": _median_or_none(regrets),
                "regret_q25": float(np.percentile(regrets, 25)),
                "regret_q75": float(np.percentile(regrets, 75)),
                "median_share_of_gain": _median_or_none(shares),
            }
        )
    return rows


def stop_rows(searches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per truth kind and budget of Zephon's searches: how often the stop rule said stop
    before the budget was spent, and at how many runs it first did."""
    groups: dict[tuple[bool, int], list[dict[str, Any]]] = {}
    for record in searches:
        if record["strategy"] == ZEPHON:
            groups.setdefault((record["flat"], record["budget"]), []).append(record)
    rows = []
    for (flat, budget), records in sorted(groups.items()):
        stops = [r["stop_at"] for r in records if r["stop_at"] is not None]
        rows.append(
            {
                "truth": "flat" if flat else "non-flat",
                "budget": budget,
                "searches": len(records),
                "stopped": len(stops),
                "median_stop_at": _median_or_none(stops),
                "final_models": dict(Counter(r["model"] for r in records)),
            }
        )
    return rows


def _rate_with_interval(count: int, total: int) -> dict[str, Any]:
    """``count`` of ``total`` with its share and exact (Clopper-Pearson) 95% interval."""
    if not total:
        return {"count": count, "total": total, "share": None, "interval": None}
    interval = binomtest(count, total).proportion_ci(0.95)
    return {
        "count": count,
        "total": total,
        "share": count / total,
        "interval": [interval.low, interval.high],
    }


def confirmation_rows(searches: list[dict[str, Any]], flat: bool) -> dict[str, Any]:
    """Decisions of the confirmations of Zephon's picks on the flat (or non-flat) truths:
    the first confirmation of each search, and how often the re-confirmations of the same
    picks named a winner."""
    confirmed = [r for r in searches if r["flat"] == flat and "confirmations" in r]
    per_comparator = []
    for comparator in (DESIGN_BEST, PRIOR):
        outcomes = [
            c for r in confirmed for c in r["confirmations"] if c["comparator"] == comparator
        ]
        counts = Counter(c["decision"] for c in outcomes)
        per_comparator.append(
            {
                "comparator": comparator,
                "comparisons": len(outcomes),
                "decisions": {k: counts.get(k, 0) for k in (A_BETTER, B_BETTER, CANNOT_TELL)},
                "same_mixture": counts.get("same_mixture", 0),
                "median_true_difference": _median_or_none([c["true_difference"] for c in outcomes]),
                "reconfirmations_naming_a_winner": _rate_with_interval(
                    sum(r["reconfirmations"]["per_comparator"][comparator] for r in confirmed),
                    sum(r["reconfirmations"]["sweeps"] for r in confirmed),
                ),
            }
        )
    winners = sum(
        any(c["decision"] in (A_BETTER, B_BETTER) for c in r["confirmations"]) for r in confirmed
    )
    again = sum(r["reconfirmations"]["naming_a_winner"] for r in confirmed)
    sweeps = sum(r["reconfirmations"]["sweeps"] for r in confirmed)
    return {
        "searches": len(confirmed),
        "budget": sorted({r["budget"] for r in confirmed}),
        "searches_naming_a_winner": winners,
        "share_naming_a_winner": winners / len(confirmed) if confirmed else None,
        "reconfirmations_naming_a_winner": _rate_with_interval(again, sweeps),
        "all_confirmations_naming_a_winner": _rate_with_interval(
            winners + again, len(confirmed) + sweeps
        ),
        "per_comparator": per_comparator,
    }


def cpu_rows(records: list[dict[str, Any]]) -> dict[str, float]:
    """CPU seconds the tasks took, by kind: where the benchmark's time goes."""
    totals: Counter[str] = Counter()
    for record in records:
        if record["kind"] == "regmix":
            kind = "RegMix's runs"
        elif record["strategy"] == ZEPHON:
            kind = "zephon on the flat truth" if record["flat"] else "zephon"
        else:
            kind = "random, grid, regmix"
        totals[kind] += record["cpu_s"]
    return {kind: round(seconds, 1) for kind, seconds in totals.items()}


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal with the measured figure and whether it is met (None: not measured)."""
    medians = {(r["strategy"], r["budget"]): r["median_regret"] for r in report["strategies"]}
    search, random = (
        medians.get((ZEPHON, SEARCH_GOAL_BUDGETS[0])),
        medians.get(("random", SEARCH_GOAL_BUDGETS[1])),
    )
    flat = report["flat_confirmation"]
    runs, floor = REGMIX_GOAL
    regmix_rows = [r for r in report["regmix"] if r["runs"] == runs]
    chosen = (
        next(m for m in regmix_rows[0]["models"] if m["name"] == CHOSEN) if regmix_rows else None
    )
    return [
        {
            "goal": f"Zephon's median regret at {SEARCH_GOAL_BUDGETS[0]} runs <= random "
            f"sampling's at {SEARCH_GOAL_BUDGETS[1]}",
            "measured": f"{_format_number(search)} vs {_format_number(random)}",
            "met": None if search is None or random is None else search <= random,
        },
        {
            "goal": f"flat truth: share of searches whose confirmation names a winner <= "
            f"{FLAT_WINNER_GOAL:.0%} over >= {FLAT_MIN_SEARCHES} searches (judged on every "
            "confirmation of their picks: the first and the re-confirmations)",
            "measured": f"first confirmations {flat['searches_naming_a_winner']} of "
            f"{flat['searches']}; all {_rate_text(flat['all_confirmations_naming_a_winner'])}",
            "met": None
            if flat["searches"] < FLAT_MIN_SEARCHES
            else flat["all_confirmations_naming_a_winner"]["share"] <= FLAT_WINNER_GOAL,
        },
        {
            "goal": f"RegMix's runs: Spearman on the 256 test runs of the chosen model fitted "
            f"on {runs} runs >= {floor}",
            "measured": f"{_format_number(chosen['test_spearman'])} ({chosen['model']})"
            if chosen
            else "not run",
            "met": None
            if chosen is None or chosen["test_spearman"] is None
            else chosen["test_spearman"] >= floor,
        },
    ]


def _rate_text(rate: dict[str, Any]) -> str:
    if rate["share"] is None:
        return "none"
    low, high = rate["interval"]
    return f"{rate['count']} of {rate['total']}, {rate['share']:.1%} [95% CI {low:.1%}-{high:.1%}]"


def _format_number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _format_verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def to_markdown(report: dict[str, Any]) -> str:
    """The page of ``report``."""
    settings = report["settings"]
    lines = [
        "# Mix search benchmarks",
        "",
        f"{report['machine']}, {report['date']}; wall time {report['wall_s']:.0f} s with "
        f"{settings['workers']} worker processes ({report['cpu_s']:.0f} CPU s; other "
        f"processes used {_format_number(report['other_load_percent'], 0)}% of the machine meanwhile). "
        f"Command: `{report['command']}`. CPU seconds of the tasks: "
        + ", ".join(f"{kind} {seconds:.0f}" for kind, seconds in report["task_cpu_s"].items())
        + ".",
        "",
        "## Goals",
        "",
        "| goal | measured | verdict |",
        "|---|---|---|",
    ]
    lines += [
        f"| {g['goal']} | {g['measured']} | {_format_verdict(g['met'])} |" for g in report["goals"]
    ]
    lines += _truths_section(report)
    lines += _strategies_section(report)
    lines += _confirmation_section(report)
    lines += _regmix_section(report)
    return "\n".join(lines) + "\n"


def _truths_section(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Synthetic truths",
        "",
        f"6 training domains d1..d6; the objective is the mean over 6 held-out domains of "
        f"`L_i(r) = c_i + k_i exp(sum_j t_ij r_j) + beta max(0, r_s - cap)^2` with "
        f"c_i ~ U{list(truths.CONSTANT_RANGE)}, k_i ~ U{list(truths.SCALE_RANGE)}, "
        f"t_ii ~ U{list(truths.SELF_EFFECT_RANGE)} (the small domain s: "
        f"U{list(truths.SMALL_SELF_EFFECT_RANGE)}), t_ij ~ N(0, {truths.CROSS_EFFECT_SD}^2) off "
        f"the diagonal, cap ~ U{list(truths.CAP_RANGE)} (the share at which s is seen "
        f"{truths.MAX_EPOCHS:.0f} epochs), beta = {truths.PENALTY}. Run noise: sd "
        f"`sigma0 (1 + 2 ||r - uniform||_1)`, sigma0 = {truths.SIGMA0}, half of its variance "
        "shared by a run's 6 scores. The flat truth: k = 0, beta = 0 (noise only). Gain = "
        "f(uniform) - f(optimum); the optimum is the best of 40,000 Dirichlet draws refined "
        "by SLSQP from the best 32.",
        "",
        "| truth | small domain | cap | f(uniform) | f(token prior) | f(optimum) | achievable "
        "gain | optimum's small-domain share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for truth in report["truths"]:
        small = truth["small_domain"]
        lines.append(
            f"| {truth['name']} | {small} | {truth['cap']:.3f} | "
            f"{truth['objective_uniform']:.4f} | {truth['objective_prior']:.4f} | "
            f"{truth['objective_optimum']:.4f} | {truth['achievable_gain']:.4f} | "
            f"{truth['optimum'][small]:.3f} |"
        )
    return lines


def _strategies_section(report: dict[str, Any]) -> list[str]:
    settings = report["settings"]
    budgets = sorted({r["budget"] for r in report["strategies"]})
    order = [ZEPHON, BEST_OBSERVED, "random", "grid", "regmix"]
    cells = {(r["strategy"], r["budget"]): r for r in report["strategies"]}
    searches = {r["searches"] for r in report["strategies"]}
    lines = [
        "",
        "## Strategies: regret of the pick",
        "",
        f"Median true regret f(pick) - f(optimum) [25th-75th percentile] / median share of "
        f"the achievable gain reached, over {settings['truths']} truths x "
        f"{settings['repetitions']} seeds ({', '.join(map(str, sorted(searches)))} searches "
        "a cell). zephon: initial design (uniform, token prior, budget/4 Dirichlet draws), "
        "then 2 rounds of fit -> propose(half the rest) within the 4-epoch cap, pick = the "
        "recommended mixture of a last fit; its best observed run for comparison. random: "
        "Dirichlet(1), "
        "pick = best observed. grid: the coarsest sweep grid with >= budget points, budget of "
        "them strided, pick = best observed. regmix: RegMix's sampler around the prior, "
        "LightGBM (min_child_samples=20), mean of the top 128 of 100,000 predicted.",
        "",
        "| strategy | " + " | ".join(f"{b} runs" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for strategy in order:
        row = [strategy]
        for budget in budgets:
            cell = cells.get((strategy, budget))
            row.append(
                "-"
                if cell is None
                else f"{cell['median_regret']:.4f} [{cell['regret_q25']:.4f}-"
                f"{cell['regret_q75']:.4f}] / {_format_percent(cell['median_share_of_gain'])}"
            )
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Zephon's stop rule (recorded, not obeyed). No mixture is run twice here, so its "
        "minimum gain (the replicate noise) is 0 and no replicates can show the runs flat: "
        "it says stop only when the fit ranks held-out mixtures well and no proposal's "
        "optimistic gain is positive.",
        "",
        "| truths | budget | searches | said stop | median runs at first stop | final fit's model |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in report["stops"]:
        models = ", ".join(f"{name} {count}" for name, count in sorted(row["final_models"].items()))
        lines.append(
            f"| {row['truth']} | {row['budget']} | {row['searches']} | {row['stopped']} | "
            f"{_format_number(row['median_stop_at'], 0)} | {models} |"
        )
    return lines


def _format_percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _confirmation_section(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Confirmation by the guard",
        "",
        f"Zephon's pick (a) against the best run of its initial design and against the "
        f"token-proportional mix (b), each trained under {SEEDS} fresh seeds and decided by "
        "`decide_pair` at the sweep's confidence, 1 - 0.05/k for k distinct comparators "
        "(`orchestrator.search.confirmation`, Bonferroni: 97.5% for two), "
        f"on 6 held-out domains x {DOCUMENTS} documents (fixed byte counts; "
        f"bits = bytes x (true score + seed offset + run noise + document hardness "
        f"(sd {HARDNESS_SD}) + per-run document noise (sd {DOCUMENT_NOISE_SD}))). "
        "'same mixture': the pick is the comparator, nothing to decide.",
        "",
        "| truths | searches (budget) | comparator | pick better | comparator better | cannot "
        "tell | same mixture | median true difference (pick - comparator) | re-confirmations "
        "naming a winner |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, summary in (
        ("flat", report["flat_confirmation"]),
        ("non-flat", report["power"]),
    ):
        for row in summary["per_comparator"]:
            decisions = row["decisions"]
            lines.append(
                f"| {label} | {summary['searches']} ({', '.join(map(str, summary['budget']))}) "
                f"| {row['comparator']} | {decisions[A_BETTER]} | "
                f"{decisions[B_BETTER]} | {decisions[CANNOT_TELL]} | {row['same_mixture']} | "
                f"{_format_number(row['median_true_difference'])} | "
                f"{_rate_text(row['reconfirmations_naming_a_winner'])} |"
            )
    flat, power = report["flat_confirmation"], report["power"]
    lines += [
        "",
        f"Flat truth: {flat['searches_naming_a_winner']} of {flat['searches']} searches had a "
        f"confirmation naming a winner ({_format_percent(flat['share_naming_a_winner'])}; goal <= "
        f"{FLAT_WINNER_GOAL:.0%}); re-confirming the same picks with other fresh seeds "
        f"({report['settings']['reconfirmations']} times each) named one in "
        f"{_rate_text(flat['reconfirmations_naming_a_winner'])} confirmations (a "
        "confirmation names a winner when either of its comparisons is decided; a "
        "comparison with the same mixture decides nothing). Non-flat truths (power, for "
        "information): "
        f"{power['searches_naming_a_winner']} of {power['searches']} searches, "
        f"re-confirmations {_rate_text(power['reconfirmations_naming_a_winner'])}.",
    ]
    return lines


def _regmix_section(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## RegMix's published runs",
        "",
        "Target `metric/the_pile_pile_cc_val_loss`; 17 domains; the first n of the 512 "
        "training runs; 5-fold out-of-sample figures of `fit`, then each model fitted on the n "
        "runs and ranked against the 256 test runs. '-': not fitted, or a constant prediction "
        "(RegMix's LightGBM below ~40 runs: every tree is one leaf).",
        "",
        "| runs | model | CV Spearman | CV regret@1 | test Spearman (256 runs) | note |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for evaluation in report["regmix"]:
        for model in evaluation["models"]:
            name = model["name"]
            if name == CHOSEN:
                name = f"**chosen: {model['model']}**"
            elif name == REGMIX_LIGHTGBM:
                name = f"*{name}*"
            lines.append(
                f"| {evaluation['runs']} | {name} | {_format_number(model['cv_spearman'])} | "
                f"{_format_number(model['cv_regret'])} | {_format_number(model['test_spearman'])} | "
                f"{model['note']} |"
            )
    return lines
