"""``HeldOutEvaluator``: bits per byte on each dataset's held-out documents, inside TorchTitan.

The held-out documents are the plan's (``WorkSource.heldout_documents``: ``holdout_docs``
records per dataset chosen by dataset name alone, never trained on, cut so that
their text is at most ``holdout_bytes`` per dataset). They are the same for every
seed, mixture and dp size of a data contract, so every variant of a sweep is scored
on the same text, document by document.

Algorithm, per evaluation::

    for each dataset d, each held-out document x (tokens t = [EOS] + encode(x)):
        windows of T+1 tokens overlapping by one: inputs t[i:i+T], labels t[i+1:i+T+1]
        (EOS is the context of the first token, as after a document boundary in training;
        every label is a token of x, so the bits below cover exactly x's bytes)
    all rows are dealt round-robin to the dp ranks, padded with empty rows to
    ceil(rows / dp) per rank (every rank makes the same forward calls: FSDP needs it),
    and run rows_per_forward at a time; for each row, from the logits:
    nll[row] = sum over its labels of -ln p(label)           (all-reduced over the dp group)
    bits[x]  = sum over x's rows of nll / ln 2,  bytes[x] = utf8_bytes(x)
    bpb[d]   = sum over d's documents of bits / sum of bytes
    aggregate = mean over datasets of bpb[d]

It runs when ``step % freq == 0`` and at the last step. Global rank 0 appends
``{"step", "bpb": {d: ...}, "aggregate_bpb", "tokens": {d: ...}, "bytes": {d: ...},
"seconds", "documents": {d: {"bits": [...], "bytes": [...]}}}`` to
``<dump_folder>/zephon/eval.jsonl`` (the per-document scores let two variants be
compared document by document: :mod:`orchestrator.guard.decisions`) and sends
``eval/<d>_bpb``, ``eval/aggregate_bpb`` and ``eval/seconds`` to TorchTitan's metric
loggers.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torchtitan.components.loss import IGNORE_INDEX, compute_logprobs
from torchtitan.components.metrics import BaseLogger
from torchtitan.components.validate import BaseValidator, Validator
from torchtitan.tools import utils

from orchestrator.experiment.runfolder import EVAL_FILE
from pipeline import ConfigError, Tokenizer, WorkSource


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


class HeldOutEvaluator(Validator):
    """TorchTitan validator computing held-out bits per byte per dataset (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """``--validator.enable``, ``--validator.freq`` (steps between evaluations) and:"""

        rows_per_forward: int = 8
        """Held-out rows per forward pass on each rank (speed and memory only: the logits of
        a forward, rows x seq_len x vocabulary floats, are held at once)."""

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
        self._rows: list[_HeldOutRows] | None = None
        self._attached: tuple[WorkSource, Tokenizer, BaseLogger, Path, int, Any] | None = None

    def attach(
        self,
        source: WorkSource,
        tokenizer: Tokenizer,
        metrics: BaseLogger,
        run_dir: Path,
        last_step: int,
        group: Any,
        is_rank0: bool,
    ) -> None:
        """Connect to the data plan, the metric loggers and the run folder (done by the trainer)."""
        if source.holdout_bytes == 0:
            raise ConfigError(
                "--validator.enable needs held-out data: set holdout_bytes > 0 in the data spec"
            )
        self._attached = (source, tokenizer, metrics, run_dir, last_step, group)
        self._is_rank0 = is_rank0

    def should_validate(self, step: int) -> bool:
        assert self._attached is not None, "HeldOutEvaluator.attach() was not called"
        return step % self.config.freq == 0 or step == self._attached[4]

    @torch.no_grad()
    def validate(self, model_parts: list[torch.nn.Module], step: int) -> None:
        assert self._attached is not None, "HeldOutEvaluator.attach() was not called"
        _, _, metrics, run_dir, _, group = self._attached
        started = time.perf_counter()
        rows = self._held_out_rows()
        model = model_parts[0]
        model.eval()
        device = utils.device_type
        nll = torch.zeros(len(rows.inputs), dtype=torch.float64, device=device)
        mine, inputs, labels = self._rank_rows(rows)
        n = self.config.rows_per_forward
        for start in range(0, len(inputs), n):
            batch_inputs, batch_labels = inputs[start : start + n], labels[start : start + n]
            positions = torch.arange(self.seq_len).expand(len(batch_inputs), -1)
            batch = {"input": batch_inputs.to(device), "positions": positions.to(device)}
            inputs_, labels_, extra = self.post_dataloading_process(
                batch, batch_labels.to(device), model_parts
            )
            with self.validation_context():
                out = model(inputs_, **extra)
                if getattr(model, "_skip_lm_head", False):
                    out = model.lm_head(out)  # hidden states: TorchTitan's chunked loss applies it
                row_nll = -compute_logprobs(out, labels_).double().sum(dim=1)
            batch_rows = mine[start : start + n]
            real = batch_rows >= 0  # padding rows are -1
            nll[batch_rows[real]] = row_nll[real.to(row_nll.device)]
        if group is not None or self.dp_world_size > 1:
            dist.all_reduce(nll, group=group)
        model.train()
        self._record(rows, nll.cpu().numpy(), step, time.perf_counter() - started, metrics, run_dir)

    def _record(
        self,
        rows: _HeldOutRows,
        nll: np.ndarray,
        step: int,
        seconds: float,
        metrics: BaseLogger,
        run_dir: Path,
    ) -> None:
        """Per-document bits, per-dataset bits per byte (module docstring), written by rank 0."""
        if not self._is_rank0:
            return
        bits = np.zeros(len(rows.document_bytes))
        np.add.at(bits, rows.row_document, nll / math.log(2))
        tokens = np.zeros(len(rows.document_bytes), dtype=np.int64)
        np.add.at(tokens, rows.row_document, (rows.labels != IGNORE_INDEX).sum(dim=1).numpy())
        documents, bpb, counted = {}, {}, {}
        for d, name in enumerate(rows.names):
            of_d = rows.document_dataset == d
            documents[name] = {
                "bits": [float(b) for b in bits[of_d]],
                "bytes": [int(b) for b in rows.document_bytes[of_d]],
            }
            bpb[name] = float(bits[of_d].sum()) / max(1, int(rows.document_bytes[of_d].sum()))
            counted[name] = int(tokens[of_d].sum())
        aggregate = sum(bpb.values()) / len(bpb)
        record = {
            "step": step,
            "bpb": bpb,
            "aggregate_bpb": aggregate,
            "tokens": counted,
            "bytes": {name: sum(documents[name]["bytes"]) for name in rows.names},
            "seconds": round(seconds, 3),
            "documents": documents,
        }
        with (run_dir / EVAL_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")
        scores = {f"eval/{name}_bpb": v for name, v in bpb.items()}
        metrics.log({**scores, "eval/aggregate_bpb": aggregate, "eval/seconds": seconds}, step)

    def _rank_rows(self, rows: _HeldOutRows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's row indexes (-1: padding), inputs and labels, padded to ceil(rows / dp)."""
        per_rank = math.ceil(len(rows.inputs) / self.dp_world_size)
        index = torch.full((per_rank,), -1, dtype=torch.int64)
        inputs = torch.zeros(per_rank, self.seq_len, dtype=torch.int64)
        labels = torch.full((per_rank, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        mine = torch.arange(self.dp_rank, len(rows.inputs), self.dp_world_size)
        index[: len(mine)] = mine
        inputs[: len(mine)] = rows.inputs[mine]
        labels[: len(mine)] = rows.labels[mine]
        return index, inputs, labels

    def _held_out_rows(self) -> _HeldOutRows:
        """Tokenize the held-out documents once and cut them into windows (module docstring)."""
        if self._rows is not None:
            return self._rows
        assert self._attached is not None
        source, tokenizer, *_ = self._attached
        window = self.seq_len + 1
        inputs, labels, row_document, document_dataset, document_bytes = [], [], [], [], []
        for d, _ in enumerate(source.datasets):
            texts = source.heldout_documents(d)
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
            names=[ds.name for ds in source.datasets],
            inputs=torch.from_numpy(np.stack(inputs)),
            labels=torch.from_numpy(np.stack(labels)),
            row_document=np.array(row_document, dtype=np.int64),
            document_dataset=np.array(document_dataset, dtype=np.int64),
            document_bytes=np.array(document_bytes, dtype=np.int64),
        )
        return self._rows
