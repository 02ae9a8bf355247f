"""Bits per byte: the held-out cross-entropy in bits over the documents' UTF-8 bytes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from orchestrator.evaluation.metrics.base import DocumentWeight, HeldOutMetric

if TYPE_CHECKING:
    import torch


class BitsPerByte(HeldOutMetric):
    """``-log2 p(target)`` summed over a document's tokens, per byte of the document: a
    tokenizer-independent loss, Zephon's default score (lower is better)."""

    name = "bpb"
    title = "held-out bits per byte"
    per = DocumentWeight.BYTES
    higher_is_better = False

    def position_values(
        self, *, logits: torch.Tensor, targets: torch.Tensor, nll: torch.Tensor
    ) -> torch.Tensor:
        return nll / math.log(2)
