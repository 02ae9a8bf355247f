"""``ZephonTrainer``: TorchTitan's ``Trainer`` with the lane pipeline as its data loader.

The training loop, model, parallelisms, optimizer and checkpointing are
TorchTitan's own. The subclass only

* makes ``ZephonTokenizer`` and ``ZephonDataLoader`` the default components and
  checks, when the config is built (before any process group exists), that the
  trainer's settings fit the data contract: a global batch equal to the data
  spec's (an unset ``--training.global-batch-size`` follows it when the trainer
  is built), a model vocabulary that covers the tokenizer's;
* once TorchTitan has built everything, checks that its gradient accumulation
  covers exactly one global batch per step, connects the data loader to the
  trainer (step counter, data-parallel group, metric loggers, run folder), and
  adds a metric logger writing ``<dump_folder>/zephon/metrics.jsonl``;
* replaces TorchTitan's 2-second sleep after training ("for other ranks to complete")
  by a barrier of every rank, none on dp 1;
* makes its checkpoint manager look at the data state of the checkpoint it is
  about to load. DCP would refuse a checkpoint without ``dataloader.zephon``
  (e.g. one saved by TorchTitan's stock loader) with a bare "Missing key in
  checkpoint state_dict"; ``CheckpointManager.dcp_load`` is the one place that
  knows which checkpoint TorchTitan chose, so it is wrapped to say what the
  checkpoint holds instead and how to proceed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torchtitan.trainer as torchtitan_trainer
from torchtitan.components.checkpointer import DATALOADER, CheckpointManager
from torchtitan.components.metrics import LoggerContainer
from torchtitan.distributed import ParallelDims
from torchtitan.trainer import Trainer

from orchestrator.titan.collectives import DataParallelGroup
from orchestrator.titan.dataloader import (
    TrainerLink,
    ZephonDataLoader,
    build_pipeline,
    check_checkpoint,
)
from orchestrator.titan.evaluator import HeldOutEvaluator
from orchestrator.titan.runlog import (
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    JsonlMetricsLogger,
    StepLog,
)
from orchestrator.titan.tokenizer import ZephonTokenizer
from pipeline import ConfigError, load_tokenizer


class ZephonTrainer(Trainer):
    """TorchTitan's trainer, fed by a :class:`ZephonDataLoader` (see module docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """``Trainer.Config`` whose tokenizer and data loader are Zephon's."""

        tokenizer: ZephonTokenizer.Config = field(default_factory=ZephonTokenizer.Config)
        dataloader: ZephonDataLoader.Config = field(default_factory=ZephonDataLoader.Config)
        validator: HeldOutEvaluator.Config = field(default_factory=HeldOutEvaluator.Config)

        def __post_init__(self) -> None:
            Trainer.Config.__post_init__(self)  # slots=True dataclasses cannot use bare super()
            data = self.dataloader
            if not isinstance(data, ZephonDataLoader.Config):
                raise ConfigError(
                    f"ZephonTrainer needs ZephonDataLoader.Config as dataloader, got "
                    f"{type(data).__qualname__}"
                )
            training = self.training
            if data.spec:  # unset while a config function builds the defaults
                contract = data.data().global_batch_size
                if training.global_batch_size not in (-1, contract):
                    raise ConfigError(
                        f"--training.global-batch-size ({training.global_batch_size}) differs "
                        f"from the data spec's global_batch_size ({contract}), which is part "
                        "of the data contract; leave the former unset (-1) or make them equal"
                    )
            model = self.model_spec.model if self.model_spec is not None else None
            model_vocab = getattr(model, "vocab_size", None)
            tokenizer_vocab = load_tokenizer(self.tokenizer.name).vocab_size
            if model_vocab is not None and model_vocab < tokenizer_vocab:
                raise ConfigError(
                    f"the model's vocabulary ({model_vocab} ids) is smaller than tokenizer "
                    f"{self.tokenizer.name!r}'s ({tokenizer_vocab}); give the model vocab_size "
                    f">= {tokenizer_vocab} (embedding, output layer and loss)"
                )

    config: Config
    dataloader: ZephonDataLoader

    def __init__(self, config: Config) -> None:
        if config.training.global_batch_size == -1:  # unset: follow the data contract
            config.training.global_batch_size = config.dataloader.data().global_batch_size
        super().__init__(config)
        self._check_steps_take_one_global_batch()
        if isinstance(self.checkpointer, CheckpointManager) and self.checkpointer.enable:
            self.checkpointer.dcp_load = _checking_data_state(self.checkpointer.dcp_load)
        run_dir = Path(config.dump_folder) / RUN_SUBDIR
        is_rank0 = dist.get_rank() == 0
        if is_rank0:
            loggers = LoggerContainer()
            loggers.add_logger(self.metrics_processor.logger)
            loggers.add_logger(JsonlMetricsLogger(run_dir / METRICS_FILE))
            self.metrics_processor.logger = loggers
        dims = self.parallel_dims
        dp_group = dims.get_mesh("batch").get_group() if dims.dp_enabled else None
        self.dataloader.attach(
            TrainerLink(
                step=lambda: self.step,
                group=DataParallelGroup(dp_group, self.device, size=self.dataloader.dp_world_size),
                metrics=self.metrics_processor.logger,
                steps=StepLog(run_dir / STEPS_FILE, enabled=is_rank0),
            )
        )
        if config.validator.enable:
            assert isinstance(self.validator, HeldOutEvaluator), "validator must be Zephon's"
            self.validator.attach(
                source=self.dataloader.pipeline.source,
                tokenizer=load_tokenizer(config.tokenizer.name),
                metrics=self.metrics_processor.logger,
                run_dir=run_dir,
                last_step=config.training.steps,
                group=dp_group,
                is_rank0=is_rank0,
            )

    def init_distributed(self) -> ParallelDims:
        """TorchTitan's, then the data layout is validated at once: the first point where the
        data-parallel degree is known, before TorchTitan builds the model or checks batch sizes."""
        dims = super().init_distributed()
        config = self.config
        build_pipeline(
            config.dataloader,
            tokenizer=config.tokenizer.name,
            dp_world_size=dims.get_mesh("batch").size() if dims.dp_enabled else 1,
            dp_rank=0,
            seq_len=config.training.seq_len,
            microbatch_size=(
                config.parallelism.pipeline_parallel_microbatch_size
                if dims.pp_enabled
                else config.training.local_batch_size
            ),
        )
        return dims

    def _check_steps_take_one_global_batch(self) -> None:
        loader = self.dataloader
        per_step = (
            self.gradient_accumulation_steps
            * self.num_pipeline_parallel_microbatches
            * loader.microbatch_size
            * loader.dp_world_size
        )
        if per_step != loader.global_batch_size:
            raise ConfigError(
                f"TorchTitan takes {per_step} sequences per step but the data contract's global "
                f"batch is {loader.global_batch_size}; make --training.global-batch-size equal "
                "the data spec's global_batch_size"
            )

    def train(self) -> None:
        """TorchTitan's loop. Its rank 0 then sleeps 2 s "for other ranks to complete"; a
        barrier of every rank waits exactly that long, and dp 1 has no one to wait for."""
        with _final_sleep_skipped():
            super().train()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()

    def close(self) -> None:
        if hasattr(self, "dataloader"):
            self.dataloader.close()
        super().close()


@contextlib.contextmanager
def _final_sleep_skipped() -> Iterator[None]:
    """``torchtitan.trainer``'s ``time`` module, with ``sleep`` a no-op, while inside: the
    module calls ``time.sleep`` once, after its training loop (``ZephonTrainer.train``)."""
    real = torchtitan_trainer.time
    torchtitan_trainer.time = _TimeWithoutSleep(real)
    try:
        yield
    finally:
        torchtitan_trainer.time = real


class _TimeWithoutSleep:
    """The ``time`` module with ``sleep`` doing nothing."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def sleep(self, seconds: float) -> None:
        del seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _checking_data_state(dcp_load: Callable[..., None]) -> Callable[..., None]:
    """``CheckpointManager.dcp_load`` that first checks the checkpoint's data state."""

    def load(state_dict: dict[str, Any], checkpoint_id: str, **kwargs: Any) -> None:
        if DATALOADER in state_dict:  # not excluded from loading, not a model-only load
            check_checkpoint(checkpoint_id)
        dcp_load(state_dict, checkpoint_id=checkpoint_id, **kwargs)

    return load
