"""``MicroBatch``: what the pipeline yields, and its conversion to training tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.stages.pack import PackedSequence

if TYPE_CHECKING:
    import torch

IGNORE_INDEX = -100
"""Label of padded positions (PyTorch's cross-entropy default ``ignore_index``)."""


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a step's local batch (this rank's lanes, in lane order)."""

    step: int
    """Global step index, counted from the start of the run (restores continue it)."""
    index: int
    """Position of this micro-batch within the step's local batch."""
    count: int
    """Number of micro-batches in the step's local batch."""
    sequences: tuple[PackedSequence, ...]
    """The micro-batch's packed sequences."""
    lanes: tuple[int, ...]
    """Lane of each sequence."""
    lane_digests: dict[int, bytes]
    """Digest of each of this rank's lanes for the whole step (the same on every micro-batch)."""

    @property
    def is_last(self) -> bool:
        """True on the step's last micro-batch."""
        return self.index == self.count - 1

    def tokens(self) -> np.ndarray:
        """int32 [m, T+1] token ids (inputs plus the final label)."""
        return np.stack([s.tokens for s in self.sequences])

    def to_training(self) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        """Tensors for a training step.

        Returns ``input`` [m, T] and ``labels`` [m, T] (int64; padded label positions
        are ``IGNORE_INDEX``), ``positions`` [m, T] (reset to 0 at every document start)
        and ``document_starts``: per row, an int32 tensor of the input positions where
        a document starts (the start of padding counts as one).
        """
        import torch  # deferred: worker processes import this package without needing torch

        tokens = self.tokens().astype(np.int64)
        max_length = tokens.shape[1] - 1
        labels = tokens[:, 1:].copy()
        arange = np.arange(max_length)
        positions = np.empty((len(self.sequences), max_length), dtype=np.int64)
        starts_out = []
        for row, seq in enumerate(self.sequences):
            labels[row, max(0, seq.num_valid - 1) :] = IGNORE_INDEX
            starts = seq.doc_starts
            if seq.num_valid < max_length:
                starts = np.append(starts, seq.num_valid).astype(np.int32)
            owner = np.searchsorted(starts, arange, side="right") - 1
            positions[row] = arange - starts[owner]
            starts_out.append(torch.from_numpy(starts.astype(np.int32)))
        return {
            "input": torch.from_numpy(np.ascontiguousarray(tokens[:, :-1])),
            "labels": torch.from_numpy(labels),
            "positions": torch.from_numpy(positions),
            "document_starts": starts_out,
        }
