"""The TorchTitan data loader component in one process (dp 1): contract, validation, state.

A stand-in for TorchTitan's training loop pulls micro-batches as ``Trainer.train_step``
does: the step counter is raised, then ``G / (dp x local batch)`` micro-batches are
taken. Multi-process behaviour is covered by ``test_titan_elastic.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.experiment import DataSection, read_data_spec, write_data_spec
from orchestrator.titan.collectives import DataParallelGroup
from orchestrator.titan.configs import zephon_debug, zephon_mini
from orchestrator.titan.dataloader import STATE_KEY, TrainerLink, ZephonDataLoader
from orchestrator.titan.runlog import StepLog
from orchestrator.titan.tokenizer import ZephonTokenizer
from orchestrator.titan.trainer import ZephonTrainer
from pipeline import IGNORE_INDEX, ConfigError, StateError, fingerprint
from tests.support.titan_run import corpus

SEQ_LEN = 64
GLOBAL_BATCH = 8


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> ZephonDataLoader.Config:
    """The loader over a data spec of the test corpus (tokenizing in the test's process)."""
    domains = corpus(tmp_path_factory.getbasetemp())
    specs = tmp_path_factory.mktemp("data-specs")
    data = DataSection(
        datasets={name: [str(p) for p in paths] for name, paths in domains.items()},
        lanes=4,
        global_batch_size=GLOBAL_BATCH,
        seq_len=SEQ_LEN,
        shuffle_buffer=8,
        flush_every=2,
        chunk_tokens=512,
        holdout_bytes=0,
        cache_dir=str(specs / "index-cache"),
    )
    write_data_spec(specs / "data.json", data)
    return ZephonDataLoader.Config(spec=str(specs / "data.json"), tokenize_parallelism=0)


@pytest.fixture(scope="module")
def tokenizer() -> ZephonTokenizer:
    return ZephonTokenizer(ZephonTokenizer.Config())


class RecordingLogger:
    """A TorchTitan metric logger that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict[str, Any]]] = []

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.records.append((step, metrics))

    def close(self) -> None:
        pass


class LoopStandIn:
    """Drives a data loader like TorchTitan's ``Trainer.train``/``train_step`` on one rank."""

    def __init__(
        self,
        loader: ZephonDataLoader,
        run_dir: Path,
        resumed_step: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.loader = loader
        self.step = resumed_step
        self.metrics = RecordingLogger()
        self.log = StepLog(run_dir / "steps.jsonl", enabled=True)
        loader.attach(
            TrainerLink(
                step=lambda: self.step,
                group=DataParallelGroup(None, torch.device("cpu")),
                metrics=self.metrics,
                steps=self.log,
            )
        )
        if state is not None:
            loader.load_state_dict(state)
        self.batches = iter(loader)

    def train(self, steps: int) -> list[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        pulled = []
        per_step = GLOBAL_BATCH // self.loader.microbatch_size
        for _ in range(steps):
            self.step += 1
            pulled += [next(self.batches) for _ in range(per_step)]
        return pulled

    def logged(self) -> dict[int, dict[str, Any]]:
        lines = self.log.path.read_text().splitlines()
        return {r["step"]: r for r in map(json.loads, lines)}


def data_record(loop: LoopStandIn) -> dict[int, tuple[str, str, int]]:
    """Step -> (global digest, data fingerprint, tokens) as logged to ``steps.jsonl``."""
    return {
        step: (r["global_digest"], r["data_fingerprint"], r["tokens"])
        for step, r in loop.logged().items()
    }


def build(
    config: ZephonDataLoader.Config,
    tokenizer: ZephonTokenizer,
    *,
    micro: int = GLOBAL_BATCH,
    dp: int = 1,
    seq_len: int = SEQ_LEN,
    **changes: Any,
) -> ZephonDataLoader:
    """The loader of ``config`` on ``dp`` ranks; ``changes`` to the data section (a field, or
    ``data_<field>``) go to a new data spec next to the fixture's, the others to the loader's
    config."""
    return with_changes(config, **changes).build(
        dp_world_size=dp, dp_rank=0, tokenizer=tokenizer, seq_len=seq_len, local_batch_size=micro
    )


def with_changes(config: ZephonDataLoader.Config, **changes: Any) -> ZephonDataLoader.Config:
    data_fields = {f.name for f in fields(DataSection)}
    changes = {k.removeprefix("data_"): v for k, v in changes.items()}  # data_tokenizer
    data = {k: v for k, v in changes.items() if k in data_fields}
    loader = {k: v for k, v in changes.items() if k not in data_fields}
    if data:
        spec = Path(config.spec).with_name(f"data-{fingerprint(data)[:12]}.json")
        write_data_spec(spec, replace(read_data_spec(config.spec), **data))
        loader["spec"] = str(spec)
    return replace(config, **loader)


def test_yields_what_torchtitans_train_step_expects(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    loop = LoopStandIn(build(config, tokenizer, micro=4), tmp_path)
    pulled = loop.train(4)
    for inputs, labels in pulled:
        assert set(inputs) == {"input", "positions"}  # other keys would reach model.forward
        for tensor in (inputs["input"], inputs["positions"], labels):
            assert tensor.shape == (4, SEQ_LEN)
            assert tensor.dtype == torch.int64
        assert torch.equal(labels[:, :-1], inputs["input"][:, 1:])  # next-token labels
        assert (labels != IGNORE_INDEX).all()  # no padding before the data ends
        positions = inputs["positions"]
        assert (positions[:, 0] == 0).all()
        steps_up = positions[:, 1:] == positions[:, :-1] + 1
        assert (steps_up | (positions[:, 1:] == 0)).all()  # 0, 1, ... restarting at documents
    assert [step for step, _ in loop.metrics.records] == [1, 2, 3, 4]
    assert {metrics["zephon/tokens"] for _, metrics in loop.metrics.records} == {
        GLOBAL_BATCH * SEQ_LEN
    }
    # documents are packed together, each with its own positions (the first documents can
    # be longer than 4 steps; flush padding follows, hence no label checks on these)
    pulled += loop.train(8)
    inner_starts = sum(int((inputs["positions"][:, 1:] == 0).sum()) for inputs, _ in pulled)
    assert inner_starts > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"dp": 3}, "lanes (L=4) must be a multiple of dp_size (3)"),
        ({"global_batch_size": 6}, "must be a positive multiple of lanes"),
        ({"dp": 2, "micro": 3}, "microbatch_size (3) must divide the local batch G/dp = 8/2 = 4"),
        ({"datasets": {}}, "names no datasets"),
        ({"spec": ""}, "no data spec: set --dataloader.spec PATH"),
        ({"spec": "/nonexistent/data.json"}, "data spec '/nonexistent/data.json' does not exist"),
        ({"seq_len": 128}, "--training.seq-len is 128 but the data spec"),  # the trainer's
        ({"data_tokenizer": "r50k_base"}, "--tokenizer.name is 'gpt2' but the data spec"),
        ({"dataset": "c4_test"}, "settings of TorchTitan's stock loader"),
        ({"mixture": {"web": 1.0}}, "mixture names unknown dataset(s) ['web']"),
    ],
)
def test_invalid_settings_are_refused_saying_what_to_change(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, changes: dict, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        build(config, tokenizer, **changes)
    assert message in str(error.value)
    if "lanes" in message or "divide" in message:
        assert "--training.local-batch-size" in str(error.value)  # names TorchTitan's flags


def test_the_trainers_tokenizer_must_be_zephons(config: ZephonDataLoader.Config) -> None:
    with pytest.raises(ConfigError, match="must be a ZephonTokenizer"):
        config.build(
            dp_world_size=1, dp_rank=0, tokenizer=object(), seq_len=SEQ_LEN, local_batch_size=8
        )


def trainer_config(**changes: Any) -> ZephonTrainer.Config:
    base = zephon_debug()
    settings = {f.name: getattr(base, f.name) for f in fields(base) if f.init}
    return ZephonTrainer.Config(**{**settings, **changes})


@pytest.mark.parametrize("make", [zephon_debug, zephon_mini], ids=lambda f: f.__name__)
def test_trainer_config_follows_the_data_contract(make: Callable[[], ZephonTrainer.Config]) -> None:
    config = make()
    assert config.training.global_batch_size == -1  # set from the data loader's at build time
    assert config.model_spec.model.vocab_size == 50257  # gpt2's, for the model and the loss
    assert config.model_spec.model.tok_embeddings.num_embeddings == 50257
    assert config.model_spec.model.lm_head.out_features == 50257
    assert config.loss.loss_fn.global_vocab_size == 50257


def test_the_mini_model_is_the_debug_recipe_smaller() -> None:
    debug, mini = zephon_debug(), zephon_mini()
    assert (mini.model_spec.model.dim, len(mini.model_spec.model.layers)) == (64, 2)
    assert (debug.model_spec.model.dim, len(debug.model_spec.model.layers)) == (256, 6)
    assert mini.model_spec.name == debug.model_spec.name == "llama3"
    # everything but the model is the same: data, schedule, optimizer, precision
    assert mini.dataloader == debug.dataloader and mini.training == debug.training
    assert mini.optimizer == debug.optimizer and mini.lr_scheduler == debug.lr_scheduler


def test_trainer_config_refuses_a_conflicting_global_batch(
    config: ZephonDataLoader.Config,
) -> None:
    training = zephon_debug().training
    training.global_batch_size = 16
    with pytest.raises(ConfigError, match=re.escape("--training.global-batch-size (16) differs")):
        trainer_config(training=training, dataloader=config)
    training.global_batch_size = GLOBAL_BATCH
    assert trainer_config(training=training, dataloader=config).dataloader == config


def test_a_data_spec_with_an_unknown_key_is_refused_naming_it(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    spec = tmp_path / "data.json"
    spec.write_text(json.dumps({**json.loads(Path(config.spec).read_text()), "colour": "blue"}))
    with pytest.raises(ConfigError, match=f"data spec '{spec}': colour"):
        build(replace(config, spec=str(spec)), tokenizer)


def test_trainer_config_refuses_a_model_vocabulary_smaller_than_the_tokenizers() -> None:
    model_spec = zephon_debug().model_spec
    model_spec.model.vocab_size = 2048  # TorchTitan's debugmodel default
    with pytest.raises(ConfigError, match="vocab_size >= 50257"):
        trainer_config(model_spec=model_spec, vocab_follows_tokenizer=False)


def test_zephons_configs_size_the_vocabulary_to_the_tokenizer() -> None:
    model_spec = zephon_debug().model_spec
    model_spec.model.vocab_size = 2048
    model_spec.model.tok_embeddings.num_embeddings = 2048
    config = trainer_config(model_spec=model_spec)
    assert config.vocab_follows_tokenizer
    model = config.model_spec.model
    assert model.vocab_size == model.tok_embeddings.num_embeddings == 50257
    assert model.lm_head.out_features == config.loss.loss_fn.global_vocab_size == 50257


def test_gradient_accumulation_keeps_the_global_batches(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    whole = LoopStandIn(build(config, tokenizer, micro=GLOBAL_BATCH), tmp_path / "whole")
    accumulated = LoopStandIn(build(config, tokenizer, micro=2), tmp_path / "accumulated")
    whole_batches, accumulated_batches = whole.train(3), accumulated.train(3)

    assert len(accumulated_batches) == 4 * len(whole_batches)
    for step, (inputs, _) in enumerate(whole_batches):
        parts = accumulated_batches[4 * step : 4 * step + 4]
        assert torch.equal(inputs["input"], torch.cat([p[0]["input"] for p in parts]))
    assert data_record(whole) == data_record(accumulated)


def test_state_resumes_with_another_micro_batch_size(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    uninterrupted = LoopStandIn(build(config, tokenizer), tmp_path / "uninterrupted")
    uninterrupted.train(6)
    first = LoopStandIn(build(config, tokenizer), tmp_path / "interrupted")
    first.train(3)
    state = first.loader.state_dict()
    assert list(state) == [STATE_KEY]  # one entry, the same on every rank: DCP stores it once
    first.train(1)  # step 4 is logged, then the run dies before its next checkpoint

    resumed = LoopStandIn(
        build(config, tokenizer, micro=4), tmp_path / "interrupted", resumed_step=3, state=state
    )
    resumed.train(3)  # redoes step 4: its line is replaced, not repeated
    assert data_record(resumed) == data_record(uninterrupted)
    assert resumed.loader.state_dict() == uninterrupted.loader.state_dict()


def test_refuses_the_stock_loaders_state(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer
) -> None:
    stock = {"dp_rank_0": b"pickled StatefulDataLoader state", "world_size": 2}
    with pytest.raises(StateError, match="saved by TorchTitan's stock data loader"):
        build(config, tokenizer).load_state_dict(stock)
    with pytest.raises(StateError, match="has no Zephon data state"):
        build(config, tokenizer).load_state_dict({})


def test_refuses_a_state_of_another_data_contract(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    loop = LoopStandIn(build(config, tokenizer), tmp_path)
    loop.train(1)
    state = loop.loader.state_dict()
    with pytest.raises(StateError, match="another data contract; differing fields: seed"):
        build(config, tokenizer, seed=1).load_state_dict(state)


def test_refuses_to_restart_the_data_of_a_resumed_trainer(
    config: ZephonDataLoader.Config, tokenizer: ZephonTokenizer, tmp_path: Path
) -> None:
    # The trainer resumed after step 6, but no data state was loaded (excluded from loading).
    loop = LoopStandIn(build(config, tokenizer), tmp_path, resumed_step=6)
    with pytest.raises(StateError, match="brought no Zephon data state"):
        loop.train(1)
    # A fresh run (step 0) is the one case where starting the data from the beginning is right.
    LoopStandIn(build(config, tokenizer), tmp_path / "fresh").train(1)
