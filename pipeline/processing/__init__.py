"""Per-record processing before tokenizing: filters and transforms, and decontamination.

One step per file (``length``, datatrove's quality filters, a user's function, the
decontamination every run gets), chained by :class:`ProcessChain`.

Design: docs/design/pipeline_processing.md
"""

from pipeline.processing.chain import KEPT, ProcessChain, parse_chain, parse_step
from pipeline.processing.decontamination import NORMALIZATION, Decontaminator, normalized_digest
from pipeline.processing.step import ProcessStep, StepKind

__all__ = [
    "KEPT",
    "NORMALIZATION",
    "Decontaminator",
    "ProcessChain",
    "ProcessStep",
    "StepKind",
    "normalized_digest",
    "parse_chain",
    "parse_step",
]
