"""``dedup``: drop a record whose text repeats one read earlier in its dataset's epoch.

Unlike a filter, whether a record is a copy depends on the records before it, so a
deduplication step is not decided per text in the workers: :class:`RepeatIndex`
(``pipeline/repeat_index.py``) reads the dataset's epoch in stream order and asks the step's
:class:`RepeatMatcher` about each record. "Earlier" is the dataset's stream order, not time:
the first copy is kept, whatever lane, rank or restart reads it, so the data stay the same at
any dp size. Copies are judged on the records as read, before the chain's other steps.

``dedup`` compares texts after case folding and collapsing whitespace (the decontamination's
rule, :func:`normalized_digest`); ``minhash_dedup`` also catches near copies.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Protocol

from pipeline.processing.decontamination import NORMALIZATION, normalized_digest
from pipeline.processing.step import ProcessStep, StepKind


class RepeatMatcher(Protocol):
    """What an epoch's deduplication remembers of the records passed so far."""

    def seen(self, text: str) -> bool:
        """Whether ``text`` repeats a record passed before; the record is remembered."""
        ...


class Deduplication(ProcessStep):
    """A step that drops a record repeating an earlier one of its epoch (module docstring)."""

    def apply(self, text: str) -> str | None:
        """The text unchanged: copies are told by position, by :class:`RepeatIndex`."""
        return text

    @abstractmethod
    def matcher(self) -> RepeatMatcher:
        """A fresh memory of passed records, for one epoch of one dataset."""


class ExactDedup(Deduplication):
    """Drops a record whose :func:`normalized_digest` is an earlier record's: 16 bytes of
    memory per record read."""

    kind = StepKind.DEDUP

    def matcher(self) -> RepeatMatcher:
        return _DigestSet()

    def settings(self) -> dict[str, Any]:
        return {"normalization": NORMALIZATION}


class _DigestSet:
    def __init__(self) -> None:
        self._digests: set[bytes] = set()

    def seen(self, text: str) -> bool:
        digest = normalized_digest(text)
        if digest in self._digests:
            return True
        self._digests.add(digest)
        return False
