"""Next-token accuracy: how often the model's most likely next token is the document's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.evaluation.metrics.base import DocumentWeight, HeldOutMetric

if TYPE_CHECKING:
    import torch


class TokenAccuracy(HeldOutMetric):
    """The share of a domain's scored tokens that the model predicts most likely: whose logit
    is the largest (a tie counts as a hit; higher is better)."""

    name = "accuracy"
    title = "held-out next-token accuracy"
    per = DocumentWeight.TOKENS
    higher_is_better = True

    def position_values(
        self, *, logits: torch.Tensor, targets: torch.Tensor, nll: torch.Tensor
    ) -> torch.Tensor:
        # the largest value, not its index: amax is vectorised, argmax is ~4x slower on CPU
        label = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return (label == logits.amax(dim=-1)).double()
