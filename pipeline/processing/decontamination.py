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


def word_ngrams(text: str, n: int) -> set[bytes]:
    """8-byte BLAKE2b digests of ``text``'s case-folded word ``n``-grams (none if it has
    fewer words): the same in every process, unlike Python's ``hash``."""
    words = text.casefold().split()
    return {
        hashlib.blake2b(" ".join(words[i : i + n]).encode(), digest_size=8).digest()
        for i in range(len(words) - n + 1)
    }


class Decontaminator(ProcessStep):
    """Drops records whose :func:`normalized_digest` is a scored document's; with
    ``overlap_ngram`` n > 0 it also tells which kept records share a word n-gram with a
    scored document (:meth:`overlaps`; counted, not dropped: GPT-3's and DCLM's check)."""

    kind = StepKind.DECONTAMINATE

    def __init__(self, scored: Iterable[str], overlap_ngram: int = 0) -> None:
        scored = list(scored)
        self.digests = frozenset(normalized_digest(t) for t in scored)
        self.overlap_ngram = overlap_ngram
        self.ngrams = frozenset(
            h for t in scored for h in word_ngrams(t, overlap_ngram) if overlap_ngram
        )

    def overlaps(self, text: str) -> bool:
        """Whether ``text`` shares a word n-gram with a scored document (False when off)."""
        return bool(self.ngrams) and not self.ngrams.isdisjoint(
            word_ngrams(text, self.overlap_ngram)
        )

    def __len__(self) -> int:
        return len(self.digests)

    def apply(self, text: str) -> str | None:
        return None if normalized_digest(text) in self.digests else text

    def settings(self) -> dict[str, Any]:
        digest = hashlib.sha256(b"".join(sorted(self.digests))).hexdigest()
        return {"normalization": NORMALIZATION, "documents": len(self.digests), "sha256": digest}
