"""Decisions between mixtures: is variant ``a`` better than ``b``, worse, or can we not tell?

A paired statistic over held-out documents (stratified by dataset) and seeds: the
difference of aggregate bits per byte, its interval from a seed term (Student t on the seed
blocks' degrees of freedom) and a document-sampling term net of the within-seed noise the
seed term already holds (variance.py), the seed term from the pair's own variants' spreads
(pooled over the comparison only where the pair is not noisier than the rest: seed_noise.py),
combined as Banerjee's interval, and a decision only
when the interval clears the threshold and 2+ seeds measured training noise (pair.py).
:func:`decide_all` decides every pair under a family-wise correction (:class:`Family`,
family.py), :func:`tiers` groups the variants that cannot be told apart and :func:`best`
says whether the first beats all others (tiers.py).

Design (the formulas and why): docs/design/guard.md, "The decision statistic".
"""

from orchestrator.guard.decisions.family import Family, adjusted_p_values, decide_all
from orchestrator.guard.decisions.looks import (
    DEFAULT_MAX_SEEDS,
    MIN_SEEDS,
    Design,
    LookPlan,
)
from orchestrator.guard.decisions.pair import (
    A_BETTER,
    B_BETTER,
    CANNOT_TELL,
    POWER,
    NextStep,
    PairDecision,
    check_options,
    decide_pair,
)
from orchestrator.guard.decisions.seed_noise import SeedNoise, SeedSource, SeedTerm
from orchestrator.guard.decisions.tiers import best, tiers
from orchestrator.guard.decisions.variance import (
    Scores,
    aggregate,
    document_variance,
    sampling_error,
    welch_degrees_of_freedom,
)

__all__ = [
    "A_BETTER",
    "B_BETTER",
    "CANNOT_TELL",
    "DEFAULT_MAX_SEEDS",
    "MIN_SEEDS",
    "POWER",
    "Design",
    "Family",
    "LookPlan",
    "NextStep",
    "PairDecision",
    "Scores",
    "SeedNoise",
    "SeedSource",
    "SeedTerm",
    "adjusted_p_values",
    "aggregate",
    "best",
    "check_options",
    "decide_all",
    "decide_pair",
    "document_variance",
    "sampling_error",
    "tiers",
    "welch_degrees_of_freedom",
]
