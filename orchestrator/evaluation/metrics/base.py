"""``HeldOutMetric``: what a held-out metric computes at each scored position, and how its
per-document sums become a domain's score."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch


class DocumentWeight(StrEnum):
    """What a domain's score is per: the denominator summed over its documents."""

    BYTES = "bytes"
    """The documents' UTF-8 bytes (tokenizer-independent)."""
    TOKENS = "tokens"
    """The documents' scored tokens (next-token predictions)."""


class HeldOutMetric(ABC):
    """A metric of the model's next-token predictions on every held-out document.

    A document's value is the sum of :meth:`position_values` over its scored positions; a
    domain's score is the sum of its documents' values over the sum of their weights
    (:attr:`per`), and the aggregate is the mean of the domains' scores. The evaluator
    computes every metric of :data:`orchestrator.evaluation.metrics.METRICS` from the
    same logits; the guard decides on one with ``--decide-on NAME``.
    """

    name: ClassVar[str]
    """Its name in ``eval.jsonl``, in MLflow (``eval/<domain>_<name>``) and in ``--decide-on``."""
    title: ClassVar[str]
    """What it is, in words (reports)."""
    per: ClassVar[DocumentWeight]
    higher_is_better: ClassVar[bool]

    @abstractmethod
    def position_values(
        self, *, logits: torch.Tensor, targets: torch.Tensor, nll: torch.Tensor
    ) -> torch.Tensor:
        """Each scored position's value (float64, shape ``[P]``) from its float32 logits
        ``[P, V]``, its target token ``[P]`` and its negative log-likelihood in nats ``[P]``
        (computed once for all metrics). Tensor methods only: this module imports no torch."""
