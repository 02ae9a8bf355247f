"""``HeldOutEvaluator``: every held-out metric (:data:`~orchestrator.evaluation.metrics.METRICS`:
bits per byte, next-token accuracy) on each dataset's held-out documents, inside TorchTitan,
and the downstream tasks of ``eval.tasks`` (:mod:`orchestrator.evaluation.lm_eval_adapter`).

Rank 0 appends each evaluation to ``<dump_folder>/zephon/eval.jsonl`` as an
:class:`~orchestrator.evaluation.record.EvalRecord` (per-document values, so variants are
compared document by document) and the tasks' items to ``tasks.jsonl``. The initial
model's evaluation is reused from an earlier run that scored the same
(:mod:`orchestrator.evaluation.step_zero_cache`).

Design: docs/design/orchestrator_evaluation.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.metrics import BaseLogger
from torchtitan.components.validate import BaseValidator, Validator
from torchtitan.tools import utils

from orchestrator import failpoints
from orchestrator.evaluation.metrics import METRICS, DocumentWeight, HeldOutMetric
from orchestrator.evaluation.record import DocumentScores, EvalRecord, EvalSource, MetricScores
from orchestrator.evaluation.row_scores import RowScores, score_output
from orchestrator.evaluation.step_zero_cache import (
    InitialModel,
    InitialScoring,
    StepZeroCache,
    parallel_layout,
    rows_fingerprint,
    scoring_code,
)
from orchestrator.experiment.runfolder import EVAL_FILE, TASKS_FILE, read_jsonl, write_jsonl
from orchestrator.failpoints import Failpoint
from pipeline import ConfigError, Tokenizer, WorkSource

if TYPE_CHECKING:
    from orchestrator.evaluation.lm_eval_adapter import TaskScores


@dataclass
class _HeldOutRows:
    """Every dataset's held-out windows: ``inputs``/``labels`` ``[rows, T]``, and whose they are."""

    names: list[str]
    """Dataset names, in plan order."""
    inputs: torch.Tensor
    labels: torch.Tensor
    row_document: np.ndarray
    """Row -> index of its document in ``document_bytes`` (all datasets, in order)."""
    document_dataset: np.ndarray
    """Document -> index of its dataset in ``names``."""
    document_bytes: np.ndarray
    """UTF-8 bytes of each held-out document."""


@dataclass(frozen=True)
class _Attachment:
    """What the trainer connects the evaluator to (:meth:`HeldOutEvaluator.attach`)."""

    source: WorkSource
    tokenizer: Tokenizer
    metrics: BaseLogger
    run_dir: Path
    last_step: int
    group: Any
    """The dp process group (None: the default group)."""
    is_rank0: bool
    initial: InitialModel | None
    """The initial model, where its digest is known: its evaluation may be reused."""


class HeldOutEvaluator(Validator):
    """TorchTitan validator computing held-out bits per byte per dataset (design doc)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """``--validator.enable``, ``--validator.freq`` (steps between evaluations) and:"""

        initial: bool = False
        """Score the initial model (step 0) before the first training step."""
        rows_per_forward: int = 8
        """Held-out rows per forward pass on each rank (speed and memory only: the logits of
        a forward, rows x seq_len x vocabulary floats, are held at once)."""
        tasks: list[str] = field(default_factory=list)
        """lm-evaluation-harness tasks scored at the last evaluation (docs/tasks.md)."""
        task_dir: str = ""
        """Folder of local task YAMLs (lm-eval's ``include_path``); empty: none."""
        tasks_at_every_eval: bool = False
        """Score the tasks at every evaluation, not only at the last step."""
        task_limit: int = 0
        """Items per task at most; 0: every item."""
        initial_digest: str = ""
        """sha256 of the initial checkpoint's files (Zephon's launches give it): the
        initial model's evaluation is then reused from a run that scored the same
        (:mod:`~orchestrator.evaluation.step_zero_cache`); empty: always computed."""

    def __init__(self, config: Config, **kwargs: Any) -> None:
        BaseValidator.__init__(self, config)
        # Validator's own __init__ would prepare TorchTitan's stock validation loader.
        self.parallelism = kwargs["parallelism"]
        self.parallel_dims = kwargs["parallel_dims"]
        self.dp_world_size = kwargs["dp_world_size"]
        self.dp_rank = kwargs["dp_rank"]
        self.seq_len = kwargs["seq_len"]
        self.validation_context = kwargs["validation_context"]
        if self.parallel_dims.pp_enabled or self.parallel_dims.cp_enabled:
            raise ConfigError(
                "the held-out evaluator supports data parallelism (FSDP/DDP) and tensor "
                "parallelism only; disable --validator.enable with pipeline or context parallelism"
            )
        if config.rows_per_forward < 1:
            raise ConfigError(
                f"--validator.rows-per-forward must be >= 1, got {config.rows_per_forward}"
            )
        self._rows: _HeldOutRows | None = None
        self._attached: _Attachment | None = None

    def attach(
        self,
        source: WorkSource,
        *,
        tokenizer: Tokenizer,
        metrics: BaseLogger,
        run_dir: Path,
        last_step: int,
        group: Any,
        is_rank0: bool,
        initial: InitialModel | None = None,
    ) -> None:
        """Connect to the data plan, the metric loggers and the run folder (done by the
        trainer); ``initial``: the initial model, whose evaluation may then be reused."""
        if source.holdout_bytes == 0:
            raise ConfigError(
                "--validator.enable needs held-out data: set holdout_bytes > 0 in the data spec"
            )
        self._attached = _Attachment(
            source, tokenizer, metrics, run_dir, last_step, group, is_rank0, initial
        )

    @property
    def attachment(self) -> _Attachment:
        """What :meth:`attach` connected; AssertionError before it was called."""
        assert self._attached is not None, "HeldOutEvaluator.attach() was not called"
        return self._attached

    def should_validate(self, step: int) -> bool:
        return step % self.config.freq == 0 or step == self.attachment.last_step

    def resume_at(self, model_parts: list[torch.nn.Module], step: int) -> None:
        """Before the first step a launch trains, its model loaded at ``step``: forget the
        evals recorded after ``step`` (this launch scores them again), then score ``step``
        if it is due and not recorded: the initial model (``initial``; reused where an
        earlier run scored the same), or the eval of the checkpoint's step that a kill
        stopped. Rank 0 reads and rewrites the files (the other nodes may not share them)
        and looks the initial scores up; every rank gets its answer."""
        attached = self.attachment
        due = self.config.initial if step == 0 else self.should_validate(step)
        missing = False
        if attached.is_rank0:
            for path in (attached.run_dir / EVAL_FILE, attached.run_dir / TASKS_FILE):
                if path.exists():
                    write_jsonl(path, [r for r in read_jsonl(path) if r["step"] <= step])
            recorded = {r["step"] for r in read_jsonl(attached.run_dir / EVAL_FILE)}
            missing = due and step not in recorded
            if missing and step == 0:
                missing = not self._reused_initial()
        if dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([int(missing)], device=utils.device_type)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            missing = bool(flag.item())
        if missing:
            self.validate(model_parts, step)

    @torch.no_grad()
    def validate(self, model_parts: list[torch.nn.Module], step: int) -> None:
        started = time.perf_counter()
        rows = self._held_out_rows()
        model_parts[0].eval()
        scores = self._score_all(model_parts, rows.inputs, rows.labels, with_greedy=False)
        tasks = self._score_tasks(model_parts, step)
        model_parts[0].train()
        failpoints.reach(Failpoint.EVAL, step)
        if not self.attachment.is_rank0:
            return
        record = self._record(
            rows, scores, step=step, seconds=time.perf_counter() - started, tasks=tasks
        )
        scoring = self._initial_scoring() if step == 0 else None
        if scoring is not None:
            StepZeroCache().store(scoring.key, record)

    def _initial_scoring(self) -> InitialScoring | None:
        """What decides the initial model's scores (the cache key), or None when they cannot
        be reused: no initial digest, or tasks due at step 0 (lm-eval's task data is not
        fingerprinted)."""
        attached, config = self.attachment, self.config
        if attached.initial is None or (config.tasks and self._tasks_due(0)):
            return None
        rows = self._held_out_rows()
        arrays = [rows.inputs.numpy(), rows.labels.numpy()]
        arrays += [rows.row_document, rows.document_dataset, rows.document_bytes]
        return InitialScoring(
            model=attached.initial,
            eval_set=rows_fingerprint(rows.names, arrays),
            rows_per_forward=config.rows_per_forward,
            metrics=tuple(metric.name for metric in METRICS),
            device=utils.device_type,
            layout=parallel_layout(
                device=utils.device_type,
                precision=attached.initial.precision,
                dp=self.dp_world_size,
                tp=self.parallel_dims.tp,
            ),
            code=scoring_code(),
        )

    def _reused_initial(self) -> bool:
        """Rank 0: record the initial model's evaluation from the cache, as a computed one
        is recorded (eval.jsonl, the metric loggers), marked reused; False on a miss."""
        started = time.perf_counter()
        scoring = self._initial_scoring()
        found = None if scoring is None else StepZeroCache().load(scoring.key)
        if found is None:
            return False
        failpoints.reach(Failpoint.EVAL, 0)
        seconds = time.perf_counter() - started
        self._write(dataclasses.replace(found, seconds=seconds, made=EvalSource.REUSED))
        return True

    def _score_tasks(self, model_parts: list[torch.nn.Module], step: int) -> TaskScores | None:
        """The downstream tasks' scores at ``step``, or None when none are due."""
        config = self.config
        if not config.tasks or not self._tasks_due(step):
            return None
        # deferred: lm-eval takes ~2 s to import, which only runs with tasks pay
        from orchestrator.evaluation.lm_eval_adapter import ZephonLM, run_tasks

        lm = ZephonLM(
            self.attachment.tokenizer, self.seq_len, functools.partial(self.score_rows, model_parts)
        )
        task_dir = Path(config.task_dir) if config.task_dir else None
        return run_tasks(lm, list(config.tasks), task_dir, limit=config.task_limit or None)

    def _tasks_due(self, step: int) -> bool:
        return self.config.tasks_at_every_eval or step == self.attachment.last_step

    def score_rows(
        self,
        model_parts: list[torch.nn.Module],
        inputs: torch.Tensor,
        labels: torch.Tensor,
        *,
        with_greedy: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every row's negative log-likelihood (nats, summed over its labels) and whether each
        of its labels is the model's argmax (all False unless ``with_greedy``): a
        :class:`~orchestrator.evaluation.lm_eval_adapter.RowScorer` once ``model_parts`` is
        bound. Every rank must call it with the same rows (:meth:`_score_all`)."""
        scores = self._score_all(model_parts, inputs, labels, with_greedy=with_greedy, metrics=())
        assert scores.greedy is not None
        return scores.nll, scores.greedy

    def _score_all(
        self,
        model_parts: list[torch.nn.Module],
        inputs: torch.Tensor,
        labels: torch.Tensor,
        *,
        with_greedy: bool,
        metrics: Sequence[HeldOutMetric] = METRICS,
    ) -> RowScores:
        """Every row's scores (:func:`~orchestrator.evaluation.row_scores.score_output`, the
        held-out ``metrics`` included): rows dealt round-robin to the dp ranks, padded so
        every rank makes the same forward calls (FSDP needs it), results all-reduced."""
        model = model_parts[0]
        device = utils.device_type
        # One row per score: nll, greedy, then each metric's sum.
        scores = np.zeros((2 + len(metrics), len(inputs)), dtype=np.float64)
        mine, rank_inputs, rank_labels = self._rank_rows(inputs, labels)
        n = self.config.rows_per_forward
        for start in range(0, len(rank_inputs), n):
            batch_inputs = rank_inputs[start : start + n]
            batch_labels = rank_labels[start : start + n]
            positions = torch.arange(self.seq_len).expand(len(batch_inputs), -1)
            batch = {"input": batch_inputs.to(device), "positions": positions.to(device)}
            inputs_, labels_, extra = self.post_dataloading_process(
                batch, batch_labels.to(device), model_parts
            )
            with self.validation_context():
                row_scores = score_output(
                    model,
                    model(inputs_, **extra),
                    labels_,
                    with_greedy=with_greedy,
                    metrics=metrics,
                )
            batch_rows = mine[start : start + n].numpy()
            real = batch_rows >= 0  # padding rows are -1
            scores[0, batch_rows[real]] = row_scores.nll[real]
            if row_scores.greedy is not None:
                scores[1, batch_rows[real]] = row_scores.greedy[real]
            for m, metric in enumerate(metrics):
                scores[2 + m, batch_rows[real]] = row_scores.metric_sums[metric.name][real]
        group = self._attached.group if self._attached is not None else None
        if group is not None or self.dp_world_size > 1:
            reduced = torch.from_numpy(scores).to(device)
            dist.all_reduce(reduced, group=group)
            scores = reduced.cpu().numpy()
        return RowScores(
            nll=scores[0],
            greedy=scores[1] > 0.5 if with_greedy else None,
            metric_sums={metric.name: scores[2 + m] for m, metric in enumerate(metrics)},
        )

    def _record(
        self,
        rows: _HeldOutRows,
        scores: RowScores,
        *,
        step: int,
        seconds: float,
        tasks: TaskScores | None,
    ) -> EvalRecord:
        """Record the evaluation (rank 0): its :class:`EvalRecord` (:meth:`_write`), the
        tasks' items to ``tasks.jsonl``."""
        run_dir = self.attachment.run_dir
        documents = len(rows.document_bytes)
        tokens = np.zeros(documents, dtype=np.int64)
        np.add.at(tokens, rows.row_document, (rows.labels != IGNORE_INDEX).sum(dim=1).numpy())
        weights = {DocumentWeight.BYTES: rows.document_bytes, DocumentWeight.TOKENS: tokens}
        by_metric = {}
        for metric in METRICS:
            values = np.zeros(documents)
            np.add.at(values, rows.row_document, scores.metric_sums[metric.name])
            by_metric[metric.name] = MetricScores.of_documents(
                {
                    name: DocumentScores(
                        [float(v) for v in values[rows.document_dataset == d]],
                        [float(w) for w in weights[metric.per][rows.document_dataset == d]],
                    )
                    for d, name in enumerate(rows.names)
                }
            )
        record = EvalRecord(
            step=step,
            metrics=by_metric,
            tokens={
                n: int(tokens[rows.document_dataset == d].sum()) for d, n in enumerate(rows.names)
            },
            bytes={
                n: int(rows.document_bytes[rows.document_dataset == d].sum())
                for d, n in enumerate(rows.names)
            },
            seconds=seconds,
            tasks={} if tasks is None else tasks.metrics,
            higher_is_better={} if tasks is None else tasks.higher_is_better,
        )
        if tasks is not None:
            with (run_dir / TASKS_FILE).open("a") as f:
                f.writelines(json.dumps(line) + "\n" for line in tasks.to_records(step))
        self._write(record)
        return record

    def _write(self, record: EvalRecord) -> None:
        """Append ``record`` to ``eval.jsonl`` and send each domain's score per metric, and
        the seconds, to the metric loggers (rank 0)."""
        with (self.attachment.run_dir / EVAL_FILE).open("a") as f:
            f.write(json.dumps(record.to_json()) + "\n")
        logged: dict[str, float] = {"eval/seconds": record.seconds or 0.0}
        for name, metric_scores in record.metrics.items():
            logged.update({f"eval/{d}_{name}": v for d, v in metric_scores.scores.items()})
            if metric_scores.aggregate is not None:
                logged[f"eval/aggregate_{name}"] = metric_scores.aggregate
        self.attachment.metrics.log(logged, record.step)

    def _rank_rows(
        self, all_inputs: torch.Tensor, all_labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's row indexes (-1: padding), inputs and labels, padded to ceil(rows / dp)."""
        per_rank = math.ceil(len(all_inputs) / self.dp_world_size)
        index = torch.full((per_rank,), -1, dtype=torch.int64)
        inputs = torch.zeros(per_rank, self.seq_len, dtype=torch.int64)
        labels = torch.full((per_rank, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        mine = torch.arange(self.dp_rank, len(all_inputs), self.dp_world_size)
        index[: len(mine)] = mine
        inputs[: len(mine)] = all_inputs[mine]
        labels[: len(mine)] = all_labels[mine]
        return index, inputs, labels

    def _held_out_rows(self) -> _HeldOutRows:
        """Tokenize the held-out documents once and cut them into windows (design doc)."""
        if self._rows is not None:
            return self._rows
        source, tokenizer = self.attachment.source, self.attachment.tokenizer
        window = self.seq_len + 1
        inputs, labels, row_document, document_dataset, document_bytes = [], [], [], [], []
        scored = source.scored_documents()
        for d, (_, texts) in enumerate(scored):
            for text, ids in zip(texts, tokenizer.encode_arrays(texts), strict=True):
                doc = np.concatenate([[tokenizer.eos_id], ids.astype(np.int64)])
                for start in range(0, len(doc) - 1, self.seq_len):
                    piece = doc[start : start + window]
                    row_in = np.zeros(self.seq_len, dtype=np.int64)
                    row_out = np.full(self.seq_len, IGNORE_INDEX, dtype=np.int64)
                    row_in[: len(piece) - 1] = piece[:-1]
                    row_out[: len(piece) - 1] = piece[1:]
                    inputs.append(row_in)
                    labels.append(row_out)
                    row_document.append(len(document_bytes))
                document_dataset.append(d)
                document_bytes.append(len(text.encode()))
        self._rows = _HeldOutRows(
            names=[name for name, _ in scored],
            inputs=torch.from_numpy(np.stack(inputs)),
            labels=torch.from_numpy(np.stack(labels)),
            row_document=np.array(row_document, dtype=np.int64),
            document_dataset=np.array(document_dataset, dtype=np.int64),
            document_bytes=np.array(document_bytes, dtype=np.int64),
        )
        return self._rows
