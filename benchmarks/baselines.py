"""Baselines: the ceiling (raw tiktoken) and the loaders users would pick instead of Zephon.

``measure_raw`` (``encode_ordinary_batch`` on texts already in memory),
``measure_dataloader`` (a hand-written PyTorch ``IterableDataset``) and
``measure_torchtitan`` (TorchTitan's ``HuggingFaceTextDataLoader``) all use Zephon's gpt2
encoding object and read the same documents (:mod:`benchmarks.workload`).

Design: docs/design/benchmarks_throughput.md
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import torch
import zstandard
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from benchmarks.timing import Stopwatch, Throughput, time_batches
from benchmarks.workload import (
    COUNT_BATCH,
    MICROBATCH,
    SEED,
    SEQ_LEN,
    TOKENIZER_ID,
    Workload,
    corpus_texts,
)
from pipeline import load_tokenizer

HF_DATASET_NAME = "zephon_bench"
"""Name under which the corpus is registered in TorchTitan's ``DATASETS`` table."""
HF_SHARDS_PER_WORKER = 8
"""Shards of the HuggingFace iterable dataset per DataLoader worker (at least one worker)."""


def measure_raw(workload: Workload, num_threads: int) -> Throughput:
    """Raw tiktoken over the whole corpus (the ceiling of any gpt2 loader on this machine)."""
    texts = corpus_texts(workload)
    encoding = load_tokenizer(TOKENIZER_ID).encoding
    tokens = 0
    with Stopwatch() as watch:
        for start in range(0, len(texts), COUNT_BATCH):
            batch = texts[start : start + COUNT_BATCH]
            tokens += sum(map(len, encoding.encode_ordinary_batch(batch, num_threads=num_threads)))
    return watch.result(tokens, documents=len(texts), num_threads=num_threads)


# -- a plain PyTorch DataLoader ------------------------------------------------------------------


def split_shards(paths: list[str], worker: int, num_workers: int) -> list[str]:
    """The shards of ``worker``: largest first, each to the worker with the fewest bytes so far.

    Balancing by file size instead of ``paths[worker::num_workers]`` gives the baseline
    its best case: on this corpus the plain stride leaves one worker ~40% more bytes.
    """
    loads = [0] * num_workers
    mine = []
    for path in sorted(paths, key=lambda p: (-os.path.getsize(p), p)):
        target = loads.index(min(loads))
        loads[target] += os.path.getsize(path)
        if target == worker:
            mine.append(path)
    return mine


def iter_shard_texts(path: str) -> Iterator[str]:
    """The non-empty ``text`` fields of a JSONL(.gz/.zst) or Parquet shard, in file order."""
    if path.endswith(".parquet"):
        for batch in pq.ParquetFile(path).iter_batches(columns=["text"], batch_size=1024):
            yield from (t for t in batch.column(0).to_pylist() if t)
        return
    with open(path, "rb") as raw:
        if path.endswith(".zst"):
            stream: io.BufferedIOBase = io.BufferedReader(
                zstandard.ZstdDecompressor().stream_reader(raw)
            )
        elif path.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=raw)
        else:
            stream = raw
        for line in stream:
            if line.strip():
                text = orjson.loads(line).get("text")
                if isinstance(text, str) and text:
                    yield text


class ShardTokenStream(IterableDataset):
    """Shards -> gpt2 tokens + EOS -> ``seq_len + 1``-token int64 tensors (see the design doc)."""

    def __init__(self, shards: list[str], seq_len: int) -> None:
        self.shards = shards
        self.seq_len = seq_len

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        shards = (
            self.shards if info is None else split_shards(self.shards, info.id, info.num_workers)
        )
        encoding = load_tokenizer(TOKENIZER_ID).encoding
        eos = encoding.eot_token
        span = self.seq_len + 1
        buffer: list[int] = []
        for path in shards:
            for text in iter_shard_texts(path):
                buffer.extend(encoding.encode_ordinary(text))
                buffer.append(eos)
                while len(buffer) >= span:
                    yield torch.tensor(buffer[:span], dtype=torch.int64)
                    del buffer[: self.seq_len]


def measure_dataloader(workload: Workload, num_workers: int) -> Throughput:
    """A hand-written ``IterableDataset`` in a ``DataLoader`` (``num_workers`` processes)."""
    shards = [p for name in sorted(workload.shards) for p in workload.shards[name]]
    loader = DataLoader(
        ShardTokenStream(shards, SEQ_LEN), batch_size=MICROBATCH, num_workers=num_workers
    )
    result = time_batches(loader, lambda batch: batch.shape[0] * SEQ_LEN)
    result.extra.update(num_workers=num_workers, shards=len(shards))
    return result


# -- TorchTitan's HuggingFace text loader --------------------------------------------------------


def _hf_copy_path(workload: Workload) -> Path:
    return Path(workload.work_dir) / "hf" / f"corpus-{workload.corpus_key[:16]}"


def prepare_torchtitan(workload: Workload) -> dict[str, str]:
    """Write the corpus as a HuggingFace Arrow dataset (``save_to_disk``) unless it exists.

    Rows are the workload's documents in a seeded random order. Run once before the
    measurements (untimed): it plays the part of a user's one-off ``load_dataset``
    conversion, as Zephon's shard indexes do.
    """
    from datasets import Dataset as HFDataset

    path = _hf_copy_path(workload)
    if not path.is_dir():
        texts = corpus_texts(workload)
        order = np.random.default_rng(SEED).permutation(len(texts))
        scratch = path.with_name(path.name + ".tmp")
        shutil.rmtree(scratch, ignore_errors=True)
        HFDataset.from_dict({"text": [texts[i] for i in order]}).save_to_disk(str(scratch))
        scratch.rename(path)
    return {"path": str(path)}


def _load_iterable(path: str, num_shards: int) -> Any:
    """TorchTitan ``DatasetConfig.loader``: the Arrow copy as a sharded HF ``IterableDataset``."""
    from datasets import load_from_disk

    return load_from_disk(path).to_iterable_dataset(num_shards=num_shards)


def _sample_text(sample: dict[str, Any]) -> str:
    """TorchTitan ``DatasetConfig.sample_processor``."""
    return sample["text"]


def gpt2_for_torchtitan() -> Any:
    """A TorchTitan ``BaseTokenizer`` around Zephon's gpt2 tiktoken encoding."""
    from torchtitan.components.tokenizer import BaseTokenizer

    class TiktokenGpt2(BaseTokenizer):
        """``encode(text, add_bos, add_eos)``: gpt2 has no BOS; EOS is ``<|endoftext|>``."""

        def __init__(self) -> None:
            super().__init__()
            self._encoding = load_tokenizer(TOKENIZER_ID).encoding
            self.eos_id = self._encoding.eot_token
            self.bos_id = None

        def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
            ids = self._encoding.encode_ordinary(text)
            if add_eos:
                ids.append(self.eos_id)
            return ids

        def decode(self, ids: list[int]) -> str:
            return self._encoding.decode(ids)

        def get_vocab_size(self) -> int:
            return self._encoding.n_vocab

    return TiktokenGpt2()


def measure_torchtitan(workload: Workload, num_workers: int) -> Throughput:
    """TorchTitan 0.3.0's ``HuggingFaceTextDataLoader`` over the same documents."""
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS, HuggingFaceTextDataLoader

    path = prepare_torchtitan(workload)["path"]
    num_shards = HF_SHARDS_PER_WORKER * max(1, num_workers)
    DATASETS[HF_DATASET_NAME] = DatasetConfig(
        path=path,
        loader=partial(_load_iterable, num_shards=num_shards),
        sample_processor=_sample_text,
    )
    config = HuggingFaceTextDataLoader.Config(
        dataset=HF_DATASET_NAME, dataset_path=path, infinite=False, num_workers=num_workers
    )
    loader = config.build(
        dp_world_size=1,
        dp_rank=0,
        tokenizer=gpt2_for_torchtitan(),
        seq_len=SEQ_LEN,
        local_batch_size=MICROBATCH,
        snapshot_every_n_steps=None,
    )
    result = time_batches(loader, lambda batch: batch[1].numel())
    result.extra.update(num_workers=num_workers, hf_shards=num_shards)
    return result
