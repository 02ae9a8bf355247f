"""lm-evaluation-harness (``lm_eval``) tasks scored on a Zephon TorchTitan model, offline.

:class:`ZephonLM` turns lm-eval's requests into held-out-style rows for a
:class:`RowScorer` (which may deal them over dp ranks); :func:`run_tasks` runs tasks by
name and returns per-task and per-item scores (the lines of ``zephon/tasks.jsonl``).

Design: docs/tasks.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import lm_eval
import lm_eval.tasks
import numpy as np
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import get_metric_aggregation
from torchtitan.components.loss import IGNORE_INDEX

from orchestrator.evaluation.row_scores import score_output
from orchestrator.evaluation.task_lookup import GENERATION_REFUSED, folder_hint, task_manager
from pipeline import ConfigError, Tokenizer

_PAIR_WEIGHTS = {"word_perplexity": "words", "byte_perplexity": "bytes", "bits_per_byte": "bytes"}
"""Weight names of lm-eval's ``(loglikelihood, weight)`` per-document metrics."""


class RowScorer(Protocol):
    """Scores rows: ``(inputs, labels)`` LongTensors ``[rows, T]`` -> ``(nll, greedy)``.

    ``nll[row]`` (float64): sum over the row's labels other than ``IGNORE_INDEX`` of
    ``-ln p(label)``; ``greedy[row]`` (bool): every such label is the argmax of its
    logits. Both cover all rows, in order, on every rank that calls it.
    """

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Score ``[rows, T]`` rows; see the class docstring."""
        ...


def model_row_scorer(model: torch.nn.Module, rows_per_forward: int) -> RowScorer:
    """A single-process :class:`RowScorer` running ``model(inputs) -> logits [rows, T, V]``.

    ``rows_per_forward`` rows per forward pass, on the device of the model's first
    parameter, in eval mode (the model's mode is restored). A TorchTitan model with
    ``_skip_lm_head`` (its chunked loss applies the head) gets ``model.lm_head`` applied.
    """
    if rows_per_forward < 1:
        raise ConfigError(f"rows_per_forward must be >= 1, got {rows_per_forward}")

    @torch.no_grad()
    def score(inputs: torch.Tensor, labels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        parameter = next(model.parameters(), None)
        device = parameter.device if parameter is not None else torch.device("cpu")
        nll = np.zeros(len(inputs), dtype=np.float64)
        greedy = np.ones(len(inputs), dtype=bool)
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(inputs), rows_per_forward):
                batch_in = inputs[start : start + rows_per_forward].to(device)
                batch_labels = labels[start : start + rows_per_forward].to(device)
                row_scores = score_output(model, model(batch_in), batch_labels, with_greedy=True)
                nll[start : start + len(batch_in)] = row_scores.nll
                greedy[start : start + len(batch_in)] = row_scores.greedy
        finally:
            model.train(was_training)
        return nll, greedy

    return score


class ZephonLM(LM):
    """lm-eval model scoring requests as rows on a :class:`RowScorer` (module docstring).

    Supports ``loglikelihood`` (multiple-choice tasks) and ``loglikelihood_rolling``
    (perplexity tasks); ``generate_until`` raises :class:`pipeline.ConfigError`.
    """

    def __init__(self, tokenizer: Tokenizer, seq_len: int, score_rows: RowScorer) -> None:
        """Score with ``score_rows`` on rows of ``seq_len`` tokens, encoding with ``tokenizer``."""
        super().__init__()
        if seq_len < 1:
            raise ConfigError(f"seq_len must be >= 1, got {seq_len}")
        self._tokenizer = tokenizer
        self.seq_len = seq_len
        self.score_rows = score_rows

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens of a request, as lm-eval's HFLM makes them.

        Trailing whitespace of the context moves to the continuation; the continuation's
        tokens are those of ``context + continuation`` after the context's token count.
        An empty context is ``[EOS]``.
        """
        stripped = context.rstrip()
        continuation = context[len(stripped) :] + continuation
        if not stripped:
            return [self._tokenizer.eos_id], self._tokenizer.encode(continuation)
        context_ids = self._tokenizer.encode(stripped)
        whole = self._tokenizer.encode(stripped + continuation)
        return context_ids, whole[len(context_ids) :]

    def loglikelihood(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` per ``(context, continuation)`` request."""
        if not requests:
            return []
        inputs = np.zeros((len(requests), self.seq_len), dtype=np.int64)
        labels = np.full((len(requests), self.seq_len), IGNORE_INDEX, dtype=np.int64)
        for row, request in enumerate(requests):
            context, continuation = request.args
            context_ids, continuation_ids = self.encode_pair(context, continuation)
            if len(continuation_ids) > self.seq_len:
                raise ConfigError(
                    f"a continuation of {len(continuation_ids)} tokens is longer than the "
                    f"model's seq_len {self.seq_len}: {continuation[:80]!r}; only "
                    "continuations of at most seq_len tokens can be scored"
                )
            tokens = (context_ids + continuation_ids)[-(self.seq_len + 1) :]
            n = len(tokens) - 1
            inputs[row, :n] = tokens[:-1]
            if continuation_ids:
                labels[row, n - len(continuation_ids) : n] = continuation_ids
        nll, greedy = self.score_rows(torch.from_numpy(inputs), torch.from_numpy(labels))
        answers = [(-float(nll[i]), bool(greedy[i])) for i in range(len(requests))]
        for request, answer in zip(requests, answers, strict=True):
            self.cache_hook.add_partial("loglikelihood", request.args, answer)
        return answers

    def rolling_rows(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """``text``'s windows (``inputs``, ``labels`` ``[rows, seq_len]``), as HeldOutEvaluator's.

        Tokens ``[EOS] + encode(text)``; windows of ``seq_len + 1`` tokens overlapping by
        one, so that every token of the text is a label exactly once. No rows if empty.
        """
        doc = [self._tokenizer.eos_id, *self._tokenizer.encode(text)]
        starts = range(0, len(doc) - 1, self.seq_len)
        inputs = np.zeros((len(starts), self.seq_len), dtype=np.int64)
        labels = np.full((len(starts), self.seq_len), IGNORE_INDEX, dtype=np.int64)
        for row, start in enumerate(starts):
            piece = doc[start : start + self.seq_len + 1]
            inputs[row, : len(piece) - 1] = piece[:-1]
            labels[row, : len(piece) - 1] = piece[1:]
        return inputs, labels

    def loglikelihood_rolling(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[float]:
        """``log p(text)`` per ``(text,)`` request, with ``EOS`` as the first context."""
        if not requests:
            return []
        pieces = [self.rolling_rows(request.args[0]) for request in requests]
        owner = np.repeat(np.arange(len(requests)), [len(p[0]) for p in pieces])
        totals = np.zeros(len(requests), dtype=np.float64)
        if len(owner):
            inputs = torch.from_numpy(np.concatenate([p[0] for p in pieces]))
            labels = torch.from_numpy(np.concatenate([p[1] for p in pieces]))
            nll, _ = self.score_rows(inputs, labels)
            np.add.at(totals, owner, -np.asarray(nll, dtype=np.float64))
        answers = [float(total) for total in totals]
        for request, answer in zip(requests, answers, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, answer)
        return answers

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Not supported: raises :class:`pipeline.ConfigError`."""
        raise ConfigError(GENERATION_REFUSED)


@dataclass(frozen=True)
class TaskItemScore:
    """One task item's metrics (``item``: lm-eval's ``doc_id``)."""

    task: str
    item: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class TaskScores:
    """Result of :func:`run_tasks`."""

    metrics: dict[str, dict[str, float]]
    """Task (or group) name -> metric -> value, as lm-eval aggregates them."""
    items: list[TaskItemScore] = field(default_factory=list)
    """Every item of every task, by task then item."""
    higher_is_better: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Task -> metric -> whether a higher value is better (lm-eval's own flags)."""

    def to_records(self, step: int) -> list[dict[str, Any]]:
        """The ``zephon/tasks.jsonl`` lines of this evaluation (module docstring)."""
        return [
            {"step": step, "task": s.task, "item": s.item, "metrics": dict(s.metrics)}
            for s in self.items
        ]


def run_tasks(
    lm: ZephonLM, tasks: list[str], task_dir: Path | None, *, limit: int | None = None
) -> TaskScores:
    """Run lm-eval ``tasks`` on ``lm`` offline and collect task and per-item metrics.

    Task names are looked up in ``task_dir`` (lm-eval YAML files) first, then among
    lm-eval's built-in tasks. ``limit``: at most that many items per task (for tests).
    Global RNGs are left alone (few-shot sampling uses lm-eval's own seeded RNG), and
    no bootstrap standard errors are computed.

    Raises:
        ConfigError: a task is unknown, generative, or its dataset is not available
            offline.
    """
    if not tasks:
        raise ConfigError("no tasks to run: name at least one lm-eval task")
    manager = task_manager(tasks, task_dir)
    try:
        with _hub_offline(), _local_rank_zero():
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=list(tasks),
                task_manager=manager,
                limit=limit,
                log_samples=True,
                bootstrap_iters=0,
                random_seed=None,
                numpy_random_seed=None,
                torch_random_seed=None,
            )
    except (ConnectionError, FileNotFoundError) as e:
        raise ConfigError(
            f"cannot load the data of task(s) {', '.join(tasks)} offline: {e}; give the "
            "task local data files (dataset_path: json, dataset_kwargs: {data_files: ...}) "
            f"in its YAML in the task folder (eval.task_dir{folder_hint(task_dir)})"
        ) from e
    assert results is not None, "lm_eval.simple_evaluate returned nothing on rank 0"
    metrics = {
        name: _numeric_metrics(values)
        for name, values in {**results["results"], **results.get("groups", {})}.items()
    }
    items: list[TaskItemScore] = []
    for task, samples in results.get("samples", {}).items():
        per_item: dict[int, dict[str, float]] = {}
        for sample in samples:
            item_metrics = per_item.setdefault(int(sample["doc_id"]), {})
            item_metrics.update(_sample_metrics(sample))
        items += [TaskItemScore(task, item, per_item[item]) for item in sorted(per_item)]
    directions = {
        task: {_metric_name(m): bool(v) for m, v in flags.items() if v is not None}
        for task, flags in (results.get("higher_is_better") or {}).items()
    }
    return TaskScores(metrics=metrics, items=items, higher_is_better=directions)


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Switch the Hugging Face hub off (``HF_HUB_OFFLINE``) for ``datasets`` and the hub client.

    Both libraries read the environment variables once, at import; their module flags
    are what they consult on each request, so those are set for the call and restored.
    """
    import datasets.config
    import huggingface_hub.constants

    saved = (
        datasets.config.HF_HUB_OFFLINE,
        datasets.config.HF_DATASETS_OFFLINE,
        huggingface_hub.constants.HF_HUB_OFFLINE,
    )
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        (
            datasets.config.HF_HUB_OFFLINE,
            datasets.config.HF_DATASETS_OFFLINE,
            huggingface_hub.constants.HF_HUB_OFFLINE,
        ) = saved


@contextlib.contextmanager
def _local_rank_zero() -> Iterator[None]:
    """Make ``simple_evaluate`` return results on every rank.

    lm-eval 0.4.13 returns ``None`` where ``LOCAL_RANK`` (set by torchrun) is not 0, even
    for a model whose ``rank`` is 0; here every rank computes the same results.
    """
    saved = os.environ.get("LOCAL_RANK")
    if saved is not None:
        os.environ["LOCAL_RANK"] = "0"
    try:
        yield
    finally:
        if saved is not None:
            os.environ["LOCAL_RANK"] = saved


def _metric_name(key: str) -> str:
    """``acc,none`` -> ``acc``; ``acc,strict`` stays."""
    metric, _, filter_key = key.partition(",")
    return metric if filter_key in ("", "none") else key


def _numeric_metrics(values: dict[str, Any]) -> dict[str, float]:
    """lm-eval's task result entry -> ``{metric: float}`` (no alias, sample count, ``N/A``)."""
    return {
        _metric_name(key): float(value)
        for key, value in values.items()
        if isinstance(value, (int, float)) and key != "sample_len"
    }


def _sample_metrics(sample: dict[str, Any]) -> dict[str, float]:
    """One logged lm-eval sample -> ``{metric: float}`` (module docstring)."""
    suffix = "" if sample.get("filter", "none") == "none" else f",{sample['filter']}"
    out: dict[str, float] = {}
    for metric in sample["metrics"]:
        value = sample[metric]
        if isinstance(value, (bool, int, float)):
            out[metric + suffix] = float(value)
        elif isinstance(value, (tuple, list)) and len(value) == 2 and metric in _PAIR_WEIGHTS:
            loglikelihood, weight = float(value[0]), float(value[1])
            aggregate = get_metric_aggregation(metric)
            if aggregate is not None and weight > 0:
                out[metric + suffix] = float(aggregate([(loglikelihood, weight)]))
            out["loglikelihood" + suffix] = loglikelihood
            out[_PAIR_WEIGHTS[metric] + suffix] = weight
    return out
