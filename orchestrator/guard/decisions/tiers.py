"""Reading a comparison's decided pairs: tiers of variants that cannot be told apart, and
whether the first is best."""

from __future__ import annotations

from orchestrator.guard.decisions.pair import A_BETTER, B_BETTER, PairDecision


def _better_by_pair(pairs: list[PairDecision]) -> dict[tuple[str, str], bool]:
    """``(x, y) -> True`` if ``x`` is decided better than ``y``, for both orientations of each pair."""
    out: dict[tuple[str, str], bool] = {}
    for p in pairs:
        out[(p.a, p.b)] = p.decision == A_BETTER
        out[(p.b, p.a)] = p.decision == B_BETTER
    return out


def _decided_better(better: dict[tuple[str, str], bool], x: str, y: str) -> bool:
    if (x, y) not in better:
        raise ValueError(f"no decision between {x!r} and {y!r}")
    return better[(x, y)]


def tiers(order: list[str], pairs: list[PairDecision]) -> dict[str, int]:
    """Group variants that cannot be told apart into tiers 1, 2, ...

    ``order`` is best (lowest aggregate) first. Tier 1 starts with ``order[0]``;
    each next variant joins the current tier unless it is decided worse than
    the current tier's first variant, in which case it starts the next tier.
    ``pairs`` must hold a decision (either orientation) for each such
    comparison, else ``ValueError``.
    """
    better = _better_by_pair(pairs)
    out: dict[str, int] = {}
    tier, head = 0, None
    for v in order:
        if head is None or _decided_better(better, head, v):
            tier, head = tier + 1, v
        out[v] = tier
    return out


def best(order: list[str], pairs: list[PairDecision]) -> dict[str, bool]:
    """``True`` only for ``order[0]`` and only if it is decided better than every other variant.

    A single variant has beaten nothing, so it is not best.
    """
    better = _better_by_pair(pairs)
    out = dict.fromkeys(order, False)
    if len(order) > 1:
        head = order[0]
        out[head] = all(_decided_better(better, head, v) for v in order[1:])
    return out
