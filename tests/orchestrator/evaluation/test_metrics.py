"""The held-out metrics: their registry, and what each computes from a forward's logits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from orchestrator.evaluation import DEFAULT_METRIC, METRICS, held_out_metric
from orchestrator.evaluation.metrics import BitsPerByte, TokenAccuracy
from orchestrator.evaluation.row_scores import score_output
from pipeline import IGNORE_INDEX
from tests.orchestrator.evaluation.test_row_scores import TinyLM, rows_with_padding


def test_the_registry_names_each_metric_once_the_default_first() -> None:
    names = [metric.name for metric in METRICS]
    assert names[0] == DEFAULT_METRIC and len(set(names)) == len(names)
    assert held_out_metric("accuracy").higher_is_better
    with pytest.raises(ValueError, match="unknown held-out metric 'perplexity': use one of bpb"):
        held_out_metric("perplexity")


def test_position_values_are_bits_and_argmax_hits() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    targets = torch.tensor([0, 1])
    nll = F.cross_entropy(logits, targets, reduction="none").double()
    bits = BitsPerByte().position_values(logits=logits, targets=targets, nll=nll)
    assert bits.tolist() == pytest.approx((nll / math.log(2)).tolist())
    hits = TokenAccuracy().position_values(logits=logits, targets=targets, nll=nll)
    assert hits.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("skip_head", [False, True])
def test_row_sums_of_every_metric_match_a_direct_computation(skip_head: bool) -> None:
    model = TinyLM(skip_head=skip_head)
    inputs, labels = rows_with_padding(3, rows=6, length=45)  # more than one softmax chunk
    with torch.no_grad():
        scores = score_output(model, model(inputs), labels, with_greedy=False, metrics=METRICS)
        logits = model.lm_head(model.embed(inputs)).float()
    scored = labels != IGNORE_INDEX
    safe = labels.clamp(min=0)
    nll = F.cross_entropy(logits.transpose(1, 2), safe, reduction="none").double() * scored
    hits = ((logits.argmax(dim=-1) == labels) & scored).double()
    assert scores.metric_sums["bpb"].tolist() == pytest.approx(
        (nll.sum(dim=1) / math.log(2)).tolist(), rel=1e-6
    )
    assert scores.metric_sums["accuracy"].tolist() == hits.sum(dim=1).tolist()
    assert scores.greedy is None
