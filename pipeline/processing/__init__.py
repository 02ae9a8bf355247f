"""Per-record processing before tokenizing: filters and transforms, and decontamination.

One step per file (``length``, datatrove's quality filters, a user's function, exact and
MinHash deduplication, the decontamination every run gets), chained by :class:`ProcessChain`.

Design: docs/design/pipeline_processing.md
"""

from pipeline.processing.chain import KEPT, ProcessChain, parse_chain, parse_step
from pipeline.processing.decontamination import NORMALIZATION, Decontaminator, normalized_digest
from pipeline.processing.deduplication import Deduplication, ExactDedup, RepeatMatcher
from pipeline.processing.minhash_dedup import MinHashDedup
from pipeline.processing.step import ProcessStep, StepKind

__all__ = [
    "KEPT",
    "NORMALIZATION",
    "Decontaminator",
    "Deduplication",
    "ExactDedup",
    "MinHashDedup",
    "ProcessChain",
    "ProcessStep",
    "RepeatMatcher",
    "StepKind",
    "normalized_digest",
    "parse_chain",
    "parse_step",
]
