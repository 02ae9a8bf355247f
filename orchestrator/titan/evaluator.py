"""``HeldOutEvaluator``: bits per byte on each dataset's held-out records, inside TorchTitan.

The held-out records are the plan's (``WorkSource.heldout_records``, sized by the
data spec's ``holdout_bytes``): chosen by dataset name alone, never trained
on, the same for every seed, mixture and dp size of a data contract. So every
variant of a sweep is scored on the same text.

Algorithm, per evaluation::

    for each dataset d, each held-out document x (tokens t = encode(x) + [EOS]):
        windows of T+1 tokens overlapping by one: inputs t[i:i+T], labels t[i+1:i+T+1]
    d's rows are dealt round-robin to the dp ranks, padded with empty rows to
    ceil(rows_d / dp) per rank (so every rank makes the same forward and loss calls:
    FSDP and the chunked loss's unsharding need it), and run rows_per_forward at a time:
    one forward and one TorchTitan loss call (reduction "sum") per batch of one dataset
    nll[d]  = sum over d's labels of -ln p(label)        (all-reduced over the dp group)
    bpb[d]  = nll[d] / ln 2 / utf8_bytes(d's documents)
    aggregate = mean over datasets of bpb[d]

It runs when ``step % freq == 0`` and at the last step. Global rank 0 appends
``{"step", "bpb": {d: ...}, "aggregate_bpb", "tokens": {d: ...}, "bytes": {d: ...}}``
to ``<dump_folder>/zephon/eval.jsonl`` and sends the scores to TorchTitan's
metric loggers as ``eval/<d>_bpb`` and ``eval/aggregate_bpb``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.metrics import BaseLogger
from torchtitan.components.validate import BaseValidator, Validator
from torchtitan.tools import utils

from orchestrator.experiment.runfolder import EVAL_FILE
from pipeline import ConfigError, Tokenizer, WorkSource


@dataclass
class _HeldOutRows:
    """One dataset's held-out windows: ``inputs``/``labels`` ``[rows, T]``."""

    name: str
    inputs: torch.Tensor
    labels: torch.Tensor
    bytes: int


class HeldOutEvaluator(Validator):
    """TorchTitan validator computing held-out bits per byte per dataset (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """``--validator.enable``, ``--validator.freq`` (steps between evaluations) and:"""

        rows_per_forward: int = 16
        """Held-out rows per forward pass on each rank (speed and memory only)."""

    def __init__(self, config: Config, **kwargs: Any) -> None:
        BaseValidator.__init__(self, config)
        # Validator's own __init__ would prepare TorchTitan's stock validation loader.
        self.parallelism = kwargs["parallelism"]
        self.parallel_dims = kwargs["parallel_dims"]
        self.dp_world_size = kwargs["dp_world_size"]
        self.dp_rank = kwargs["dp_rank"]
        self.seq_len = kwargs["seq_len"]
        self.validation_context = kwargs["validation_context"]
        self.loss_fn = kwargs["loss_fn"]
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
        rows = self._held_out_rows()
        model = model_parts[0]
        model.eval()
        device = utils.device_type
        nll = torch.zeros(len(rows), dtype=torch.float64, device=device)
        tokens = torch.zeros(len(rows), dtype=torch.int64, device=device)
        for d, held_out in enumerate(rows):
            inputs, labels = self._rank_rows(held_out)
            tokens[d] = int((labels != IGNORE_INDEX).sum())
            n = self.config.rows_per_forward
            for start in range(0, len(inputs), n):
                batch_inputs, batch_labels = inputs[start : start + n], labels[start : start + n]
                positions = torch.arange(self.seq_len).expand(len(batch_inputs), -1)
                batch = {"input": batch_inputs.to(device), "positions": positions.to(device)}
                inputs_, labels_, extra = self.post_dataloading_process(
                    batch, batch_labels.to(device), model_parts
                )
                with self.validation_context():
                    # TorchTitan's loss applies the output layer itself when it is chunked.
                    loss_sum, _ = self.loss_fn(model(inputs_, **extra), labels_)
                nll[d] += float(loss_sum)
        if group is not None or self.dp_world_size > 1:
            dist.all_reduce(nll, group=group)
            dist.all_reduce(tokens, group=group)
        model.train()
        bpb = {r.name: float(nll[d]) / math.log(2) / r.bytes for d, r in enumerate(rows)}
        aggregate = sum(bpb.values()) / len(bpb)
        if self._is_rank0:
            record = {
                "step": step,
                "bpb": bpb,
                "aggregate_bpb": aggregate,
                "tokens": {r.name: int(tokens[d]) for d, r in enumerate(rows)},
                "bytes": {r.name: r.bytes for r in rows},
            }
            with (run_dir / EVAL_FILE).open("a") as f:
                f.write(json.dumps(record) + "\n")
            scores = {f"eval/{name}_bpb": v for name, v in bpb.items()}
            metrics.log({**scores, "eval/aggregate_bpb": aggregate}, step)

    def _rank_rows(self, held_out: _HeldOutRows) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of one dataset, padded to ceil(rows / dp) with empty rows."""
        per_rank = math.ceil(len(held_out.inputs) / self.dp_world_size)
        inputs = torch.zeros(per_rank, self.seq_len, dtype=torch.int64)
        labels = torch.full((per_rank, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
        mine = torch.arange(self.dp_rank, len(held_out.inputs), self.dp_world_size)
        inputs[: len(mine)] = held_out.inputs[mine]
        labels[: len(mine)] = held_out.labels[mine]
        return inputs, labels

    def _held_out_rows(self) -> list[_HeldOutRows]:
        """Tokenize the held-out documents once and cut them into windows (module docstring)."""
        if self._rows is not None:
            return self._rows
        assert self._attached is not None
        source, tokenizer, *_ = self._attached
        window = self.seq_len + 1
        self._rows = []
        for d, ds in enumerate(source.datasets):
            texts = ds.read_texts(source.heldout_records(d))
            inputs, labels = [], []
            for ids in tokenizer.encode_arrays(texts):
                doc = np.append(ids.astype(np.int64), tokenizer.eos_id)
                for start in range(0, max(1, len(doc) - 1), self.seq_len):
                    piece = doc[start : start + window]
                    row_in = np.zeros(self.seq_len, dtype=np.int64)
                    row_out = np.full(self.seq_len, IGNORE_INDEX, dtype=np.int64)
                    row_in[: len(piece) - 1] = piece[:-1]
                    row_out[: len(piece) - 1] = piece[1:]
                    inputs.append(row_in)
                    labels.append(row_out)
            self._rows.append(
                _HeldOutRows(
                    name=ds.name,
                    inputs=torch.from_numpy(np.stack(inputs)),
                    labels=torch.from_numpy(np.stack(labels)),
                    bytes=sum(len(t.encode()) for t in texts),
                )
            )
        return self._rows
