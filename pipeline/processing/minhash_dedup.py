"""``minhash_dedup``: drop a near copy of a record read earlier in its dataset's epoch.

datasketch's MinHash over the record's case-folded word ``ngram``-grams, looked up in its
``MinHashLSH`` at Jaccard ``threshold`` (FineWeb's and Gopher's near-duplicate method; they
run it over a whole corpus offline, here it runs over the epoch's records in stream order,
see ``pipeline/processing/deduplication.py``). A record whose estimated similarity to an
earlier one reaches the threshold is dropped; LSH may miss a pair near the threshold and,
rarely, catch one below it. datasketch's version is part of the contract.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from pipeline.errors import ConfigError
from pipeline.processing.deduplication import Deduplication, RepeatMatcher
from pipeline.processing.step import StepKind

_SEED = 1
"""datasketch's default permutation seed, fixed: it decides which pairs LSH finds."""


class MinHashDedup(Deduplication):
    """Near-duplicate removal with datasketch (module docstring)."""

    kind = StepKind.MINHASH_DEDUP

    def __init__(self, *, threshold: float = 0.8, num_perm: int = 128, ngram: int = 5) -> None:
        if not isinstance(threshold, int | float) or not 0.0 < threshold < 1.0:
            raise ConfigError(f"minhash_dedup: threshold must be in (0, 1), got {threshold!r}")
        for key, value, low in (("num_perm", num_perm, 16), ("ngram", ngram, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(
                    f"minhash_dedup: {key} must be an integer >= {low}, got {value!r}"
                )
        self.threshold, self.num_perm, self.ngram = float(threshold), num_perm, ngram
        try:
            self._version = importlib.metadata.version("datasketch")
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError("minhash_dedup needs datasketch: pip install datasketch") from None

    def matcher(self) -> RepeatMatcher:
        return _MinHashIndex(self)

    def settings(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "num_perm": self.num_perm, "ngram": self.ngram}

    def contract(self) -> dict[str, Any]:
        return {**super().contract(), "datasketch": self._version}


class _MinHashIndex:
    def __init__(self, step: MinHashDedup) -> None:
        from datasketch import MinHash, MinHashLSH  # imported only when the step is used

        self._step = step
        self._minhash = MinHash
        self._lsh = MinHashLSH(threshold=step.threshold, num_perm=step.num_perm)
        self._count = 0

    def seen(self, text: str) -> bool:
        words = text.casefold().split()
        n = self._step.ngram
        shingles = {" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)}
        signature = self._minhash(num_perm=self._step.num_perm, seed=_SEED)
        signature.update_batch(sorted(shingles or {" ".join(words).encode()}))
        found = bool(self._lsh.query(signature))
        self._lsh.insert(self._count, signature, check_duplication=False)
        self._count += 1
        return found
