"""``IndexPermutation``: a seeded bijection of ``[0, n)`` in O(1) memory (a Feistel network).

A balanced four-round Feistel network permutes the ``2 * half``-bit integers; cycle walking
(applying it again until the value falls below ``n``) restricts it to ``[0, n)``. Nothing is
materialised: position ``i`` maps to ``perm[i]`` in a few integer operations, so an order over
billions of records costs what it is asked for, not what it covers (Grain's ``index_shuffle``
works the same way). Design: docs/design/pipeline_order.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MASK64 = (1 << 64) - 1
_ROUNDS = 4


def _mix64(value: int) -> int:
    """SplitMix64's finaliser: a bijective avalanche of a 64-bit integer."""
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


class IndexPermutation:
    """A pseudo-random permutation of ``range(size)``, a pure function of ``size`` and ``seed``.

    ``seed`` is a sequence of non-negative integers (as for ``numpy.random.SeedSequence``);
    different seeds give independent-looking permutations of the same size.
    """

    def __init__(self, size: int, seed: Sequence[int]) -> None:
        assert size >= 0, f"a permutation's size must be >= 0, got {size}"
        self.size = size
        bits = max(2, (size - 1).bit_length())
        self._half = (bits + 1) // 2
        self._mask = (1 << self._half) - 1
        keys = np.random.SeedSequence(list(seed)).generate_state(_ROUNDS, np.uint64)
        self._keys = [int(k) for k in keys]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        """The permuted position of ``index`` (``0 <= index < size``)."""
        if not 0 <= index < self.size:
            raise IndexError(f"permutation index {index} out of range [0, {self.size})")
        value = self._encrypt(index)
        while value >= self.size:  # cycle walking: at most ~4 rounds on average
            value = self._encrypt(value)
        return value

    def take(self, count: int) -> list[int]:
        """The first ``count`` permuted positions: ``[self[0], ..., self[count - 1]]``."""
        return [self[i] for i in range(min(count, self.size))]

    def _encrypt(self, value: int) -> int:
        half, mask = self._half, self._mask
        left, right = value >> half, value & mask
        for key in self._keys:
            left, right = right, left ^ (_mix64(right ^ key) & mask)
        return (left << half) | right
