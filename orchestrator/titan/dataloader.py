"""``ZephonDataLoader``: the lane pipeline as TorchTitan 0.3.0's data loader component.

Each pull yields ``({"input": ids, "positions": pos}, labels)`` for one micro-batch of
this rank's lanes; per step the ranks exchange lane digests and rank 0 records the global
batch digest. ``state_dict()`` is merged over ranks, so any dp size dividing ``lanes``
can load it; nothing ever restarts the data silently.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.distributed.checkpoint import FileSystemReader
from torchtitan.components.checkpointer import DATALOADER
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.metrics import BaseLogger

from orchestrator.errors import ExperimentError
from orchestrator.experiment import DataSection, build_pipeline, read_data_spec
from orchestrator.titan.collectives import DataParallelGroup
from orchestrator.titan.runlog import StepLog
from orchestrator.titan.tokenizer import ZephonTokenizer
from pipeline import (
    IGNORE_INDEX,
    ConfigError,
    DigestChain,
    MicroBatch,
    StateError,
    global_batch_digest,
    merge_states,
)

STATE_KEY = "zephon"
"""Key of the data state inside TorchTitan's ``dataloader`` checkpoint entry."""
STATE_FORMAT = "zephon.titan-dataloader.v1"


@dataclass
class TrainerLink:
    """What the data loader needs from the trainer that runs it (see ``ZephonTrainer``)."""

    step: Callable[[], int]
    """The trainer's current step: 1-based while a step fetches its data."""
    group: DataParallelGroup
    """The data-parallel ranks to exchange lane digests and states with."""
    metrics: BaseLogger
    """TorchTitan's metric loggers."""
    steps: StepLog
    """The run's ``steps.jsonl``."""


class ZephonDataLoader(BaseDataLoader):
    """TorchTitan data loader over one rank's lanes of a Zephon ``Pipeline``."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        """Where the data config is, and knobs that change speed only.

        The data config is one file, ``spec``: an experiment's ``data`` section as JSON
        (:mod:`orchestrator.experiment.dataspec`; ``zephon run`` writes ``<run>/data.json``).
        TorchTitan's ``--tokenizer.name`` (a ``ZephonTokenizer``) and ``--training.seq-len``
        must equal its ``tokenizer`` and ``seq_len``; an unset ``--training.global-batch-size``
        follows its ``global_batch_size``. The inherited ``dataset``/``dataset_path`` belong to
        TorchTitan's stock loader and must stay unset.
        """

        spec: str = ""
        """Path of the data spec (JSON: an experiment's ``data`` section)."""
        tokenize_parallelism: int = 1
        """Tokenize workers per rank; 0 tokenizes in the training process (performance only)."""
        runner: Literal["inline", "threads", "processes"] = "threads"
        """How tokenize workers run (performance only)."""
        prefetch_steps: int = 2
        """Steps assembled ahead on a background thread (performance only)."""

        def data(self) -> DataSection:
            """The data section in ``spec``; ConfigError saying what is wrong with it."""
            if not self.spec:
                raise ConfigError(
                    "no data spec: set --dataloader.spec PATH, a JSON file holding an "
                    "experiment's data section (datasets, mixture, lanes, ...); `zephon run` "
                    "writes one as <run>/data.json"
                )
            try:
                return read_data_spec(self.spec)
            except ExperimentError as error:
                raise ConfigError("; ".join(error.problems)) from None

        def trainer_data(self, *, tokenizer: str, seq_len: int) -> DataSection:
            """The data section in ``spec`` for a trainer whose ``--tokenizer.name`` is
            ``tokenizer`` and ``--training.seq-len`` is ``seq_len`` (both part of the data
            contract); ConfigError saying what to change, in TorchTitan's flag names and the
            spec's."""
            if self.dataset or self.dataset_path:
                raise ConfigError(
                    "--dataloader.dataset and --dataloader.dataset-path are settings of "
                    "TorchTitan's stock loader; the Zephon loader reads its datasets from "
                    "--dataloader.spec"
                )
            data = self.data()
            where = f"the data spec {self.spec}"
            if not data.datasets:
                raise ConfigError(
                    f"{where} names no datasets; give data.datasets as name -> shard paths or "
                    'globs, e.g. {"code": ["data/code/*.jsonl.zst"], "docs": '
                    '["data/docs/*.parquet"]}'
                )
            disagreeing = [
                f"--{flag} is {mine!r} but {where} has {key} {theirs!r}"
                for flag, mine, key, theirs in (
                    ("tokenizer.name", tokenizer, "tokenizer", data.tokenizer),
                    ("training.seq-len", seq_len, "seq_len", data.seq_len),
                )
                if mine != theirs
            ]
            if disagreeing:
                raise ConfigError("; ".join(disagreeing) + ": they are part of the data contract")
            return data

        def pipeline_options(self) -> dict[str, Any]:
            """What :func:`~orchestrator.experiment.build_pipeline` takes from this loader:
            its speed settings, and where its sizes come from for its errors."""
            return {
                "tokenize_parallelism": self.tokenize_parallelism,
                "runner": self.runner,
                "prefetch_steps": self.prefetch_steps,
                "sizes_hint": (
                    f"lanes L and global batch G: the data spec {self.spec}; micro-batch = "
                    "--training.local-batch-size; dp_size = the data-parallel degree"
                ),
            }

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: ZephonTokenizer,
        seq_len: int,
        local_batch_size: int,
        **kwargs: Any,
    ) -> None:
        # kwargs: snapshot_every_n_steps, a knob of the stock loader's StatefulDataLoader.
        if not isinstance(tokenizer, ZephonTokenizer):
            raise ConfigError(
                f"the trainer's tokenizer is a {type(tokenizer).__qualname__}; the Zephon data "
                "loader tokenizes with the trainer's tokenizer, which must be a ZephonTokenizer"
            )
        self.pipeline = build_pipeline(
            config.trainer_data(tokenizer=tokenizer.name, seq_len=seq_len),
            dp_size=dp_world_size,
            dp_rank=dp_rank,
            microbatch_size=local_batch_size,
            **config.pipeline_options(),
        )
        self.dp_world_size = dp_world_size
        self.microbatch_size = local_batch_size
        self.global_batch_size = self.pipeline.global_batch_size
        self._link: TrainerLink | None = None
        self._restored: dict[str, Any] | None = None
        self._chain = DigestChain()
        self._iterated = False
        self._log_started = False
        self._wait_seen = 0.0
        self._shards_recorded: dict[str, int] = {}  # per dataset: shard reads recorded
        self._reading = ReadingCounts()

    def attach(self, link: TrainerLink) -> None:
        """Connect to the trainer; required before iterating (``ZephonTrainer`` does it)."""
        assert link.group.size == self.dp_world_size, (
            f"the exchange group has {link.group.size} ranks, the data-parallel degree is "
            f"{self.dp_world_size}"
        )
        self._link = link

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        link = self._link
        if link is None:
            raise ConfigError(
                "ZephonDataLoader is not attached to a trainer; build the trainer from "
                "orchestrator.titan.trainer.ZephonTrainer.Config (zephon-train does)"
            )
        if self._iterated:
            raise ConfigError("ZephonDataLoader is iterated once per run")
        self._iterated = True
        batches = iter(self.pipeline)
        global_digest, tokens = "", 0
        try:
            while True:
                batch = next(batches, None)
                if batch is None or batch.index == 0:
                    global_digest = self._start_step(batch, link)
                    if global_digest is None:
                        return
                    tokens = 0
                assert batch is not None
                training = batch.to_training()
                labels = training["labels"]
                tokens += int((labels != IGNORE_INDEX).sum())
                if batch.is_last:
                    self._finish_step(batch.step + 1, global_digest, tokens, link)
                yield {"input": training["input"], "positions": training["positions"]}, labels
        finally:
            batches.close()

    def _start_step(self, batch: MicroBatch | None, link: TrainerLink) -> str | None:
        """The global digest of the step ``batch`` opens; None when a rank has no step left.

        Every rank takes part in the exchange, with or without a step, so all stop together.
        """
        if batch is not None:
            self._check_step(batch.step, link)
        digests = link.group.gather_lane_digests(
            None if batch is None else batch.lane_digests, len(self.pipeline.owned_lanes)
        )
        if digests is None or batch is None:
            return None
        if not self._log_started:  # only once the data state is known to fit the trainer's
            link.steps.start(resumed_step=batch.step)
            self._log_started = True
        return global_batch_digest(digests)

    def _check_step(self, done: int, link: TrainerLink) -> None:
        """Refuse to deliver data of another step than the trainer's (``done`` steps delivered)."""
        trainer_done = link.step() - 1
        if done == trainer_done:
            return
        if self._restored is None:
            raise StateError(
                f"the trainer resumes after step {trainer_done}, but its checkpoint brought no "
                "Zephon data state (a model-only checkpoint, or 'dataloader' in "
                "--checkpoint.exclude-from-loading); the data would silently restart from its "
                "beginning. Resume from a full checkpoint saved by the Zephon data loader, or "
                "start a new run."
            )
        raise StateError(
            f"the data state is after step {done} but the trainer's is after step "
            f"{trainer_done}; the checkpoint's data and train states disagree"
        )

    def _finish_step(self, step: int, global_digest: str, tokens: int, link: TrainerLink) -> None:
        """Log the step that was just handed over in full (all ranks take part)."""
        stats = self.pipeline.stats()
        waited = stats["consumer_wait_s"]
        new_shards = self._shards_read_since_last_step()
        reading = self._reading.since_last_step(stats)
        count = sum(len(shards) for shards in new_shards.values()) + len(reading)
        tokens, wait_s, count = link.group.gather_counts(tokens, waited - self._wait_seen, count)
        self._wait_seen = waited
        fingerprint = self._chain.update(global_digest)
        record: dict[str, Any] = {
            "step": step,
            "global_digest": global_digest,
            "data_fingerprint": fingerprint,
            "tokens": tokens,
            "data_wait_s": round(wait_s, 6),
            "dp_size": self.dp_world_size,
        }
        if count:  # shards read (once per segment) and records read and removed, all ranks
            merged: dict[str, dict[str, Any]] = {}
            gathered = link.group.gather_objects((new_shards, reading))
            for rank_shards, _ in gathered:
                for name, shards in rank_shards.items():
                    merged.setdefault(name, {}).update(shards)
            if merged:
                record["shards_read"] = {n: dict(sorted(s.items())) for n, s in merged.items()}
            record.update(ReadingCounts.merged([r for _, r in gathered]))
        link.steps.write(record)
        link.metrics.log({"zephon/tokens": tokens, "zephon/data_wait_s": wait_s}, step)

    def _shards_read_since_last_step(self) -> dict[str, dict[str, Any]]:
        """The shards this rank read (and hashed) since the previous step's record."""
        new = self.pipeline.shards_read(since=self._shards_recorded)
        # Counted from what was returned: a shard a background thread reads meanwhile comes
        # with the next step.
        for name, shards in new.items():
            self._shards_recorded[name] = self._shards_recorded.get(name, 0) + len(shards)
        return new

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The merged state of all ranks, identical on every rank (a collective once iterating).

        Before iteration (DCP asks for a template to load into) it is the restored state,
        or an empty placeholder.
        """
        if not self._iterated:
            return {STATE_KEY: json.dumps(self._restored) if self._restored else ""}
        assert self._link is not None
        merged = merge_states(self._link.group.gather_objects(self.pipeline.state_dict()))
        state = {
            "format": STATE_FORMAT,
            "pipeline": merged,
            "data_fingerprint": self._chain.hexdigest,
        }
        return {STATE_KEY: json.dumps(state, sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a state saved by any dp size; refuse any other state, naming why."""
        saved = state_dict.get(STATE_KEY)
        if not saved:
            raise StateError(_describe_foreign_state(state_dict))
        state = json.loads(saved)
        if state.get("format") != STATE_FORMAT:
            raise StateError(
                f"the checkpoint's data state has format {state.get('format')!r}; this data "
                f"loader reads {STATE_FORMAT!r}"
            )
        self.pipeline.load_state_dict(state["pipeline"])  # refuses another contract, naming fields
        self._chain = DigestChain(state["data_fingerprint"], int(state["pipeline"]["step"]))
        self._restored = state

    def close(self) -> None:
        """Stop the pipeline's workers."""
        self.pipeline.close()


_COUNTED = ("records_read", "overlapping", "repeated", "ran_out")
"""Per-dataset counts of the pipeline's stats a step's record carries (with ``removed``)."""


class ReadingCounts:
    """What a rank read and removed since the step before: the ``records_read``,
    ``overlapping``, ``repeated``, ``ran_out`` and ``removed`` of a step's record
    (``steps.jsonl``), per dataset, summed over ranks."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def since_last_step(self, stats: dict[str, Any]) -> dict[str, int]:
        """``{"<count>/<dataset>": n, "removed/<dataset>/<step>": n}`` since the last call
        (``<count>``: each of :data:`_COUNTED`)."""
        now = {f"{kind}/{d}": n for kind in _COUNTED for d, n in stats[kind].items()}
        for dataset, by_step in stats["removed"].items():
            now.update({f"removed/{dataset}/{step}": n for step, n in by_step.items()})
        delta = {k: n - self._seen.get(k, 0) for k, n in now.items() if n != self._seen.get(k, 0)}
        self._seen = now
        return delta

    @staticmethod
    def merged(ranks: list[dict[str, int]]) -> dict[str, Any]:
        """The ranks' counts as a step record's ``records_read``, ``overlapping``,
        ``repeated``, ``ran_out`` and ``removed`` (absent: 0)."""
        total: dict[str, int] = {}
        for counts in ranks:
            for key, n in counts.items():
                total[key] = total.get(key, 0) + n
        record: dict[str, Any] = {}
        for key, n in sorted(total.items()):
            kind, dataset, *step = key.split("/")
            if kind in _COUNTED:
                record.setdefault(kind, {})[dataset] = n
            else:
                record.setdefault("removed", {}).setdefault(dataset, {})[step[0]] = n
        return record


def check_checkpoint(checkpoint_id: str) -> None:
    """Raise StateError, naming what it holds instead, unless the DCP checkpoint at
    ``checkpoint_id`` holds a Zephon data state (remote checkpoints are not inspected)."""
    if not os.path.isdir(checkpoint_id):
        return
    prefix = f"{DATALOADER}."
    metadata = FileSystemReader(checkpoint_id).read_metadata()
    keys = [k.removeprefix(prefix) for k in metadata.state_dict_metadata if k.startswith(prefix)]
    if STATE_KEY not in keys:
        raise StateError(f"{checkpoint_id}: {_describe_foreign_state(keys)}")


def _describe_foreign_state(state: Iterable[str]) -> str:
    keys = sorted(state)
    if any(k.startswith("dp_rank_") for k in keys) or "world_size" in keys:
        return (
            f"the checkpoint's data state was saved by TorchTitan's stock data loader (keys "
            f"{keys}): it holds per-rank reader positions, not Zephon lanes, so the lane "
            "pipeline cannot continue that data. Resume with the loader the run was trained "
            "with, or start a new run."
        )
    return (
        f"the checkpoint has no Zephon data state (dataloader keys {keys}, expected "
        f"'{STATE_KEY}'); resume from a checkpoint saved by the Zephon data loader"
    )
