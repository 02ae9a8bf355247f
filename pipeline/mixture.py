"""Token-share mixtures and the per-lane "earliest finish" scheduler.

A mixture gives each dataset a share of *tokens*. Shares are normalised to sum
to one and printed canonically (fixed decimals) so equal mixes have equal
fingerprints.

Scheduling recurrence (per lane; weighted fair queueing on virtual finish
times). With target shares ``w_d``, estimated tokens drawn so far ``t_d``
(record bytes x measured tokens/byte, + 1 for EOS; ``t_d(0) = 0``), the
lane's phase offset ``o_d`` of each dataset and ``c_d`` the estimated cost of
the record the lane would draw next from ``d``::

    d* = argmin_{d active, w_d > 0}  (o_d + t_d + c_d) / w_d     (ties: lowest index)
    t_{d*} += c_{d*}

``(o_d + t_d + c_d) / w_d`` is the virtual time at which dataset ``d`` would
have received its share once that record is done: the record whose completion
keeps its dataset closest to its share is drawn. At the start this draws the
dataset whose record is most due, ``argmin (o_d + c_d) / w_d`` (without
offsets: the largest share per token of its record), not one record of every
dataset in index order as the former rule on *start* times ``t_d / w_d`` did
(all 0 at the start: a 2% dataset had 1 of a lane's first 3 records).

Phases. ``o_d = -phi_d * cbar_d`` with ``phi_d`` in ``[0, 1)`` and ``cbar_d`` the
mean estimated record cost of ``d``: as if the lane had already served a
fraction ``phi_d`` of a record of ``d``. ``pipeline.source`` spaces each
dataset's phases evenly across lanes, so lanes are out of phase and their
record-granularity errors partly cancel in the global batch instead of
adding up.

Bound. Let ``T = sum_d t_d``, ``cmax_d`` the largest record cost of ``d`` and
``s_d = phi_d * cbar_d`` (``< cmax_d``). While every dataset with ``w_d > 0`` is
active, after every draw::

    -A_d <= t_d - w_d * T <= B_d
    B_d = (1 - w_d) * s_d + w_d * sum_{e != d} (cmax_e - s_e)
    A_d = (1 - w_d) * (cmax_d - s_d) + w_d * sum_{e != d} s_e
    A_d + B_d = K_d = (1 - w_d) * cmax_d + w_d * sum_{e != d} cmax_e

Proof. Surplus: when ``d`` was last drawn its finish time
``V = (o_d + t_d) / w_d`` was the smallest, so every other ``e`` had
``o_e + t_e + c_e >= w_e * V`` then, and ``t_e`` only grew since; sum over
``e != d`` with ``sum_{e != d} w_e = 1 - w_d``. Deficit: ``F_d = (o_d + t_d + c_d) / w_d``
never decreases, and every ``e`` drawn at least once has ``(o_e + t_e) / w_e`` =
its finish time at its last draw ``<= F_d`` then ``<= F_d`` now (``e`` never
drawn: ``t_e = 0``); sum over ``e != d``. (Shares enter only as ratios, so ``w``
may be taken normalised.) Tokens of a record arrive one by one, and inside a
record ``t_d - w_d * T`` moves linearly between its values at the two ends, so
the bound holds at *every* token of the lane's stream, and any contiguous piece
of the stream (a packed sequence) deviates from its share by at most ``K_d``
tokens: a few record costs, however long the lane has run.

Start. A lane may draw its first record out of turn (``pipeline.source`` draws
it from the dataset ``d0`` whose record is due, for a systematic start across
lanes), then the recurrence runs. The state after that draw is a start with
offset ``o_{d0} + c0`` (``c0``: the record's cost); the same sums give
``B_{d0} = max(B_{d0}, (1 - w_{d0}) * c0)`` and, for ``d != d0``,
``A_d += w_d * (max(c0, s_{d0}) - s_{d0})``, so ``K_d`` grows by at most ``c0``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

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


def earliest_finish(
    tokens: Sequence[int],
    offsets: Sequence[float],
    next_costs: Sequence[int],
    shares: Sequence[float],
    active: Sequence[bool],
) -> int | None:
    """Index of the active dataset whose next record finishes first (module docstring).

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
