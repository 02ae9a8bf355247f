"""Data-mix variants for a sweep: hand-listed mixes, a grid on the simplex, Dirichlet draws
and one-at-a-time perturbations of a base mix, all in one canonical form.

Pure logic (no Hydra, no MLflow, no torch). ``min``/``max`` bound every generator; a mix
produced before is skipped; every problem of a request is reported at once in one
:class:`MixError`.

Design: docs/design/sweeps_mixes.md
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.experiment.mixture import (
    TOLERANCE,
    MixError,
    canonical,
    decimals_problems,
    domain_problems,
    is_share,
    mix_from_units,
    mix_units,
    weight_problems,
)

_GRID_ENUMERATION_FACTOR = 100
"""Grids with more than this many times max_variants compositions are refused unenumerated."""
_DIRICHLET_ATTEMPTS_PER_DRAW = 1000
"""Draws allowed per requested Dirichlet mix before giving up."""


@dataclass(kw_only=True)
class MixSpace:
    """The data-mix variants a sweep asks for (the algorithms: docs/design/sweeps_mixes.md)."""

    explicit: list[dict[str, float]] = field(default_factory=list)
    """Mixes listed by hand (weights are normalised; missing domains get 0)."""
    grid_resolution: float | None = None
    """Step of a grid on the simplex, e.g. 0.25 for weights 0, 0.25, ..., 1; None: no grid."""
    dirichlet_draws: int = 0
    """New mixes to draw from a symmetric Dirichlet distribution (0: none)."""
    dirichlet_alpha: float = 1.0
    """Concentration of the Dirichlet: 1 is uniform on the simplex, below 1 favours corners."""
    seed: int = 0
    """Seed of the Dirichlet draws."""
    perturb_base: dict[str, float] | None = None
    """Mix whose weights are moved one domain at a time; None: no perturbations."""
    perturb_delta: float = 0.1
    """Amount added to and taken from one domain's weight per perturbation."""
    min: dict[str, float] = field(default_factory=dict)
    """Least canonical weight per domain (inclusive), applied to every generator."""
    max: dict[str, float] = field(default_factory=dict)
    """Most canonical weight per domain (inclusive), applied to every generator."""
    decimals: int = 3
    """Decimal places of every weight."""
    max_variants: int = 256
    """Most variants a request may yield."""
    phase: int | None = None
    """A staged mixture's phase to vary (``data.phases.<phase>.mixture``, also made the runs'
    ``data.compared_phase``); the other phases stay as configured. None: ``data.mixture``."""
    search: dict[str, Any] | None = None
    """Search instead of a fixed list: ``{rounds, per_round, initial, seed, max_epochs}``
    (:class:`sweeps.search.SearchSpec`); the generators above, if any, join its initial
    design."""

    @property
    def mixture_key(self) -> str:
        """The experiment key whose mixture the variants set."""
        return "data.mixture" if self.phase is None else f"data.phases.{self.phase}.mixture"

    @property
    def requests_variants(self) -> bool:
        """Whether a generator (explicit, grid, Dirichlet, perturbation) is asked for."""
        return bool(
            self.explicit
            or self.grid_resolution is not None
            or self.dirichlet_draws
            or self.perturb_base is not None
        )


def override_strings(
    mix: Mapping[str, float], decimals: int, key: str = "data.mixture"
) -> list[str]:
    """Hydra overrides ``++<key>.<domain>=<weight>`` for every domain of ``mix`` in sorted
    order, weights canonicalised and printed with exactly ``decimals`` decimals (zeros too).

    Equal mixes give identical strings.
    """
    return [
        f"++{key}.{domain}={weight:.{decimals}f}"
        for domain, weight in canonical(mix, list(mix), decimals).items()
    ]


def mix_label(mix: Mapping[str, float], decimals: int) -> str:
    """``mix`` canonicalised as ``domain=weight`` pairs in sorted order, e.g.
    ``code=0.500,docs=0.300,i18n=0.200``."""
    return ",".join(
        f"{domain}={weight:.{decimals}f}"
        for domain, weight in canonical(mix, list(mix), decimals).items()
    )


def variants(space: MixSpace, domains: list[str]) -> list[dict[str, float]]:
    """The distinct canonical mixes ``space`` asks for over ``domains``, generator by
    generator (explicit, grid, Dirichlet, perturbations), first occurrence kept.

    Raises :class:`MixError` listing every problem of the request before generating;
    the problems met while generating (a grid with no mix within the bounds, too few new
    Dirichlet mixes, more than ``space.max_variants`` variants) are collected and raised
    together after generating.
    """
    problems = _request_problems(space, domains)
    if problems:
        raise MixError(problems)
    ordered = sorted(domains)
    scale = 10**space.decimals
    lows, highs = _bound_units(space, ordered)

    def within_bounds(units: tuple[int, ...]) -> bool:
        return all(low <= u <= high for low, u, high in zip(lows, units, highs, strict=True))

    generator_of: dict[tuple[int, ...], str] = {}  # units of each variant kept -> its generator

    def keep(units: tuple[int, ...], generator: str) -> bool:
        if units in generator_of:
            return False
        generator_of[units] = generator
        return True

    for mix in space.explicit:
        keep(mix_units([mix.get(d, 0.0) for d in ordered], scale), "explicit")

    if space.grid_resolution is not None:
        steps = round(1 / space.grid_resolution)
        on_grid = [
            units
            for parts in _enumerate_compositions(steps, len(ordered))
            if within_bounds(units := tuple(part * (scale // steps) for part in parts))
        ]
        if not on_grid:
            problems.append(
                f"grid_resolution={space.grid_resolution} gives no mix within the bounds "
                f"({_bounds_text(space)}); use a finer grid_resolution or widen min/max"
            )
        for units in on_grid:
            keep(units, "grid")

    if space.dirichlet_draws > 0:
        rng = np.random.default_rng(space.seed)
        alphas = np.full(len(ordered), space.dirichlet_alpha)
        attempts = _DIRICHLET_ATTEMPTS_PER_DRAW * space.dirichlet_draws
        kept = drawn = 0
        while kept < space.dirichlet_draws and drawn < attempts:
            drawn += 1
            units = mix_units(rng.dirichlet(alphas).tolist(), scale)
            if within_bounds(units) and keep(units, "dirichlet"):
                kept += 1
        if kept < space.dirichlet_draws:
            problems.append(
                f"dirichlet_draws={space.dirichlet_draws}: only {kept} new mixes within the "
                f"bounds ({_bounds_text(space)}) after {attempts} draws; the bounds are "
                "too tight (or too few distinct mixes exist at "
                f"decimals={space.decimals}): widen min/max, raise decimals or lower "
                "dirichlet_draws"
            )

    if space.perturb_base is not None:
        base = mix_units([space.perturb_base.get(d, 0.0) for d in ordered], scale)
        keep(base, "perturbations")
        for units in _perturb_one_at_a_time(base, space.perturb_delta, scale):
            if within_bounds(units):
                keep(units, "perturbations")

    if len(generator_of) > space.max_variants:
        per_generator = ", ".join(
            f"{generator} {count}" for generator, count in Counter(generator_of.values()).items()
        )
        problems.append(
            f"the request yields {len(generator_of)} variants ({per_generator}), more than "
            f"max_variants={space.max_variants}; ask for fewer (fewer explicit mixes, a "
            "coarser grid_resolution, fewer dirichlet_draws, tighter min/max) or raise "
            "max_variants"
        )
    if problems:
        raise MixError(problems)
    return [mix_from_units(units, ordered, scale) for units in generator_of]


def describe(space: MixSpace) -> dict[str, Any]:
    """A JSON-friendly description of ``space`` for logging as run parameters: the fields
    of the generators it uses, its bounds if any, ``decimals`` and ``max_variants``."""
    description: dict[str, Any] = {}
    if space.explicit:
        description["explicit"] = [dict(mix) for mix in space.explicit]
    if space.grid_resolution is not None:
        description["grid_resolution"] = space.grid_resolution
    if space.dirichlet_draws:
        description["dirichlet_draws"] = space.dirichlet_draws
        description["dirichlet_alpha"] = space.dirichlet_alpha
        description["seed"] = space.seed
    if space.perturb_base is not None:
        description["perturb_base"] = dict(space.perturb_base)
        description["perturb_delta"] = space.perturb_delta
    if space.min:
        description["min"] = dict(space.min)
    if space.max:
        description["max"] = dict(space.max)
    if space.phase is not None:
        description["phase"] = space.phase
    description["decimals"] = space.decimals
    description["max_variants"] = space.max_variants
    if space.search is not None:
        description["search"] = dict(space.search)
    return description


def _enumerate_compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write ``total`` as ``parts`` ordered non-negative integers, in
    lexicographic order (stars and bars: ``parts - 1`` bars among ``total + parts - 1``
    slots; the parts are the runs of stars between them)."""
    slots = total + parts - 1
    for bars in itertools.combinations(range(slots), parts - 1):
        edges = (-1, *bars, slots)
        yield tuple(right - left - 1 for left, right in itertools.pairwise(edges))


def _perturb_one_at_a_time(
    base: tuple[int, ...], delta: float, scale: int
) -> Iterator[tuple[int, ...]]:
    """The one-at-a-time perturbations of ``base`` (units), before the bounds."""
    weights = [u / scale for u in base]
    for i, weight in enumerate(weights):
        if base[i] == scale:
            continue
        rest = (scale - base[i]) / scale
        for target in (weight + delta, weight - delta):
            if not -TOLERANCE <= target <= 1 + TOLERANCE:
                continue
            moved = min(max(target, 0.0), 1.0)
            yield mix_units(
                [moved if j == i else w * (1 - moved) / rest for j, w in enumerate(weights)],
                scale,
            )


def _bound_units(space: MixSpace, ordered: Sequence[str]) -> tuple[list[int], list[int]]:
    """Least and most units per domain allowed by ``space.min``/``space.max``."""
    scale = 10**space.decimals
    lows = [math.ceil(space.min.get(d, 0.0) * scale - TOLERANCE) for d in ordered]
    highs = [math.floor(space.max.get(d, 1.0) * scale + TOLERANCE) for d in ordered]
    return lows, highs


def _bounds_text(space: MixSpace) -> str:
    return f"min={dict(space.min)}, max={dict(space.max)}"


def _request_problems(space: MixSpace, domains: Sequence[str]) -> list[str]:
    """Every problem of ``space`` over ``domains`` that shows before generating."""
    problems = domain_problems(domains) + decimals_problems(space.decimals)
    units_computable = not problems
    known = set(domains)

    bound_problems = []
    for side, bounds in (("min", space.min), ("max", space.max)):
        unknown = sorted(set(bounds) - known)
        if unknown:
            bound_problems.append(
                f"{side} names unknown domains {unknown}; known domains: {sorted(known)}. "
                "Fix the names or add the domains."
            )
        for domain, bound in sorted(bounds.items()):
            if not is_share(bound):
                bound_problems.append(f"{side}.{domain}={bound!r} is outside [0, 1]")
    for domain in sorted(set(space.min) & set(space.max)):
        low, high = space.min[domain], space.max[domain]
        if is_share(low) and is_share(high) and low > high:
            bound_problems.append(
                f"min.{domain}={low} > max.{domain}={high}; "
                f"lower min.{domain} or raise max.{domain}"
            )
    if units_computable and not bound_problems:
        lows, highs = _bound_units(space, sorted(domains))
        scale = 10**space.decimals
        if sum(lows) > scale:
            bound_problems.append(
                f"bounds leave no valid mix: the minimums (rounded up to {space.decimals} "
                f"decimals) sum to {sum(lows) / scale:.{space.decimals}f} > 1; lower some of "
                f"min={dict(space.min)}"
            )
        if sum(highs) < scale:
            bound_problems.append(
                f"bounds leave no valid mix: the maximums (rounded down to {space.decimals} "
                f"decimals) sum to {sum(highs) / scale:.{space.decimals}f} < 1; raise some of "
                f"max={dict(space.max)}"
            )
    problems += bound_problems
    bounds_usable = units_computable and not bound_problems

    if (
        not space.explicit
        and space.grid_resolution is None
        and space.dirichlet_draws == 0
        and space.perturb_base is None
    ):
        problems.append(
            "nothing requested: list explicit mixes, or set grid_resolution, "
            "dirichlet_draws > 0 or perturb_base"
        )
    if space.max_variants < 1:
        problems.append(f"max_variants={space.max_variants} must be >= 1")
    if space.dirichlet_draws < 0:
        problems.append(f"dirichlet_draws={space.dirichlet_draws} must be >= 0 (0: no draws)")
    elif space.dirichlet_draws > space.max_variants:
        problems.append(
            f"dirichlet_draws={space.dirichlet_draws} asks for more than "
            f"max_variants={space.max_variants} variants; lower dirichlet_draws or raise "
            "max_variants"
        )
    if not space.dirichlet_alpha > 0:
        problems.append(f"dirichlet_alpha={space.dirichlet_alpha} must be > 0")
    if space.seed < 0:
        problems.append(f"seed={space.seed} must be >= 0")
    if not 0 < space.perturb_delta < 1:
        problems.append(f"perturb_delta={space.perturb_delta} must be in (0, 1)")
    if space.grid_resolution is not None:
        problems += _grid_problems(space, len(domains), units_computable)

    mixes = [(f"explicit[{i}]", mix) for i, mix in enumerate(space.explicit)]
    if space.perturb_base is not None:
        mixes.append(("perturb_base", space.perturb_base))
    for what, mix in mixes:
        mix_problems = weight_problems(mix, known, f"{what} {dict(mix)}")
        problems += mix_problems
        if bounds_usable and not mix_problems:
            problems += _outside_bounds(space, sorted(domains), mix, what)
    return problems


def _grid_problems(space: MixSpace, domain_count: int, units_computable: bool) -> list[str]:
    """Why the grid of ``space`` cannot be enumerated ([] if it can)."""
    resolution = space.grid_resolution
    assert resolution is not None
    if not isinstance(resolution, int | float) or not 0 < resolution <= 1:
        return [f"grid_resolution={resolution!r} must be in (0, 1], e.g. 0.25 or 0.1"]
    steps = round(1 / resolution)
    if abs(steps * resolution - 1) > TOLERANCE:
        return [
            f"grid_resolution={resolution} does not divide 1 into a whole number of steps; "
            "use 1/n, e.g. 0.5, 0.25, 0.2 or 0.1"
        ]
    if not units_computable:
        return []
    if 10**space.decimals % steps:
        return [
            f"grid_resolution={resolution} (1/{steps}) is not a multiple of "
            f"{10**-space.decimals:.{space.decimals}f} (decimals={space.decimals}); "
            "use a resolution with at most that many decimals or raise decimals"
        ]
    count = math.comb(steps + domain_count - 1, domain_count - 1)
    limit = _GRID_ENUMERATION_FACTOR * space.max_variants
    if count > limit:
        return [
            f"grid_resolution={resolution} over {domain_count} domains gives {count} mixes "
            f"before the bounds, more than {_GRID_ENUMERATION_FACTOR} x max_variants = {limit}; "
            "use a coarser grid_resolution or raise max_variants"
        ]
    return []


def _outside_bounds(
    space: MixSpace, ordered: Sequence[str], mix: Mapping[str, float], what: str
) -> list[str]:
    """One problem per bound the canonical form of the valid ``mix`` breaks."""
    scale = 10**space.decimals
    units = mix_units([mix.get(d, 0.0) for d in ordered], scale)
    lows, highs = _bound_units(space, ordered)
    label = ",".join(
        f"{d}={u / scale:.{space.decimals}f}" for d, u in zip(ordered, units, strict=True)
    )
    problems = []
    for domain, u, low, high in zip(ordered, units, lows, highs, strict=True):
        if u < low:
            problems.append(
                f"{what} ({label}) has {domain} below min.{domain}={space.min[domain]}; "
                f"change the mix or lower min.{domain}"
            )
        if u > high:
            problems.append(
                f"{what} ({label}) has {domain} above max.{domain}={space.max[domain]}; "
                f"change the mix or raise max.{domain}"
            )
    return problems
