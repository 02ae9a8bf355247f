"""``HeldOutEvaluator``: bits per byte on each dataset's held-out records, inside TorchTitan.

The held-out records are the plan's (``WorkSource.heldout_records``, set by
``--dataloader.holdout-bytes``): chosen by dataset name alone, never trained
on, the same for every seed, mixture and dp size of a data contract. So every
variant of a sweep is scored on the same text.

Algorithm, per evaluation::

    for each dataset d, each held-out document x (tokens t = encode(x) + [EOS]):
        windows of T+1 tokens overlapping by one: inputs t[i:i+T], labels t[i+1:i+T+1]
    rows of all datasets, in order, are dealt round-robin to the dp ranks
    (padded with empty rows so every rank runs the same number of forwards and loss calls:
    FSDP needs it)
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

from orchestrator.runfolder import EVAL_FILE
from pipeline import ConfigError, Tokenizer, WorkSource


@dataclass
class _HeldOutRows:
    """All held-out windows: ``inputs``/``labels`` ``[rows, T]``, the dataset of each row."""

    inputs: torch.Tensor
    labels: torch.Tensor
    dataset: torch.Tensor
    names: list[str]
    bytes: list[int]


class HeldOutEvaluator(Validator):
    """TorchTitan validator computing held-out bits per byte per dataset (module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """``--validator.enable`` and ``--validator.freq`` (steps between evaluations)."""

    def __init__(self, config: Config, **kwargs: Any) -> None:
        BaseValidator.__init__(self, config)
        # Validator's own __init__ would prepare TorchTitan's stock validation loader.
        self.parallelism = kwargs["parallelism"]
        self.parallel_dims = kwargs["parallel_dims"]
        self.dp_world_size = kwargs["dp_world_size"]
        self.dp_rank = kwargs["dp_rank"]
        self.seq_len = kwargs["seq_len"]
        self.local_batch_size = kwargs["local_batch_size"]
        self.validation_context = kwargs["validation_context"]
        self.loss_fn = kwargs["loss_fn"]
        if self.parallel_dims.pp_enabled or self.parallel_dims.cp_enabled:
            raise ConfigError(
                "the held-out evaluator supports data parallelism (FSDP/DDP) and tensor "
                "parallelism only; disable --validator.enable with pipeline or context parallelism"
            )
        self._rows: _HeldOutRows | None = None
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
                "--validator.enable needs held-out data: set --dataloader.holdout-bytes > 0"
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
        nll = torch.zeros(len(rows.names), dtype=torch.float64, device=device)
        tokens = torch.zeros(len(rows.names), dtype=torch.int64, device=device)
        m = self.local_batch_size
        mine = torch.arange(self.dp_rank, len(rows.inputs), self.dp_world_size)
        forwards = math.ceil(len(rows.inputs) / (self.dp_world_size * m))
        positions = torch.arange(self.seq_len).expand(m, -1)
        for b in range(forwards):
            take = mine[b * m : (b + 1) * m]
            inputs = torch.zeros(m, self.seq_len, dtype=torch.int64)
            labels = torch.full((m, self.seq_len), IGNORE_INDEX, dtype=torch.int64)
            inputs[: len(take)] = rows.inputs[take]
            labels[: len(take)] = rows.labels[take]
            batch = {"input": inputs.to(device), "positions": positions.to(device)}
            inputs_, labels_, extra = self.post_dataloading_process(
                batch, labels.to(device), model_parts
            )
            with self.validation_context():
                predictions = model(inputs_, **extra)
                # TorchTitan's loss (reduction "sum"; it applies the output layer itself when
                # the loss is chunked), one row at a time to attribute each row to its dataset.
                # Padding rows too: a chunked loss unshards the output layer (a collective),
                # so every rank must make the same number of calls.
                for i in range(m):
                    loss_sum, _ = self.loss_fn(predictions[i : i + 1], labels_[i : i + 1])
                    if i < len(take):
                        d = int(rows.dataset[take[i]])
                        nll[d] += float(loss_sum)
                        tokens[d] += int((labels[i] != IGNORE_INDEX).sum())
        if group is not None or self.dp_world_size > 1:
            dist.all_reduce(nll, group=group)
            dist.all_reduce(tokens, group=group)
        model.train()
        bpb = {
            name: float(nll[d]) / math.log(2) / rows.bytes[d] for d, name in enumerate(rows.names)
        }
        aggregate = sum(bpb.values()) / len(bpb)
        if self._is_rank0:
            record = {
                "step": step,
                "bpb": bpb,
                "aggregate_bpb": aggregate,
                "tokens": {name: int(tokens[d]) for d, name in enumerate(rows.names)},
                "bytes": dict(zip(rows.names, rows.bytes, strict=True)),
            }
            with (run_dir / EVAL_FILE).open("a") as f:
                f.write(json.dumps(record) + "\n")
            scores = {f"eval/{name}_bpb": v for name, v in bpb.items()}
            metrics.log({**scores, "eval/aggregate_bpb": aggregate}, step)

    def _held_out_rows(self) -> _HeldOutRows:
        """Tokenize the held-out documents once and cut them into windows (module docstring)."""
        if self._rows is not None:
            return self._rows
        assert self._attached is not None
        source, tokenizer, *_ = self._attached
        window = self.seq_len + 1
        inputs, labels, datasets, sizes = [], [], [], []
        for d, ds in enumerate(source.datasets):
            texts = ds.read_texts(source.heldout_records(d))
            sizes.append(sum(len(t.encode()) for t in texts))
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
                    datasets.append(d)
        self._rows = _HeldOutRows(
            inputs=torch.from_numpy(np.stack(inputs)),
            labels=torch.from_numpy(np.stack(labels)),
            dataset=torch.tensor(datasets),
            names=[ds.name for ds in source.datasets],
            bytes=sizes,
        )
        return self._rows
