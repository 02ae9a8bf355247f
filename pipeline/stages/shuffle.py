"""``shuffle``: a seeded buffer shuffle, reset at every flush point.

Algorithm (per lane, per flush window ``w``), with buffer size ``B`` and
``rng = PCG64(SeedSequence([seed, lane, w]))``::

    push(x):  if len(buf) < B: buf.append(x)              -> emits nothing
              else: j = rng.integers(B); emit buf[j]; buf[j] = x
    flush():  emit buf in the order rng.permutation(len(buf)); buf = []

Because the generator is re-seeded from ``(seed, lane, w)`` at each window,
a window's output order depends only on that window's input: restoring a
lane replays at most one window. ``B <= 1`` leaves the order unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


class ShuffleBuffer(Generic[T]):
    """Stateful accumulator of the seeded buffer shuffle (see module docstring)."""

    def __init__(self, buffer_size: int, seed: int) -> None:
        assert buffer_size >= 0, f"shuffle buffer_size must be >= 0, got {buffer_size}"
        self.buffer_size = buffer_size
        self.seed = seed
        self._buf: list[T] = []
        self._rng = np.random.default_rng(0)

    def start_window(self, lane: int, window: int) -> None:
        """Re-seed for flush window ``window`` of ``lane``; the buffer must be empty."""
        assert not self._buf, "start_window() called with items still buffered; flush() first"
        self._rng = np.random.default_rng([self.seed, lane, window])

    def push(self, item: T) -> list[T]:
        """Add one item; return the items that leave the buffer (zero or one)."""
        return self.push_many([item])

    def push_many(self, items: Sequence[T]) -> list[T]:
        """``push`` each item in order; return all the items that leave the buffer.

        Draws the indices of a batch in one call: ``integers(B, size=n)`` gives the same
        numbers as ``n`` calls of ``integers(B)`` and leaves the generator in the same state.
        """
        if self.buffer_size <= 1:
            return list(items)
        room = self.buffer_size - len(self._buf)
        self._buf.extend(items[:room])
        rest = items[room:]
        out: list[T] = []
        buf = self._buf
        slots = self._rng.integers(self.buffer_size, size=len(rest)).tolist()
        for j, item in zip(slots, rest, strict=True):
            out.append(buf[j])
            buf[j] = item
        return out

    def flush(self) -> list[T]:
        """Emit everything buffered, in a seeded random order, and empty the buffer."""
        order = self._rng.permutation(len(self._buf))
        out = [self._buf[i] for i in order]
        self._buf = []
        return out
