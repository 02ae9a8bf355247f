"""Next-token accuracy: how often the model's most likely next token is the document's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.evaluation.metrics.base import DocumentWeight, HeldOutMetric

if TYPE_CHECKING:
    import torch


class TokenAccuracy(HeldOutMetric):
    """The share of a domain's scored tokens that are the argmax of the model's prediction
    (higher is better)."""

    name = "accuracy"
    title = "held-out next-token accuracy"
    per = DocumentWeight.TOKENS
    higher_is_better = True

    def position_values(
        self, *, logits: torch.Tensor, targets: torch.Tensor, nll: torch.Tensor
    ) -> torch.Tensor:
        return (logits.argmax(dim=-1) == targets).double()
