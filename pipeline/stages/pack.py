"""``pack_flat`` with ``algorithm="wrap"``: fixed-length sequences from a token stream.

Documents (``tokens + [EOS]``) are concatenated into one stream; sequence ``k`` covers stream
positions ``[kT, kT + T]``, so consecutive sequences overlap by one token and every token
after the first is a label exactly once. A flush pads the tail and empties the packer, so a
window's sequences depend only on that window's chunks.

Design: docs/design/pipeline_lanes.md
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class PackingAlgorithm(StrEnum):
    """How ``pack_flat`` cuts documents into sequences (part of the data contract)."""

    WRAP = "wrap"
    """Concatenate documents, each followed by EOS, and cut every T tokens."""


@dataclass(slots=True)
class PackedSequence:
    """One packed training sequence of ``T+1`` tokens."""

    tokens: np.ndarray
    """int32 [T+1]: inputs are ``tokens[:T]``, labels ``tokens[1:]``."""
    doc_starts: np.ndarray
    """int32, sorted input positions in ``[0, T)`` where a document piece starts; begins with 0."""
    doc_sources: np.ndarray
    """int16, dataset index of each document piece (aligned with ``doc_starts``)."""
    num_valid: int
    """Number of real tokens; ``tokens[num_valid:]`` is padding."""


@dataclass(slots=True)
class TokenizedChunk:
    """The tokenizer's output for one work chunk: documents each followed by EOS."""

    tokens: np.ndarray
    """int32, all documents of the chunk concatenated, each ending with EOS."""
    doc_lengths: np.ndarray
    """int64, token count of each document including its EOS."""
    doc_sources: np.ndarray
    """int16, dataset index of each document."""
    removed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    """int16, dataset index of each record read but not trained on (decontamination)."""
    overlapping: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    """int16, dataset index of each record trained on that shares a word n-gram with a
    scored document (counted only with ``overlap_ngram``)."""
    text_bytes: int = 0
    """UTF-8 bytes of text read for the chunk (for counters)."""
    encoded: int = 0
    """Records whose text was read and tokenized for the chunk; the others' tokens came from
    the token cache (for counters)."""
    busy_s: float = 0.0
    """Seconds the worker spent reading and tokenizing (for counters)."""


class WrapPacker:
    """Stateful accumulator of the ``wrap`` packing algorithm (see the design doc)."""

    def __init__(self, max_length: int, pad_id: int) -> None:
        assert max_length >= 1, f"max_length must be >= 1, got {max_length}"
        self.max_length = max_length
        self.pad_id = pad_id
        self._clear_pending()

    def _clear_pending(self) -> None:
        self._tokens = np.zeros(0, dtype=np.int32)
        # Invariant: when tokens are pending, _starts[0] == 0 (the piece at the head).
        self._starts = np.zeros(0, dtype=np.int64)
        self._sources = np.zeros(0, dtype=np.int16)

    def add(self, chunk: TokenizedChunk) -> list[PackedSequence]:
        """Append a chunk's documents; return every sequence that is now complete."""
        if len(chunk.doc_lengths) == 0:
            return []
        offset = len(self._tokens)
        # Where each of the chunk's documents starts in the pending stream.
        starts = np.cumsum(chunk.doc_lengths) - chunk.doc_lengths + offset
        self._tokens = np.concatenate((self._tokens, chunk.tokens))
        self._starts = np.concatenate((self._starts, starts.astype(np.int64, copy=False)))
        self._sources = np.concatenate((self._sources, chunk.doc_sources))
        # Sequence k starts at k*T and spans T+1 tokens: complete while k*T + T + 1 <= pending.
        length = self.max_length
        count = max(0, (len(self._tokens) - 1) // length)
        if count == 0:
            return []
        # All of the chunk's sequences at once: row k is tokens [kT, kT + T], i.e. the k-th
        # block of T tokens and the first token of the next block (two copies, no per-row work).
        rows = np.empty((count, length + 1), dtype=np.int32)
        rows[:, :length] = self._tokens[: count * length].reshape(count, length)
        rows[:, length] = self._tokens[length : count * length + 1 : length]
        positions = np.arange(count, dtype=np.int64) * length
        out = self._build_sequences(positions, length, rows, length + 1)
        self._drop_before(count * length)
        return out

    def flush(self) -> list[PackedSequence]:
        """Emit the padded tail (if it holds a label) and reset to empty."""
        out = []
        length = len(self._tokens)
        if length >= 2:
            tokens = np.full((1, self.max_length + 1), self.pad_id, dtype=np.int32)
            tokens[0, :length] = self._tokens
            input_length = min(length, self.max_length)
            out = self._build_sequences(np.zeros(1, dtype=np.int64), input_length, tokens, length)
        self._clear_pending()
        return out

    def _build_sequences(
        self, positions: np.ndarray, input_length: int, tokens: np.ndarray, num_valid: int
    ) -> list[PackedSequence]:
        """The sequences whose inputs are pending ``[p, p + input_length)`` for each ``p`` in
        ``positions``; ``tokens`` holds their ``T+1`` token rows.

        Every sequence's ``doc_starts`` are the pending piece starts inside its inputs,
        relative to ``p``, the first replaced by 0 (the piece containing ``p``). They are
        gathered for all sequences at once into one array that each sequence slices.
        """
        first = np.searchsorted(self._starts, positions, side="right") - 1
        last = np.searchsorted(self._starts, positions + input_length, side="left")
        counts = last - first
        bounds = np.concatenate(([0], np.cumsum(counts)))
        # Index of every gathered piece in the pending arrays: first[i], first[i]+1, ...
        gather = np.arange(bounds[-1]) + np.repeat(first - bounds[:-1], counts)
        doc_starts = (self._starts[gather] - np.repeat(positions, counts)).astype(np.int32)
        doc_starts[bounds[:-1]] = 0
        doc_sources = self._sources[gather]
        edges = bounds.tolist()
        return [
            PackedSequence(
                tokens=row,
                doc_starts=doc_starts[begin:end],
                doc_sources=doc_sources[begin:end],
                num_valid=num_valid,
            )
            for row, begin, end in zip(tokens, edges[:-1], edges[1:], strict=True)
        ]

    def _drop_before(self, pos: int) -> None:
        """Forget pending tokens before ``pos``, keeping the piece that contains it."""
        if pos == 0:
            return
        first = int(np.searchsorted(self._starts, pos, side="right")) - 1
        self._tokens = self._tokens[pos:]
        self._starts = self._starts[first:] - pos
        self._starts[0] = 0
        self._sources = self._sources[first:]
