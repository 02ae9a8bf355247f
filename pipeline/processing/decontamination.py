"""``decontaminate``: drop every training record whose text is a scored document's.

Two texts are the same document when they are equal after case folding and collapsing
every run of whitespace to one space (leading and trailing whitespace removed): a copy with
other line breaks, indentation or capitals is caught; a copy with one word changed, cut, or
embedded in a longer record is not. Each record costs one pass over its text and one set
lookup, whatever the number of scored documents.

Design: docs/design/pipeline_processing.md
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pipeline.processing.step import ProcessStep, StepKind

NORMALIZATION = "casefold-whitespace-v1"
"""The contract's name of :func:`normalized_digest`'s rule."""


def normalized_digest(text: str) -> bytes:
    """16-byte BLAKE2b of ``text`` case-folded with its whitespace collapsed."""
    return hashlib.blake2b(" ".join(text.casefold().split()).encode(), digest_size=16).digest()


class Decontaminator(ProcessStep):
    """Drops records whose :func:`normalized_digest` is a scored document's."""

    kind = StepKind.DECONTAMINATE

    def __init__(self, scored: Iterable[str]) -> None:
        self.digests = frozenset(normalized_digest(t) for t in scored)

    def __len__(self) -> int:
        return len(self.digests)

    def apply(self, text: str) -> str | None:
        return None if normalized_digest(text) in self.digests else text

    def settings(self) -> dict[str, Any]:
        digest = hashlib.sha256(b"".join(sorted(self.digests))).hexdigest()
        return {"normalization": NORMALIZATION, "documents": len(self.digests), "sha256": digest}
