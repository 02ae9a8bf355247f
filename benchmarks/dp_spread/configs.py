"""TorchTitan configs of the dp-spread benchmark (``--module benchmarks.dp_spread.configs``).

Two configs per model, identical but for the training data loader: ``zephon_dp_spread`` and
``zephon_mini_dp_spread`` (the lane pipeline), ``stock_dp_spread`` and
``stock_mini_dp_spread`` (TorchTitan's stock loader, scored on the very same held-out text).
All record the sha256 of every row they hand to the trainer and evaluate twice at the end.

Design: docs/design/benchmarks_dp_spread.md
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

import orchestrator.titan  # noqa: F401  (cpu_compat must prepare TorchTitan before its import)

# isort: split
import torch.distributed as dist
from torchtitan.components.metrics import LoggerContainer
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.trainer import Trainer

from benchmarks.dp_spread.design import GLOBAL_BATCH, ROWS_FILE
from orchestrator.evaluation.evaluator import HeldOutEvaluator
from orchestrator.experiment import build_pipeline
from orchestrator.titan.configs import zephon_debug, zephon_mini
from orchestrator.titan.dataloader import ZephonDataLoader
from orchestrator.titan.runlog import METRICS_FILE, RUN_SUBDIR, JsonlMetricsLogger
from orchestrator.titan.trainer import ZephonTrainer
from pipeline import load_tokenizer


def _row_hashes(inputs: torch.Tensor) -> list[str]:
    """sha256 of each row (int64 token ids) of a ``[m, T]`` input batch."""
    rows = inputs.to(torch.int64).contiguous().numpy()
    return [hashlib.sha256(row.tobytes()).hexdigest() for row in rows]


def _append_row_hashes(path: Path, inputs: torch.Tensor) -> None:
    batch = hashlib.sha256(inputs.numpy().tobytes()).hexdigest()
    with path.open("a") as f:
        f.write(json.dumps({"batch": batch, "rows": _row_hashes(inputs)}) + "\n")


class RecordingStockLoader(HuggingFaceTextDataLoader):
    """TorchTitan's stock loader, unchanged; each rank writes down what it yields."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTextDataLoader.Config):
        record_dir: str = "."
        """Folder of the per-rank ``rows.dp<rank>.jsonl``."""

    def __init__(self, config: Config, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.record = Path(config.record_dir) / ROWS_FILE.format(rank=self.dp_rank)

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for inputs, labels in super().__iter__():
            _append_row_hashes(self.record, inputs["input"])
            yield inputs, labels


class RecordingZephonLoader(ZephonDataLoader):
    """The lane pipeline's loader, unchanged; each rank writes down what it yields."""

    @dataclass(kw_only=True, slots=True)
    class Config(ZephonDataLoader.Config):
        record_dir: str = "."
        """Folder of the per-rank ``rows.dp<rank>.jsonl``."""

    def __init__(self, config: Config, *, dp_rank: int, **kwargs: Any) -> None:
        super().__init__(config, dp_rank=dp_rank, **kwargs)
        self.record = Path(config.record_dir) / ROWS_FILE.format(rank=dp_rank)

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for inputs, labels in super().__iter__():
            _append_row_hashes(self.record, inputs["input"])
            yield inputs, labels


class RepeatedHeldOutEvaluator(HeldOutEvaluator):
    """``HeldOutEvaluator`` that evaluates the last step's model ``repeats_at_last_step``
    times in a row (each a full evaluation, one line of ``eval.jsonl`` each)."""

    @dataclass(kw_only=True, slots=True)
    class Config(HeldOutEvaluator.Config):
        repeats_at_last_step: int = 2
        """Evaluations of the final model (their differences are the eval's re-run noise)."""

    @torch.no_grad()
    def validate(self, model_parts: list[torch.nn.Module], step: int) -> None:
        last_step = self.attachment.last_step
        for _ in range(self.config.repeats_at_last_step if step == last_step else 1):
            super().validate(model_parts, step)


class StockHeldOutTrainer(Trainer):
    """TorchTitan's ``Trainer`` (any data loader) scored by Zephon's held-out evaluator.

    ``--heldout.*`` is a Zephon data loader config used for nothing but its ``WorkSource``
    (datasets, holdout bytes): the held-out records, never trained on by the Zephon run,
    and excluded from the stock run's JSON dataset by the benchmark.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        heldout: ZephonDataLoader.Config = field(default_factory=ZephonDataLoader.Config)
        """The Zephon data settings whose held-out records are evaluated."""

    config: Config

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        run_dir = Path(config.dump_folder) / RUN_SUBDIR
        is_rank0 = dist.get_rank() == 0
        if is_rank0:  # losses to zephon/metrics.jsonl, as ZephonTrainer does
            loggers = LoggerContainer()
            loggers.add_logger(self.metrics_processor.logger)
            loggers.add_logger(JsonlMetricsLogger(run_dir / METRICS_FILE))
            self.metrics_processor.logger = loggers
        if config.validator.enable:
            assert isinstance(self.validator, HeldOutEvaluator), "validator must be Zephon's"
            heldout = config.heldout
            source = build_pipeline(
                heldout.trainer_data(
                    tokenizer=config.tokenizer.name, seq_len=config.training.seq_len
                ),
                dp_size=1,
                dp_rank=0,
                microbatch_size=GLOBAL_BATCH,
                **heldout.pipeline_options(),
            ).source
            dims = self.parallel_dims
            self.validator.attach(
                source=source,
                tokenizer=load_tokenizer(config.tokenizer.name),
                metrics=self.metrics_processor.logger,
                run_dir=run_dir,
                last_step=config.training.steps,
                group=dims.get_mesh("batch").get_group() if dims.dp_enabled else None,
                is_rank0=is_rank0,
            )


def zephon_dp_spread() -> ZephonTrainer.Config:
    """``zephon_debug`` recording its rows (:func:`_enable_recording`)."""
    return _enable_recording(zephon_debug())


def stock_dp_spread() -> StockHeldOutTrainer.Config:
    """:func:`zephon_dp_spread` on TorchTitan's stock loader (:func:`_on_stock_loader`)."""
    return _on_stock_loader(zephon_dp_spread())


def zephon_mini_dp_spread() -> ZephonTrainer.Config:
    """``zephon_mini`` recording its rows (:func:`_enable_recording`): for smoke runs."""
    return _enable_recording(zephon_mini())


def stock_mini_dp_spread() -> StockHeldOutTrainer.Config:
    """:func:`zephon_mini_dp_spread` on TorchTitan's stock loader (:func:`_on_stock_loader`)."""
    return _on_stock_loader(zephon_mini_dp_spread())


def _enable_recording(config: ZephonTrainer.Config) -> ZephonTrainer.Config:
    """``config`` (a lane-pipeline config) recording its rows, evaluated twice at the end.

    Set ``--dataloader.spec`` (the benchmark's data spec), ``--dataloader.record-dir`` and
    ``--training.local-batch-size`` (8 / dp).
    """
    data = config.dataloader
    settings = {f.name: getattr(data, f.name) for f in fields(ZephonDataLoader.Config) if f.init}
    config.dataloader = RecordingZephonLoader.Config(**settings)
    config.training.global_batch_size = GLOBAL_BATCH  # the data spec's (the check agrees)
    config.validator = RepeatedHeldOutEvaluator.Config(freq=10**9, enable=True)
    return config


def _on_stock_loader(zephon: ZephonTrainer.Config) -> StockHeldOutTrainer.Config:
    """``zephon`` (a :func:`_enable_recording` config) on TorchTitan's stock loader (design doc).

    Set ``--dataloader.dataset-path``, ``--dataloader.record-dir``, ``--heldout.spec`` (the
    Zephon run's data spec) and ``--training.local-batch-size`` (8 / dp).
    """
    settings = {f.name: getattr(zephon, f.name) for f in fields(Trainer.Config) if f.init}
    settings["dataloader"] = RecordingStockLoader.Config(dataset="c4_test")
    heldout = {
        f.name: getattr(zephon.dataloader, f.name)
        for f in fields(ZephonDataLoader.Config)
        if f.init
    }
    return StockHeldOutTrainer.Config(heldout=ZephonDataLoader.Config(**heldout), **settings)
