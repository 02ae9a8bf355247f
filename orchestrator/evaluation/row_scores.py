"""Each row's negative log-likelihood (and greedy match, and the sums of any held-out metrics)
from one forward's output, computed at the scored positions only, a few positions'
log-softmax at a time.

The held-out evaluator and the lm-eval adapter score rows with it. Over a
50,257-token vocabulary the output layer and its log-softmax are nearly all of an
evaluation's cost, so:

* the head runs on the scored positions only (a row's padding is never projected);
* the log-softmax runs on :data:`SOFTMAX_CHUNK_POSITIONS` positions at a time, whose
  float32 logits stay in a core's cache, not on the whole batch's (hundreds of MB);
* the argmax pass runs only when greedy matches are asked for (lm-eval tasks).

Measured on a 2-core AMD EPYC, one thread, bfloat16 weights, 1,024 positions: 0.45 s
for the whole batch at once, 0.15 s in chunks of 32 (docs/benchmarks.md, start-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from orchestrator.evaluation.metrics import HeldOutMetric
from pipeline import IGNORE_INDEX

SOFTMAX_CHUNK_POSITIONS = 32
"""Positions whose log-softmax is taken at once: 32 x 50,257 float32 logits are 6.4 MB."""


@dataclass(frozen=True)
class RowScores:
    """Per-row scores of one forward (float64 sums over each row's scored labels)."""

    nll: np.ndarray
    """``-ln p(label)`` summed over the row's labels other than ``IGNORE_INDEX`` (nats)."""
    greedy: np.ndarray | None
    """Every scored label is the argmax of its logits (bool); None when not asked for."""
    metric_sums: dict[str, np.ndarray] = field(default_factory=dict)
    """Metric name -> the sum of its position values over each row (float64)."""


def score_output(
    model: torch.nn.Module,
    output: torch.Tensor,
    labels: torch.Tensor,
    *,
    with_greedy: bool,
    metrics: Sequence[HeldOutMetric] = (),
) -> RowScores:
    """The scores of ``labels [rows, T]`` from ``output = model(inputs)``: logits
    ``[rows, T, V]``, or hidden states ``[rows, T, D]`` when the model has TorchTitan's
    ``_skip_lm_head`` set (its chunked loss applies ``model.lm_head``).

    Calls ``model.lm_head`` at most once, whatever the rows hold, so that every dp rank
    makes the same calls (FSDP gathers the head's weights in them). ``metrics``: the
    held-out metrics summed per row, from the same logits.
    """
    scored = labels != IGNORE_INDEX
    if getattr(model, "_skip_lm_head", False):
        if isinstance(output, DTensor):  # tensor parallel: the head's output is sharded
            output = model.lm_head(output)
            logits = output.full_tensor()[scored]
        else:
            logits = model.lm_head(output[scored])
    else:
        logits = (output.full_tensor() if isinstance(output, DTensor) else output)[scored]
    targets = labels[scored]
    position_nll = torch.empty(len(targets), dtype=torch.float64, device=targets.device)
    position_wrong = torch.zeros(len(targets), dtype=torch.int64, device=targets.device)
    position_metric = torch.empty(
        (len(metrics), len(targets)), dtype=torch.float64, device=targets.device
    )
    for start in range(0, len(targets), SOFTMAX_CHUNK_POSITIONS):
        stop = start + SOFTMAX_CHUNK_POSITIONS
        chunk, chunk_targets = logits[start:stop].float(), targets[start:stop]
        position_nll[start:stop] = F.cross_entropy(chunk, chunk_targets, reduction="none")
        if with_greedy:
            position_wrong[start:stop] = chunk.argmax(dim=-1) != chunk_targets
        for m, metric in enumerate(metrics):
            position_metric[m, start:stop] = metric.position_values(
                logits=chunk, targets=chunk_targets, nll=position_nll[start:stop]
            )
    row_of_position = scored.nonzero()[:, 0]
    nll = torch.zeros(len(labels), dtype=torch.float64, device=targets.device)
    nll.index_add_(0, row_of_position, position_nll)
    greedy = None
    if with_greedy:
        wrong = torch.zeros(len(labels), dtype=torch.int64, device=targets.device)
        wrong.index_add_(0, row_of_position, position_wrong)
        greedy = (wrong == 0).cpu().numpy()
    sums = torch.zeros((len(metrics), len(labels)), dtype=torch.float64, device=targets.device)
    sums.index_add_(1, row_of_position, position_metric)
    metric_sums = {metric.name: sums[m].cpu().numpy() for m, metric in enumerate(metrics)}
    return RowScores(nll=nll.cpu().numpy(), greedy=greedy, metric_sums=metric_sums)
