"""``ZephonTrainer``: TorchTitan's ``Trainer`` with the lane pipeline as its data loader.

The training loop, model, parallelisms, optimizer and checkpointing are TorchTitan's own;
the subclass makes Zephon's tokenizer and data loader the defaults, checks that the
trainer's settings fit the data contract, ends training with a barrier instead of a
sleep, and says what a checkpoint without Zephon's data state holds.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torchtitan.trainer as torchtitan_trainer
from torch.distributed.checkpoint.filesystem import _FileSystemWriter
from torchtitan.components.checkpointer import DATALOADER, CheckpointManager
from torchtitan.components.checkpointer.dcp import AsyncMode
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import LoggerContainer
from torchtitan.distributed import ParallelDims
from torchtitan.models.common.decoder import Decoder
from torchtitan.trainer import Trainer

from orchestrator import failpoints
from orchestrator.evaluation.evaluator import HeldOutEvaluator
from orchestrator.evaluation.step_zero_cache import InitialModel
from orchestrator.experiment import build_pipeline
from orchestrator.experiment.checkpoint_manifest import write_manifest
from orchestrator.failpoints import Failpoint
from orchestrator.titan.collectives import DataParallelGroup
from orchestrator.titan.dataloader import (
    TrainerLink,
    ZephonDataLoader,
    check_checkpoint,
)
from orchestrator.titan.recipe_resolver import plain_data
from orchestrator.titan.runlog import (
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    JsonlMetricsLogger,
    StepLog,
)
from orchestrator.titan.tokenizer import ZephonTokenizer
from pipeline import ConfigError, fingerprint, load_tokenizer


class ZephonTrainer(Trainer):
    """TorchTitan's trainer, fed by a :class:`ZephonDataLoader` (design:
    docs/design/orchestrator_titan.md)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """``Trainer.Config`` whose tokenizer and data loader are Zephon's."""

        tokenizer: ZephonTokenizer.Config = field(default_factory=ZephonTokenizer.Config)
        dataloader: ZephonDataLoader.Config = field(default_factory=ZephonDataLoader.Config)
        validator: HeldOutEvaluator.Config = field(default_factory=HeldOutEvaluator.Config)
        vocab_follows_tokenizer: bool = False
        """Size the model's vocabulary (embedding, output layer, loss) to the tokenizer's;
        Zephon's configs set it. Otherwise a model smaller than the tokenizer is refused."""

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
            if self.vocab_follows_tokenizer:
                set_model_vocab(model, self.loss, tokenizer_vocab)
            elif model_vocab is not None and model_vocab < tokenizer_vocab:
                raise ConfigError(
                    f"the model's vocabulary ({model_vocab} ids) is smaller than tokenizer "
                    f"{self.tokenizer.name!r}'s ({tokenizer_vocab}); give the model vocab_size "
                    f">= {tokenizer_vocab} (embedding, output layer and loss)"
                )

    config: Config
    dataloader: ZephonDataLoader

    def __init__(self, config: Config) -> None:
        self._asked_once = False
        if config.training.global_batch_size == -1:  # unset: follow the data contract
            config.training.global_batch_size = config.dataloader.data().global_batch_size
        super().__init__(config)
        self._check_steps_take_one_global_batch()
        if isinstance(self.checkpointer, CheckpointManager) and self.checkpointer.enable:
            self.checkpointer.dcp_load = _checking_data_state(self.checkpointer.dcp_load)
            self.checkpointer.dcp_save = _with_manifest(self.checkpointer.dcp_save)
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
                initial=initial_model(config),
            )

    def init_distributed(self) -> ParallelDims:
        """TorchTitan's, then the data layout is validated at once: the first point where the
        data-parallel degree is known, before TorchTitan builds the model or checks batch sizes."""
        dims = super().init_distributed()
        config = self.config
        build_pipeline(
            config.dataloader.trainer_data(
                tokenizer=config.tokenizer.name, seq_len=config.training.seq_len
            ),
            dp_size=dims.get_mesh("batch").size() if dims.dp_enabled else 1,
            dp_rank=0,
            microbatch_size=(
                config.parallelism.pipeline_parallel_microbatch_size
                if dims.pp_enabled
                else config.training.local_batch_size
            ),
            **config.dataloader.pipeline_options(),
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

    def should_continue_training(self) -> bool:
        """TorchTitan's, after the first call's eval: its loop asks this first right after
        loading the weights and before the next step, the one point where the loaded model
        exists. It scores step 0's model when asked to, or, resumed from a checkpoint whose
        eval a kill stopped, that eval (the resumed loop would never come back to it)."""
        validator = self.validator if self.config.validator.enable else None
        if not self._asked_once and isinstance(validator, HeldOutEvaluator):
            validator.resume_at(self.model_parts, self.step)
        self._asked_once = True
        return super().should_continue_training()

    def train_step(self, *args: Any, **kwargs: Any) -> None:
        """TorchTitan's step, after the step's failpoint (:mod:`orchestrator.failpoints`)."""
        failpoints.reach(Failpoint.STEP, self.step)
        super().train_step(*args, **kwargs)

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


def _with_manifest(dcp_save: Callable[..., Any]) -> Callable[..., Any]:
    """``CheckpointManager.dcp_save`` that, once a synchronous save is whole, has global rank
    0 write the checkpoint's manifest (:mod:`orchestrator.experiment.checkpoint_manifest`)."""

    def save(state_dict: dict[str, Any], checkpoint_id: str, **kwargs: Any) -> Any:
        name = Path(checkpoint_id).name.removeprefix("step-")
        step = int(name) if name.isdigit() else -1
        with _held_before_metadata(step):
            result = dcp_save(state_dict, checkpoint_id=checkpoint_id, **kwargs)
        # an asynchronous save is whole only later: it has no manifest
        whole = kwargs.get("async_mode") == AsyncMode.DISABLED
        if whole and Path(checkpoint_id).is_dir() and dist.get_rank() == 0:
            write_manifest(Path(checkpoint_id))
            failpoints.reach(Failpoint.CHECKPOINT_SAVED, step)
        return result

    return save


@contextlib.contextmanager
def _held_before_metadata(step: int) -> Iterator[None]:
    """While inside, DCP's writer holds at :attr:`Failpoint.CHECKPOINT_WRITTEN` (if armed at
    ``step``) after the shards and before ``.metadata``: where a kill tears a checkpoint."""
    if failpoints.armed(Failpoint.CHECKPOINT_WRITTEN) != step:
        yield
        return
    real = _FileSystemWriter.finish

    def finish(writer: _FileSystemWriter, *args: Any, **kwargs: Any) -> None:
        failpoints.reach(Failpoint.CHECKPOINT_WRITTEN, step)
        real(writer, *args, **kwargs)

    _FileSystemWriter.finish = finish  # type: ignore[method-assign]
    try:
        yield
    finally:
        _FileSystemWriter.finish = real  # type: ignore[method-assign]


def initial_model(config: ZephonTrainer.Config) -> InitialModel | None:
    """The initial model as the evaluator's step-0 cache keys it: the initial checkpoint's
    digest (``--validator.initial-digest``), the model's config and its precision; None
    without a digest."""
    digest = config.validator.initial_digest
    if not digest:
        return None
    training = config.training
    return InitialModel(
        weights=digest,
        config=fingerprint({"model_spec": plain_data(config.model_spec), "dtype": training.dtype}),
        precision=training.mixed_precision_param,
    )


def set_model_vocab(model: object, loss: object, vocab: int) -> None:
    """Resize a decoder's embedding, output layer and loss to ``vocab`` ids."""
    if not isinstance(model, Decoder.Config) or model.lm_head is None:
        raise ConfigError(
            f"cannot size the vocabulary of {type(model).__qualname__}; set it to {vocab} "
            "yourself and leave vocab_follows_tokenizer off"
        )
    model.vocab_size = vocab
    model.tok_embeddings.num_embeddings = vocab
    model.lm_head.out_features = vocab
    loss_fn = loss.loss_fn if isinstance(loss, ChunkedLossWrapper.Config) else loss
    if isinstance(loss_fn, CrossEntropyLoss.Config):
        loss_fn.global_vocab_size = vocab
