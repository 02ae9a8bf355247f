"""Token-share mixtures and the per-lane "earliest finish" scheduler.

A mixture gives each dataset a share of *tokens*, normalised to sum to one and printed
canonically (fixed decimals) so equal mixes have equal fingerprints. The scheduler draws the
record whose completion keeps its dataset closest to its share (weighted fair queueing on
virtual finish times): any contiguous piece of a lane's stream deviates from its share by
at most a few record costs, however long the lane has run.

Design: docs/design/pipeline_plan.md
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.errors import ConfigError

SHARE_DECIMALS = 6


class Mixture:
    """Validated, normalised token shares aligned with a dataset order."""

    def __init__(self, weights: Mapping[str, float], dataset_names: Sequence[str]) -> None:
        unknown = sorted(set(weights) - set(dataset_names))
        if unknown:
            raise ConfigError(
                f"mixture names unknown dataset(s) {unknown}; known datasets are "
                f"{sorted(dataset_names)}. Fix the name or add the dataset."
            )
        missing = [name for name in dataset_names if name not in weights]
        if missing:
            raise ConfigError(
                f"dataset(s) {missing} have no mixture weight; give each a weight "
                "(0 leaves a dataset out)."
            )
        for name, weight in weights.items():
            if not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
                raise ConfigError(
                    f"mixture weight of '{name}' is {weight!r}; weights must be finite and >= 0."
                )
        total = float(sum(weights.values()))
        if total <= 0:
            raise ConfigError(
                "mixture weights sum to zero; give at least one dataset a weight > 0."
            )
        self.names = tuple(dataset_names)
        self.shares = tuple(round(weights[name] / total, SHARE_DECIMALS) for name in dataset_names)

    def canonical(self) -> dict[str, str]:
        """Shares as fixed-decimal strings keyed by dataset name (stable for hashing)."""
        return {
            name: f"{share:.{SHARE_DECIMALS}f}"
            for name, share in zip(self.names, self.shares, strict=True)
        }


@dataclass(frozen=True)
class MixturePhase:
    """One stage of a staged mixture: ``weights`` until the run has drawn ``until_tokens``
    estimated tokens in all (over every lane), or to the end for the last phase (None)."""

    weights: Mapping[str, float]
    until_tokens: int | None = None


def earliest_finish(
    tokens: Sequence[int],
    offsets: Sequence[float],
    *,
    next_costs: Sequence[int],
    shares: Sequence[float],
    active: Sequence[bool],
) -> int | None:
    """Index of the active dataset whose next record finishes first (design doc).

    ``next_costs[d]`` is only read for active datasets with a positive share. Returns
    None if no dataset is active.
    """
    best, best_finish = None, math.inf
    for d, (w, a) in enumerate(zip(shares, active, strict=True)):
        if a and w > 0:
            finish = (offsets[d] + tokens[d] + next_costs[d]) / w
            if finish < best_finish:
                best, best_finish = d, finish
    return best


def checked_phases(
    mixture: Mapping[str, float] | Sequence[MixturePhase], names: Sequence[str]
) -> list[tuple[int | None, Mixture]]:
    """``(until_tokens, Mixture)`` of each phase; ConfigError naming the phase if invalid."""
    if isinstance(mixture, Mapping):
        return [(None, Mixture(mixture, names))]
    phases = list(mixture)
    if not phases or not all(isinstance(p, MixturePhase) for p in phases):
        raise ConfigError(
            "mixture must be token shares by dataset, or a non-empty list of MixturePhase"
        )
    checked: list[tuple[int | None, Mixture]] = []
    previous = 0
    for k, phase in enumerate(phases):
        last = k == len(phases) - 1
        until = phase.until_tokens
        if last != (until is None):
            raise ConfigError(
                f"phase {k}: until_tokens={until!r}; every phase but the last ends at a token "
                "count, and the last runs to the end (until_tokens=None)"
            )
        if until is not None and (not isinstance(until, int) or until <= previous):
            raise ConfigError(
                f"phase {k}: until_tokens={until!r} must be an integer above the previous "
                f"phase's end ({previous})"
            )
        try:
            checked.append((until, Mixture(phase.weights, names)))
        except ConfigError as e:
            raise ConfigError(f"phase {k}: {e}") from e
        previous = until or previous
    return checked
