"""lm-eval tasks on a tiny real model through ``ZephonLM``, offline, against direct scoring.

The model embeds tokens and takes the running mean over positions before the output
layer, so every logit depends on all of its context (EOS first, truncation) and on
nothing after it, as a causal language model's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance

from orchestrator.evaluation.lm_eval_adapter import (
    TaskScores,
    ZephonLM,
    model_row_scorer,
    run_tasks,
)
from orchestrator.evaluation.task_lookup import task_manager
from pipeline import IGNORE_INDEX, ConfigError, Tokenizer, load_tokenizer
from tests.support.tasks import MC_ITEMS, PPL_TEXTS, write_tasks

VOCAB = 50257
SEQ_LEN = 24


class CausalMean(torch.nn.Module):
    """Logits of the running mean of the token embeddings: ``[rows, T] -> [rows, T, V]``."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.out = torch.nn.Linear(16, VOCAB)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(VOCAB, 16, generator=generator))
            self.out.weight.copy_(torch.randn(VOCAB, 16, generator=generator) * 0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        counts = torch.arange(1, tokens.shape[1] + 1, dtype=torch.float32).view(1, -1, 1)
        return self.out(self.embed(tokens).cumsum(dim=1) / counts)


class SkipHead(CausalMean):
    """The same model, returning hidden states as TorchTitan's does with ``_skip_lm_head``."""

    _skip_lm_head = True

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        counts = torch.arange(1, tokens.shape[1] + 1, dtype=torch.float32).view(1, -1, 1)
        return self.embed(tokens).cumsum(dim=1) / counts

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.out(hidden)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer("gpt2")


@pytest.fixture(scope="module")
def model() -> CausalMean:
    return CausalMean().eval()


@pytest.fixture(scope="module")
def lm(tokenizer: Tokenizer, model: CausalMean) -> ZephonLM:
    return ZephonLM(tokenizer, SEQ_LEN, model_row_scorer(model, rows_per_forward=4))


def direct_logprobs(model: torch.nn.Module, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``ln p(tokens[i+1] | tokens[:i+1])`` and whether it is the argmax, one unpadded forward."""
    with torch.no_grad():
        logits = model(torch.tensor([tokens[:-1]]))[0].double()
    targets = torch.tensor(tokens[1:])
    logprobs = torch.log_softmax(logits, dim=-1)[torch.arange(len(targets)), targets]
    return logprobs.numpy(), (logits.argmax(dim=-1) == targets).numpy()


def request(kind: str, *args: str) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)  # type: ignore[arg-type]


def expected_pair(
    model: torch.nn.Module, tokenizer: Tokenizer, context: str, continuation: str
) -> tuple[float, bool]:
    """HFLM's encoding (context without trailing spaces), scored on the last SEQ_LEN + 1 tokens."""
    stripped = context.rstrip()
    continuation = context[len(stripped) :] + continuation
    context_ids = tokenizer.encode(stripped) if stripped else [tokenizer.eos_id]
    whole = (
        tokenizer.encode(stripped + continuation)
        if stripped
        else context_ids + tokenizer.encode(continuation)
    )
    continuation_ids = whole[len(context_ids) :]
    tokens = (context_ids + continuation_ids)[-(SEQ_LEN + 1) :]
    logprobs, greedy = direct_logprobs(model, tokens)
    k = len(continuation_ids)
    return float(logprobs[-k:].sum()), bool(greedy[-k:].all())


def test_loglikelihood_equals_direct_scoring(
    lm: ZephonLM, model: CausalMean, tokenizer: Tokenizer
) -> None:
    pairs = [
        ("The capital of France is", " Paris, of course"),
        ("The capital of France is ", "Paris, of course"),
        ("", "An empty context is EOS"),
        ("Question: what is 2+2?\nAnswer:", " 4"),
    ]
    answers = lm.loglikelihood([request("loglikelihood", *p) for p in pairs])
    assert len(answers) == len(pairs)
    for pair, (logprob, greedy) in zip(pairs, answers, strict=True):
        want, want_greedy = expected_pair(model, tokenizer, *pair)
        assert logprob == pytest.approx(want, rel=1e-6, abs=1e-6), pair
        assert greedy == want_greedy
        assert logprob < 0
    # Trailing whitespace moves to the continuation: the same tokens, the same score.
    assert answers[0][0] == pytest.approx(answers[1][0], rel=1e-9)
    # Row batching does not change scores.
    one_row = ZephonLM(tokenizer, SEQ_LEN, model_row_scorer(model, rows_per_forward=1))
    again = one_row.loglikelihood([request("loglikelihood", *p) for p in pairs])
    np.testing.assert_allclose([a[0] for a in again], [a[0] for a in answers], rtol=1e-6)


def test_is_greedy_only_when_every_token_is_the_argmax(
    lm: ZephonLM, model: CausalMean, tokenizer: Tokenizer
) -> None:
    context = "The model's favourite word is"

    def ranked(text: str) -> list[int]:
        """The model's next tokens after ``text``, best first, that encode back to themselves."""
        ids = tokenizer.encode(text)
        with torch.no_grad():
            order = model(torch.tensor([ids]))[0, -1].argsort(descending=True).tolist()
        return [
            t
            for t in order[:100] + order[-100:]  # the most and the least likely
            if tokenizer.encode(text + tokenizer.decode([t]))[len(ids) :] == [t]
        ]

    first = ranked(context)
    with torch.no_grad():
        argmax = int(model(torch.tensor([tokenizer.encode(context)]))[0, -1].argmax())
    assert first[0] == argmax
    best = tokenizer.decode([first[0]])
    second = ranked(context + best)
    continuations = [
        best,  # greedy
        tokenizer.decode([first[-1]]),  # the least likely token
        best + tokenizer.decode([second[0]]),  # two greedy tokens
        best + tokenizer.decode([second[-1]]),  # greedy, then not
    ]
    answers = lm.loglikelihood([request("loglikelihood", context, c) for c in continuations])
    assert [greedy for _, greedy in answers] == [True, False, True, False]
    for continuation, (logprob, _) in zip(continuations, answers, strict=True):
        want = expected_pair(model, tokenizer, context, continuation)[0]
        assert logprob == pytest.approx(want, rel=1e-6)


def test_truncation_keeps_the_continuation(
    lm: ZephonLM, model: CausalMean, tokenizer: Tokenizer
) -> None:
    context = " ".join(f"word{i}" for i in range(40))  # far more than SEQ_LEN tokens
    continuation = " and the end of it all"
    context_ids = tokenizer.encode(context)
    continuation_ids = tokenizer.encode(context + continuation)[len(context_ids) :]
    assert len(context_ids) + len(continuation_ids) > SEQ_LEN + 1
    ((logprob, _),) = lm.loglikelihood([request("loglikelihood", context, continuation)])
    kept = (context_ids + continuation_ids)[-(SEQ_LEN + 1) :]
    logprobs, _ = direct_logprobs(model, kept)
    assert logprob == pytest.approx(float(logprobs[-len(continuation_ids) :].sum()), rel=1e-6)
    # The context was cut (the untruncated score differs), the continuation was not.
    full, _ = direct_logprobs(model, context_ids + continuation_ids)
    assert abs(float(full[-len(continuation_ids) :].sum()) - logprob) > 1e-3
    too_long = " ".join(["word"] * (SEQ_LEN + 5))
    with pytest.raises(ConfigError, match="longer than the model's seq_len"):
        lm.loglikelihood([request("loglikelihood", "Context", too_long)])


def test_rolling_equals_the_sum_over_held_out_windows(
    lm: ZephonLM, model: CausalMean, tokenizer: Tokenizer
) -> None:
    text = PPL_TEXTS[1] + PPL_TEXTS[2]
    doc = [tokenizer.eos_id, *tokenizer.encode(text)]
    assert len(doc) - 1 > 2 * SEQ_LEN  # three windows at least
    want, starts = 0.0, list(range(0, len(doc) - 1, SEQ_LEN))
    for start in starts:
        want += float(direct_logprobs(model, doc[start : start + SEQ_LEN + 1])[0].sum())
    inputs, labels = lm.rolling_rows(text)
    assert len(inputs) == len(starts)
    assert int((labels != IGNORE_INDEX).sum()) == len(doc) - 1  # every token scored once
    got = lm.loglikelihood_rolling(
        [request("loglikelihood_rolling", text), request("loglikelihood_rolling", "")]
    )
    assert got[0] == pytest.approx(want, rel=1e-6)
    assert got[1] == 0.0
    # Not the same as scoring the text in one window of unlimited length.
    assert abs(float(direct_logprobs(model, doc)[0].sum()) - want) > 1e-3


def test_skip_lm_head_models_score_the_same(
    lm: ZephonLM, model: CausalMean, tokenizer: Tokenizer
) -> None:
    skip = SkipHead()
    skip.load_state_dict(model.state_dict())
    other = ZephonLM(tokenizer, SEQ_LEN, model_row_scorer(skip, rows_per_forward=2))
    requests = [request("loglikelihood", "Some context", " and more")]
    assert other.loglikelihood(requests)[0][0] == pytest.approx(lm.loglikelihood(requests)[0][0])


def test_generate_until_is_refused(lm: ZephonLM) -> None:
    with pytest.raises(ConfigError, match=r"generation tasks .* not supported.*multiple-choice"):
        lm.generate_until([request("generate_until", "Say", {"until": ["\n"]})])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lm-eval"))


@pytest.fixture(scope="module")
def scores(lm: ZephonLM, task_dir: Path) -> TaskScores:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        online = huggingface_hub.constants.HF_HUB_OFFLINE
        result = run_tasks(lm, ["tiny_mc", "tiny_ppl"], task_dir)
        assert huggingface_hub.constants.HF_HUB_OFFLINE is online  # restored after the call
    return result


def test_multiple_choice_items_and_metrics(scores: TaskScores, lm: ZephonLM) -> None:
    items = [s for s in scores.items if s.task == "tiny_mc"]
    assert [s.item for s in items] == list(range(len(MC_ITEMS)))  # every item, once
    for score in items:
        assert set(score.metrics) == {"acc", "acc_norm"}
        assert all(v in (0.0, 1.0) for v in score.metrics.values())
        # The item's acc is the adapter's own argmax over the choices' loglikelihoods.
        item = MC_ITEMS[score.item]
        logprobs = [
            lm.loglikelihood([request("loglikelihood", item["question"], " " + c)])[0][0]
            for c in item["choices"]
        ]
        assert score.metrics["acc"] == float(int(np.argmax(logprobs)) == item["gold"])
    for metric in ("acc", "acc_norm"):
        mean = sum(s.metrics[metric] for s in items) / len(items)
        assert scores.metrics["tiny_mc"][metric] == pytest.approx(mean)
    assert not any("," in name for name in scores.metrics["tiny_mc"])


def test_perplexity_items_and_metrics(scores: TaskScores, lm: ZephonLM) -> None:
    items = [s for s in scores.items if s.task == "tiny_ppl"]
    assert [s.item for s in items] == list(range(len(PPL_TEXTS)))
    rolling = lm.loglikelihood_rolling([request("loglikelihood_rolling", t) for t in PPL_TEXTS])
    for score, text, logprob in zip(items, PPL_TEXTS, rolling, strict=True):
        assert score.metrics["loglikelihood"] == pytest.approx(logprob, rel=1e-9)
        assert score.metrics["bytes"] == len(text.encode())
        assert score.metrics["bits_per_byte"] == pytest.approx(
            -logprob / len(text.encode()) / math.log(2)
        )
        assert score.metrics["byte_perplexity"] == pytest.approx(
            math.exp(-logprob / len(text.encode()))
        )
    task = scores.metrics["tiny_ppl"]
    assert set(task) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}
    total_bytes = sum(len(t.encode()) for t in PPL_TEXTS)
    assert task["bits_per_byte"] == pytest.approx(-sum(rolling) / total_bytes / math.log(2))
    assert task["byte_perplexity"] == pytest.approx(math.exp(-sum(rolling) / total_bytes))


def test_records_are_one_line_per_item(scores: TaskScores) -> None:
    records = scores.to_records(step=40)
    assert len(records) == len(MC_ITEMS) + len(PPL_TEXTS)
    assert records[0] == {
        "step": 40,
        "task": "tiny_mc",
        "item": 0,
        "metrics": scores.items[0].metrics,
    }
    assert {tuple(sorted(r)) for r in records} == {("item", "metrics", "step", "task")}
    json.dumps(records)  # plain JSON


def test_limit_takes_the_first_items(lm: ZephonLM, task_dir: Path) -> None:
    limited = run_tasks(lm, ["tiny_mc"], task_dir, limit=2)
    assert [(s.task, s.item) for s in limited.items] == [("tiny_mc", 0), ("tiny_mc", 1)]


def test_generation_task_is_refused(lm: ZephonLM, task_dir: Path) -> None:
    with pytest.raises(ConfigError, match="not supported"):
        run_tasks(lm, ["tiny_gen"], task_dir)


def test_a_generation_task_is_refused_when_the_run_is_planned(task_dir: Path) -> None:
    """Before any training, naming the task (its output_type is in its YAML)."""
    with pytest.raises(ConfigError, match=r"task\(s\) 'tiny_gen': generation tasks .*not supp"):
        task_manager(["tiny_mc", "tiny_gen", "tiny_ppl"], task_dir)
    assert "tiny_mc" in task_manager(["tiny_mc", "tiny_ppl"], task_dir).task_index


def test_unknown_task_names_the_task_and_the_folder(lm: ZephonLM, task_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"'no_such_task_xyz'.*eval\.task_dir.*put the task's YAML"
    ):
        run_tasks(lm, ["tiny_mc", "no_such_task_xyz"], task_dir)
