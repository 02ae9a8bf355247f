"""``ProcessStep``: one per-record filter or transform of a processing chain.

A step sees one record's text and returns the text to train on (the same, or changed) or
None to drop the record. It must be a pure function of the text: the lane workers run it
in any order, on any number of threads or processes, and a resume runs it again, so any
state would make the data depend on the hardware. What a step is goes into the data
contract through :meth:`ProcessStep.contract`.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum
from typing import Any


class StepKind(StrEnum):
    """The built-in steps (``data.process`` entries' ``step``), and a user's function."""

    DECONTAMINATE = "decontaminate"
    """Drop records whose normalised text is a scored document's (added by the pipeline)."""
    LENGTH = "length"
    """Keep records within character and word bounds."""
    GOPHER_QUALITY = "gopher_quality"
    """datatrove's ``GopherQualityFilter``."""
    GOPHER_REPETITION = "gopher_repetition"
    """datatrove's ``GopherRepetitionFilter``."""
    C4_QUALITY = "c4_quality"
    """datatrove's ``C4QualityFilter`` (its line-removing variant changes the text)."""
    FINEWEB_QUALITY = "fineweb_quality"
    """datatrove's ``FineWebQualityFilter``."""
    FUNCTION = "function"
    """A user's ``module:function``, its source file's content in the contract."""
    DEDUP = "dedup"
    """Drop a record whose normalised text repeats one earlier in its dataset's epoch."""
    MINHASH_DEDUP = "minhash_dedup"
    """Drop a near copy (datasketch's MinHash LSH) of a record earlier in its epoch."""


class ProcessStep(ABC):
    """One step of a processing chain (see the module docstring)."""

    kind: StepKind

    @property
    def name(self) -> str:
        """How reports and counts name the step."""
        return str(self.kind)

    @abstractmethod
    def apply(self, text: str) -> str | None:
        """The text to train on, or None to drop the record."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The step's settings (JSON values), as given."""

    def contract(self) -> dict[str, Any]:
        """The step's part of the data contract: its kind, settings and what else fixes its
        output (a library's version, a file's content)."""
        return {"step": str(self.kind), **self.settings()}
