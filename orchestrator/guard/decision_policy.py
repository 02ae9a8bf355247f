"""How the guard decides: every setting a comparison is decided under, as one value.

Each face builds one :class:`DecisionPolicy` from its own inputs (``zephon compare``'s
flags, the MCP ``compare`` tool's arguments, a sweep's ``hydra.sweeper.*``, a search's
confirmation) and passes it whole to the guard
(:func:`~orchestrator.guard.tracked_comparison.compare_tracked`,
:func:`~orchestrator.guard.scoring.compare`). Its values are checked once, when it is built.

Design: docs/design/guard.md
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from orchestrator.guard.decisions import (
    DEFAULT_MAX_SEEDS,
    Design,
    Family,
    LookPlan,
    check_options,
)
from orchestrator.guard.eval_smoothing import DEFAULT_SMOOTH_LAST, check_smooth_last
from orchestrator.guard.held_out_metrics import metric_choice
from orchestrator.guard.tasks import task_choice

Choice = TypeVar("Choice", bound=StrEnum)


@dataclass(frozen=True, kw_only=True)
class DecisionPolicy:
    """What a comparison ranks and decides on, and how its decisions are calibrated.

    Built from a face's plain values: ``family`` and ``design`` may be given by name and
    ``decide_on`` as any sequence (kept as members and a tuple, empty as None). A wrong
    value is a ``ValueError`` saying what to pass, checked in this order: threshold and
    confidence, smooth_last, family, design, max_seeds.
    """

    threshold: float = 0.0
    """Smallest difference in the aggregate score that counts as a decision (finite, >= 0)."""
    confidence: float = 0.95
    """Confidence of the decisions, in (0, 1): ``1 - confidence`` is the error budget."""
    family: Family = Family.HOLM
    """The correction of the pairs' decisions for their number (:class:`Family`)."""
    design: Design = Design.SEQUENTIAL
    """One error budget for every look as seeds are added, or one look (:class:`Design`)."""
    max_seeds: int = DEFAULT_MAX_SEEDS
    """Sequential design: the seed count by which the error budget is spent (>= 2)."""
    decide_on: tuple[str, ...] | None = None
    """Held-out domains, a held-out metric or a ``task:NAME[:METRIC]``; None: every domain."""
    smooth_last: int = DEFAULT_SMOOTH_LAST
    """Each run scored on the mean of its last this many held-out evals (1: the last alone)."""

    def __post_init__(self) -> None:
        check_options(self.threshold, self.confidence)
        check_smooth_last(self.smooth_last)
        object.__setattr__(self, "family", _member(Family, self.family, what="family"))
        object.__setattr__(self, "design", _member(Design, self.design, what="design"))
        self.look_plan()  # max_seeds: checked by the look plan itself
        object.__setattr__(self, "decide_on", tuple(self.decide_on) if self.decide_on else None)

    def look_plan(self) -> LookPlan:
        """The levels the looks decide at: ``1 - confidence`` spent under ``design``, up to
        ``max_seeds`` (:mod:`orchestrator.guard.decisions.looks`)."""
        return LookPlan(self.design, 1 - self.confidence, self.max_seeds)

    def check_decide_on(self, domains: list[str]) -> None:
        """``ValueError`` when ``decide_on`` names held-out domains or a metric that runs
        scored on ``domains`` (their datasets and evaluation sets) cannot have: the
        comparison's own rule, for a sweep to apply before any run trains. A task is checked
        at the comparison."""
        if task_choice(self.decide_on) is None:
            metric_choice(self.decide_on, domains)


def _member(choices: type[Choice], name: str, *, what: str) -> Choice:
    """The member of ``choices`` named ``name`` (``what``: the setting); ``ValueError``
    listing the choices otherwise."""
    try:
        return choices(name)
    except ValueError:
        names = ", ".join(choice.value for choice in choices)
        raise ValueError(f"{what} {name!r}: use one of {names}") from None


DEFAULT_POLICY = DecisionPolicy()
"""The guard's defaults: held-out bits per byte over every domain at its last eval, pairs
decided at 95% under Holm's correction, one error budget over looks up to 8 seeds."""
