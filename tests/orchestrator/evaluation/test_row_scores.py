"""score_output: the scored positions' log-likelihoods, chunked, equal to the whole batch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from orchestrator.evaluation.row_scores import SOFTMAX_CHUNK_POSITIONS, RowScores, score_output
from pipeline import IGNORE_INDEX

VOCAB, WIDTH = 300, 16


class TinyLM(torch.nn.Module):
    """Embedding then a head; ``skip_head`` makes it return hidden states, as TorchTitan's
    models do under its chunked loss."""

    def __init__(self, *, skip_head: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self._skip_lm_head = skip_head
        self.head_calls = 0
        self.lm_head.register_forward_hook(
            lambda *_: setattr(self, "head_calls", self.head_calls + 1)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(tokens)
        return hidden if self._skip_lm_head else self.lm_head(hidden)


@torch.no_grad()
def whole_batch_scores(model: TinyLM, inputs: torch.Tensor, labels: torch.Tensor) -> RowScores:
    """The reference: every position's logits at once, padding included."""
    logits = model.lm_head(model.embed(inputs)).float()
    per_position = F.cross_entropy(
        logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none", ignore_index=IGNORE_INDEX
    ).reshape(labels.shape)
    scored = labels != IGNORE_INDEX
    greedy = ((logits.argmax(dim=-1) == labels) | ~scored).all(dim=1)
    return RowScores(nll=per_position.double().sum(dim=1).numpy(), greedy=greedy.numpy())


def rows_with_padding(seed: int, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random rows whose labels end in padding of random length (some rows all padding)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, VOCAB, (rows, length), generator=generator)
    labels = torch.randint(0, VOCAB, (rows, length), generator=generator)
    for row, scored in enumerate(torch.randint(0, length + 1, (rows,), generator=generator)):
        labels[row, int(scored) :] = IGNORE_INDEX
    return inputs, labels


@pytest.mark.parametrize("skip_head", [False, True])
@pytest.mark.parametrize("rows,length", [(1, 1), (3, 7), (8, 40), (5, SOFTMAX_CHUNK_POSITIONS + 1)])
def test_scores_match_the_whole_batch_at_once(skip_head: bool, rows: int, length: int) -> None:
    model = TinyLM(skip_head=skip_head)
    for seed in range(5):
        inputs, labels = rows_with_padding(seed, rows, length)
        with torch.no_grad():
            got = score_output(model, model(inputs), labels, with_greedy=True)
            want = whole_batch_scores(model, inputs, labels)
        np.testing.assert_allclose(got.nll, want.nll, rtol=1e-6, atol=1e-9)
        assert got.nll.dtype == np.float64 and got.nll.shape == (rows,)
        np.testing.assert_array_equal(got.greedy, want.greedy)
        assert got.nll[(labels == IGNORE_INDEX).all(dim=1).numpy()].tolist() == [0.0] * int(
            (labels == IGNORE_INDEX).all(dim=1).sum()
        )


def test_greedy_is_true_where_every_label_is_the_argmax() -> None:
    model = TinyLM(skip_head=True)
    inputs, _ = rows_with_padding(1, 4, 9)
    with torch.no_grad():
        argmax = model.lm_head(model.embed(inputs)).argmax(dim=-1)
        labels = argmax.clone()
        labels[1, 3] = (argmax[1, 3] + 1) % VOCAB  # row 1 has one label the model does not pick
        labels[2, 5:] = IGNORE_INDEX  # padding does not count against row 2
        got = score_output(model, model(inputs), labels, with_greedy=True)
    assert got.greedy is not None and got.greedy.tolist() == [True, False, True, True]


def test_without_greedy_nothing_is_claimed_and_the_head_runs_once() -> None:
    model = TinyLM(skip_head=True)
    inputs, labels = rows_with_padding(2, 6, 3 * SOFTMAX_CHUNK_POSITIONS)
    with torch.no_grad():
        got = score_output(model, model(inputs), labels, with_greedy=False)
    assert got.greedy is None
    # one call per forward, whatever the rows hold: every dp rank makes the same FSDP calls
    assert model.head_calls == 1
    np.testing.assert_allclose(got.nll, whole_batch_scores(model, inputs, labels).nll, rtol=1e-6)
