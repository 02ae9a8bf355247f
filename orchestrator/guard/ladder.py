"""Decisions across model sizes: does what a small proxy decided hold at the next size?

A ladder sweep (``hydra.sweeper.replicate_models``) compares the same variants at each model
size on its own; :func:`ladder` then puts the sizes' accepted comparisons side by side: each
pair of mixtures' decision per size, whether they agree, the pairs whose decision flips
(decided one way at one size and the other way at another), and the rank agreement of each
two sizes (Kendall's tau over the mixtures' aggregate scores, with an interval).
Design: docs/design/guard.md ("Across model sizes").
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from orchestrator.guard.decisions import A_BETTER, B_BETTER, CANNOT_TELL

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class PairAcrossSizes:
    """One pair of mixtures (``first`` < ``second`` as labels) decided at each size."""

    first: str
    second: str
    decisions: dict[str, str]
    """Size -> ``first_better``, ``second_better`` or ``cannot_tell``."""

    @property
    def flipped(self) -> bool:
        """Decided one way at one size and the other way at another."""
        made = set(self.decisions.values()) - {CANNOT_TELL}
        return len(made) > 1

    @property
    def agree(self) -> bool:
        """The same decision at every size."""
        return len(set(self.decisions.values())) == 1

    def to_json(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "second": self.second,
            "decisions": self.decisions,
            "agree": self.agree,
            "flipped": self.flipped,
        }


@dataclass(frozen=True)
class RankAgreement:
    """Kendall's tau between two sizes' orders of the mixtures by aggregate score."""

    sizes: tuple[str, str]
    mixtures: int
    tau: float | None
    """None with fewer than 2 mixtures, or a size whose scores are all equal."""
    interval: tuple[float, float] | None
    """95%: tau -/+ 1.96 times its standard error under independence,
    ``sqrt(2 (2n + 5) / (9 n (n - 1)))``, clipped to [-1, 1] (wide for a few mixtures)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sizes": list(self.sizes),
            "mixtures": self.mixtures,
            "tau": self.tau,
            "interval": None if self.interval is None else list(self.interval),
        }


def _oriented(pair: dict[str, Any]) -> tuple[str, str, str]:
    """``(first, second, decision)`` of a comparison's pair, its labels in sorted order and
    the decision said of ``first``."""
    a, b, decision = pair["a_mixture"], pair["b_mixture"], pair["decision"]
    if a <= b:
        named = {A_BETTER: "first_better", B_BETTER: "second_better"}
        return a, b, named.get(decision, CANNOT_TELL)
    named = {A_BETTER: "second_better", B_BETTER: "first_better"}
    return b, a, named.get(decision, CANNOT_TELL)


def kendall_tau(sizes: tuple[str, str], scores: list[dict[str, float]]) -> RankAgreement:
    """Kendall's tau-b between two sizes' aggregate scores (``scores[i]``: mixture -> score),
    over the mixtures both have."""
    common = sorted(set(scores[0]) & set(scores[1]))
    n = len(common)
    if n < 2:
        return RankAgreement(sizes, n, None, None)
    from scipy.stats import kendalltau  # deferred: scipy.stats takes ~0.5 s to import

    tau = kendalltau([scores[0][m] for m in common], [scores[1][m] for m in common]).statistic
    if not math.isfinite(tau):
        return RankAgreement(sizes, n, None, None)
    half = Z_95 * math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))
    return RankAgreement(sizes, n, float(tau), (max(-1.0, tau - half), min(1.0, tau + half)))


def ladder(comparisons: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The sizes' accepted comparisons (size -> ``Comparison.to_json()``, in ladder order)
    side by side: per pair of mixtures its decision at each size, agreement and flips, and
    Kendall's tau of each two consecutive sizes. Sizes whose comparison was refused are
    listed and left out."""
    accepted = {size: c for size, c in comparisons.items() if c.get("accepted")}
    refused = [size for size in comparisons if size not in accepted]
    by_pair: dict[tuple[str, str], dict[str, str]] = {}
    for size, comparison in accepted.items():
        for pair in comparison.get("pairs", []):
            first, second, decision = _oriented(pair)
            by_pair.setdefault((first, second), {})[size] = decision
    sizes = list(accepted)
    pairs = [
        PairAcrossSizes(first, second, decisions)
        for (first, second), decisions in sorted(by_pair.items())
        if len(decisions) == len(sizes)
    ]
    scores = {
        size: {row["mixture"]: row["aggregate_bpb"] for row in c.get("rows", [])}
        for size, c in accepted.items()
    }
    taus = [
        kendall_tau((low, high), [scores[low], scores[high]])
        for low, high in itertools.pairwise(sizes)
    ]
    return {
        "sizes": sizes,
        "refused_sizes": refused,
        "pairs": [p.to_json() for p in pairs],
        "flipped": sum(p.flipped for p in pairs),
        "agreeing": sum(p.agree for p in pairs),
        "rank_agreement": [t.to_json() for t in taus],
    }


def ladder_markdown(result: dict[str, Any]) -> str:
    """The ladder as a section of the sweep's report."""
    sizes = result["sizes"]
    lines = [f"### Across model sizes: {' -> '.join(sizes)}", ""]
    if result["refused_sizes"]:
        lines += [
            f"Left out (their comparison was refused): {', '.join(result['refused_sizes'])}.",
            "",
        ]
    if len(sizes) < 2:
        return "\n".join([*lines, "Fewer than two sizes were compared: nothing to line up."]) + "\n"
    lines += [
        "| first | second | " + " | ".join(sizes) + " | across sizes |",
        "|---|---|" + "---|" * len(sizes) + "---|",
    ]
    for pair in result["pairs"]:
        verdict = (
            "**FLIPPED**" if pair["flipped"] else "agree" if pair["agree"] else "not decided alike"
        )
        lines.append(
            f"| {pair['first']} | {pair['second']} | "
            + " | ".join(pair["decisions"][s] for s in sizes)
            + f" | {verdict} |"
        )
    lines.append("")
    for agreement in result["rank_agreement"]:
        low, high = agreement["sizes"]
        if agreement["tau"] is None:
            lines.append(
                f"Kendall's tau {low} vs {high}: undefined ({agreement['mixtures']} mixtures)."
            )
            continue
        lo, hi = agreement["interval"]
        lines.append(
            f"Kendall's tau of the mixtures' ranks, {low} vs {high}: {agreement['tau']:+.2f} "
            f"(95% interval [{lo:+.2f}, {hi:+.2f}], {agreement['mixtures']} mixtures)."
        )
    total = len(result["pairs"])
    lines.append(
        f"{result['agreeing']} of {total} pairs decided alike at every size; "
        f"{result['flipped']} flipped (decided one way at one size and the other at another)."
    )
    return "\n".join(lines) + "\n"
