"""Propose: the next mixtures to run, by Thompson sampling over the fit's bootstrap refits,
within bounds and repetition caps, rounded canonically; the best mixture now; when to stop.

Each proposal is the minimum of another refit, so a batch spreads where the fit is
unsure. Stop when no proposal's optimistic gain over the best run exceeds ``min_gain``
(by default the replicate noise), and a fit that ranks poorly says stop only on flat runs.

Design: docs/design/search.md
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from orchestrator.errors import SearchError
from orchestrator.experiment.mixture import TOLERANCE, mix_units
from orchestrator.search.fit import INTERVAL, FitResult, Prediction
from orchestrator.search.observations import Observations

POOL_SIZE = 4096
"""Candidate mixtures each refit is minimised over."""
LOCAL_DRAWS = 256
"""Draws around each refit's minimum to refine it."""
STOP_MIN_SPEARMAN = 0.5
"""Least out-of-sample Spearman correlation of the chosen model for the stop signal to fire."""
REPETITION_EPOCHS = 4.0
"""Default cap: a dataset may be seen at most this many times in a run's token budget."""


@dataclass(frozen=True)
class Bounds:
    """Per-domain limits on a proposal's token shares (inclusive)."""

    lower: Mapping[str, float] = field(default_factory=dict)
    """Least share per domain (default 0)."""
    upper: Mapping[str, float] = field(default_factory=dict)
    """Most share per domain (default 1)."""

    def with_repetition_cap(
        self,
        tokens: Mapping[str, float],
        budget_tokens: float,
        max_epochs: float = REPETITION_EPOCHS,
    ) -> Bounds:
        """These bounds, each domain's upper bound lowered so that a run of ``budget_tokens``
        tokens sees at most ``max_epochs`` times the domain's ``tokens``."""
        upper = dict(self.upper)
        for domain, count in tokens.items():
            cap = max_epochs * count / budget_tokens
            upper[domain] = min(upper.get(domain, 1.0), cap)
        return Bounds(dict(self.lower), upper)

    def arrays(self, domains: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` in ``domains`` order; :class:`SearchError` if no mixture fits."""
        problems = [
            f"bound for unknown domain {d!r}; domains: {list(domains)}"
            for d in sorted({*self.lower, *self.upper} - set(domains))
        ]
        lower = np.array([float(self.lower.get(d, 0.0)) for d in domains])
        upper = np.array([min(1.0, float(self.upper.get(d, 1.0))) for d in domains])
        problems += [
            f"{d}: min {lo} > max {hi}"
            for d, lo, hi in zip(domains, lower, upper, strict=True)
            if lo > hi + TOLERANCE or lo < 0
        ]
        if lower.sum() > 1 + TOLERANCE:
            problems.append(f"the minimums sum to {lower.sum():.4f} > 1: lower some of them")
        if upper.sum() < 1 - TOLERANCE:
            problems.append(
                f"the maximums (with repetition caps) sum to {upper.sum():.4f} < 1: no mixture "
                "fits; raise some maximums, or the data's size against the token budget"
            )
        if problems:
            raise SearchError(problems)
        return lower, upper


@dataclass(frozen=True)
class StopSignal:
    """Whether another round is worth running, and why."""

    stop: bool
    reason: str

    def to_json(self) -> dict[str, object]:
        """The signal as plain data."""
        return {"stop": self.stop, "reason": self.reason}


@dataclass(frozen=True)
class Proposal:
    """The next mixtures to run, the mixture the fit believes best now, and the stop signal."""

    proposals: list[Prediction]
    recommended: Prediction
    stop: StopSignal
    fit: FitResult
    best_observed: Prediction
    """The observed mixture with the best mean objective (``predicted``: its observed mean)."""
    bounds: Bounds
    """The bounds every proposal kept (with the repetition caps)."""

    def to_json(self) -> dict[str, object]:
        """The proposal as plain data: the ``zephon propose --json`` document."""
        fitted = self.fit.to_json()
        return {
            "proposals": [p.to_json() for p in self.proposals],
            "recommended": self.recommended.to_json(),
            "best_observed": self.best_observed.to_json(),
            "stop": self.stop.to_json(),
            "bounds": {"min": dict(self.bounds.lower), "max": dict(self.bounds.upper)},
            **fitted,
        }


def propose(
    result: FitResult,
    *,
    count: int,
    bounds: Bounds | None = None,
    seed: int = 0,
    decimals: int = 3,
    min_gain: float | None = None,
    prior: Mapping[str, float] | None = None,
) -> Proposal:
    """The next ``count`` mixtures for the fit ``result`` (the rule:
    docs/design/search.md).

    ``prior``: the reference mix (e.g. token-proportional) that candidates are also drawn
    around; default uniform. Deterministic for a given ``seed``.
    """
    observations = result.observations
    domains = observations.domains
    if count < 1:
        raise SearchError([f"count={count}: propose at least one mixture"])
    if not 1 <= decimals <= 6:
        raise SearchError([f"decimals={decimals}: use 1 to 6"])
    lower, upper = (bounds or Bounds()).arrays(domains)
    rng = np.random.default_rng(seed)
    scale = 10**decimals
    grid = _CanonicalGrid(lower, upper, scale)
    prior_shares = np.array([float((prior or {}).get(d, 1.0)) for d in domains])
    if prior is not None and prior_shares.sum() <= 0:
        raise SearchError([f"prior {dict(prior)} gives no domain a share"])
    pool = grid.admit(
        _candidate_pool(
            rng,
            observations,
            lower=lower,
            upper=upper,
            prior=prior_shares / prior_shares.sum(),
        )
    )
    if not len(pool):
        raise SearchError([f"no mixture at {decimals} decimals lies within the bounds; widen them"])
    observed_keys = {grid.key(m) for m in grid.admit(observations.mixtures)}
    chosen: list[np.ndarray] = []
    taken = set(observed_keys)
    for k in range(count):
        refit = result.refits[k % len(result.refits)]
        pick = _find_lowest_untaken(refit.predict, pool, taken, grid)
        if pick is None:
            break  # fewer distinct admissible mixtures than asked for
        local = grid.admit(
            _draw_around(
                rng, pick, lower=lower, upper=upper, draws=LOCAL_DRAWS, concentration=300.0
            )
        )
        refined = _find_lowest_untaken(refit.predict, np.vstack([pick[None], local]), taken, grid)
        best = refined if refined is not None else pick
        chosen.append(best)
        taken.add(grid.key(best))
    if not chosen:
        raise SearchError(["every admissible mixture was already observed; widen the bounds"])
    proposals = result.predictions(np.stack(chosen))
    recommended = result.predictions(
        _recommend_mixture(result, rng, pool=pool, chosen=np.stack(chosen), grid=grid)
    )[0]
    best_mixture, best_mean = observations.best_observed()
    best_observed = Prediction(
        dict(zip(domains, map(float, best_mixture), strict=True)), best_mean, (best_mean, best_mean)
    )
    return Proposal(
        proposals,
        recommended,
        _stop_signal(result, np.stack(chosen), best_mixture, min_gain),
        result,
        best_observed,
        bounds or Bounds(),
    )


def canonical_within_bounds(
    mixtures: np.ndarray, domains: tuple[str, ...], bounds: Bounds | None, decimals: int
) -> list[dict[str, float]]:
    """Each row of ``mixtures`` (``domains`` order) moved into ``bounds`` and rounded
    canonically to ``decimals``; rows that leave the bounds when rounded are dropped."""
    lower, upper = (bounds or Bounds()).arrays(domains)
    grid = _CanonicalGrid(lower, upper, 10**decimals)
    moved = np.stack([_into_bounds(row, lower, upper) for row in mixtures])
    return [dict(zip(domains, map(float, row), strict=True)) for row in grid.admit(moved)]


def _recommend_mixture(
    result: FitResult,
    rng: np.random.Generator,
    *,
    pool: np.ndarray,
    chosen: np.ndarray,
    grid: _CanonicalGrid,
) -> np.ndarray:
    """``(1, domains)``: the admissible mixture the full fit predicts best, among the pool,
    the observed mixtures and the proposals, refined by draws around the pool's best."""
    lower, upper = grid.lower, grid.upper
    pool_best = pool[int(np.argmin(result.predict(pool)))]
    local = grid.admit(
        _draw_around(
            rng, pool_best, lower=lower, upper=upper, draws=LOCAL_DRAWS, concentration=300.0
        )
    )
    observed = grid.admit(result.observations.mixtures)
    everything = np.vstack([pool, observed, chosen, local])
    return everything[[int(np.argmin(result.predict(everything)))]]


def _stop_signal(
    result: FitResult, chosen: np.ndarray, best_mixture: np.ndarray, min_gain: float | None
) -> StopSignal:
    noise = result.observations.replicate_noise()
    floor = max(min_gain or 0.0, noise if min_gain is None else 0.0)
    per_refit = result.refit_predictions(np.vstack([best_mixture[None], chosen]))
    gains = per_refit[:, :1] - per_refit[:, 1:]
    optimistic = np.percentile(gains, INTERVAL[1], axis=0)
    expected = gains.mean(axis=0)
    best = int(np.argmax(optimistic))
    what = (
        f"the most hopeful proposal's gain over the best observed run is "
        f"{expected[best]:.4g} expected, {optimistic[best]:.4g} at the optimistic end "
        f"(95th percentile of {len(result.refits)} refits), against a minimum gain of "
        f"{floor:.4g}" + (" (the replicate noise)" if min_gain is None and noise > 0 else "")
    )
    chosen = next(s for s in result.scores if s.name == result.model.name)
    ranks = chosen.cv_spearman is not None and chosen.cv_spearman >= STOP_MIN_SPEARMAN
    flat = result.observations.mixture_effect_p_value()
    if not ranks and flat is None:
        return StopSignal(
            False,
            f"continue: the fit ranks held-out mixtures with Spearman {chosen.cv_spearman:.2f} "
            f"< {STOP_MIN_SPEARMAN}, too poorly to rule anything out, and no replicates "
            f"show the runs flat; {what}",
        )
    if not ranks and flat is not None and flat <= 0.05:
        return StopSignal(
            False,
            f"continue: the fit ranks held-out mixtures with Spearman {chosen.cv_spearman:.2f} "
            f"< {STOP_MIN_SPEARMAN} although the mixtures differ beyond their replicates "
            f"(F test p = {flat:.3g}); {what}",
        )
    if optimistic[best] <= floor:
        return StopSignal(True, f"stop: {what}; no proposal is likely to beat the best run")
    return StopSignal(False, f"continue: {what}")


@dataclass(frozen=True)
class _CanonicalGrid:
    """Mixtures rounded to ``1/scale`` units by the largest-remainder method, then, where the
    rounding crossed a bound (a share just at a cap of 0.0839 rounds to 0.084), moved back
    one unit at a time; dropped only when the bounds leave no mixture on the grid."""

    lower: np.ndarray
    upper: np.ndarray
    scale: int

    def admit(self, mixtures: np.ndarray) -> np.ndarray:
        """The distinct canonical forms of ``mixtures``, each within the bounds."""
        low = [int(v) for v in np.ceil(self.lower * self.scale - TOLERANCE)]
        high = [int(v) for v in np.floor(self.upper * self.scale + TOLERANCE)]
        seen: dict[tuple[int, ...], None] = {}
        if sum(low) > self.scale or sum(high) < self.scale:
            return np.empty((0, len(self.lower)))
        for row in mixtures:
            units = mix_units([max(float(w), 0.0) for w in row], self.scale)
            seen.setdefault(_units_within(units, low, high), None)
        return np.array(list(seen), dtype=float) / self.scale

    def key(self, mixture: np.ndarray) -> tuple[int, ...]:
        """The integer units of a canonical ``mixture``."""
        return tuple(round(float(w) * self.scale) for w in mixture)


def _units_within(units: tuple[int, ...], low: list[int], high: list[int]) -> tuple[int, ...]:
    """``units`` clipped to ``[low, high]`` per domain, the sum put back by adding units to
    the domains with the most room (taking them from those with the most to spare), ties
    to the first domain: deterministic, and unchanged when already within."""
    clipped = [min(max(u, lo), hi) for u, lo, hi in zip(units, low, high, strict=True)]
    missing = sum(units) - sum(clipped)
    while missing > 0:
        room = [hi - u for u, hi in zip(clipped, high, strict=True)]
        clipped[room.index(max(room))] += 1
        missing -= 1
    while missing < 0:
        spare = [u - lo for u, lo in zip(clipped, low, strict=True)]
        clipped[spare.index(max(spare))] -= 1
        missing += 1
    return tuple(clipped)


def _find_lowest_untaken(
    predict: Callable[[np.ndarray], np.ndarray],
    mixtures: np.ndarray,
    taken: set[tuple[int, ...]],
    grid: _CanonicalGrid,
) -> np.ndarray | None:
    """The row of ``mixtures`` with the lowest prediction that is not ``taken``."""
    for row in np.argsort(predict(mixtures), kind="stable"):
        if grid.key(mixtures[row]) not in taken:
            return mixtures[row]
    return None


def _candidate_pool(
    rng: np.random.Generator,
    observations: Observations,
    *,
    lower: np.ndarray,
    upper: np.ndarray,
    prior: np.ndarray,
) -> np.ndarray:
    """Mixtures within the bounds: uniform draws, draws around the best observed mixtures
    and around ``prior``, and each domain alone (cut to the bounds)."""
    domains = len(lower)
    uniform = rng.dirichlet(np.ones(domains), POOL_SIZE // 2)
    objective = observations.objective
    groups = observations.mixture_groups()
    means = [objective[rows].mean() for rows in groups]
    top = [observations.mixtures[groups[g][0]] for g in np.argsort(means)[:5]]
    per_top = POOL_SIZE // 4 // len(top)
    near_best = [
        _draw_around(rng, m, lower=lower, upper=upper, draws=per_top, concentration=60.0)
        for m in top
    ]
    near_prior = _draw_around(
        rng, prior, lower=lower, upper=upper, draws=POOL_SIZE // 4, concentration=20.0
    )
    corners = np.eye(domains)
    raw = np.vstack([uniform, *near_best, near_prior, corners])
    return np.stack([_into_bounds(row, lower, upper) for row in raw])


def _draw_around(
    rng: np.random.Generator,
    centre: np.ndarray,
    *,
    lower: np.ndarray,
    upper: np.ndarray,
    draws: int,
    concentration: float,
) -> np.ndarray:
    """``draws`` Dirichlet draws with mean near ``centre``, moved into the bounds."""
    alphas = 0.05 + concentration * np.asarray(centre, dtype=float)
    return np.stack([_into_bounds(row, lower, upper) for row in rng.dirichlet(alphas, draws)])


def _into_bounds(shares: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The mixture nearest ``shares`` in spirit within ``[lower, upper]``: each domain gets its
    minimum, the rest is split in proportion to ``shares``, and shares above a maximum are
    cut there with the excess going, in proportion, to domains below theirs."""
    free = 1.0 - lower.sum()
    weights = np.asarray(shares, dtype=float)
    weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(weights), 1.0)
    mixture = lower + free * weights
    for _ in range(len(mixture)):
        over = mixture > upper
        if not over.any():
            break
        excess = float((mixture[over] - upper[over]).sum())
        mixture[over] = upper[over]
        room = np.where(mixture < upper - TOLERANCE, upper - mixture, 0.0)
        if room.sum() <= 0:
            break
        mixture += excess * room / room.sum()
    return mixture
