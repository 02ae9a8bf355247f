"""The benchmark's data: the corpus, Zephon's held-out split of it, the stock JSON dataset.

:func:`prepare` builds them once per benchmark, with the Zephon run's data spec
(``data.json``); :meth:`Prepared.data_flags` is the one place that turns them into the
trainer's data flags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.dp_spread.design import GLOBAL_BATCH, LANES, SEQ_LEN
from demo.local_corpus import build_local_corpus
from orchestrator.experiment import DataSection, build_pipeline, write_data_spec
from pipeline import load_tokenizer

SHUFFLE_SEED = 0
"""Seed of the stock JSON dataset's row order."""


@dataclass(frozen=True)
class Prepared:
    """The corpus, the data spec of both loaders and what the training text holds."""

    domains: dict[str, list[str]]
    """Domain -> shard paths."""
    mixture: dict[str, float]
    """Natural token share of each domain's training records (Zephon's mixture)."""
    spec: str
    """The Zephon run's data spec (``data.json``: datasets, this mixture, held-out bytes)."""
    stock_dataset: str
    """Folder of the stock loader's ``train.json`` (training records, shuffled)."""
    holdout_bytes: int
    records: dict[str, dict[str, int]]
    """Domain -> {"train", "heldout"} record counts."""
    tokens: dict[str, int]
    """Domain -> gpt2 tokens of its training records (no EOS)."""
    heldout_bytes_actual: dict[str, int]

    def data_flags(self, loader: str, record_dir: Path) -> list[str]:
        """Every data flag of a ``loader`` run that records its rows in ``record_dir``.

        The data spec is the Zephon loader's own (``--dataloader.spec``); the stock trainer
        reads it as ``--heldout.spec``, only to evaluate the same held-out records.
        """
        if loader == "zephon":
            return ["--dataloader.record-dir", str(record_dir), "--dataloader.spec", self.spec]
        return [
            *("--dataloader.record-dir", str(record_dir)),
            *("--dataloader.dataset-path", self.stock_dataset),
            *("--heldout.spec", self.spec),
        ]


def prepare(work_dir: Path, corpus_bytes: int, holdout_bytes: int) -> Prepared:
    """Build the corpus, split it with Zephon's WorkSource, write the stock JSON dataset and
    the Zephon data spec."""
    corpus = build_local_corpus(work_dir / "corpus", max_bytes_per_domain=corpus_bytes)
    domains = {name: [str(p) for p in paths] for name, paths in sorted(corpus.items())}
    data = DataSection(
        datasets=domains,
        holdout_bytes=holdout_bytes,
        cache_dir=str(work_dir / "index-cache"),
        lanes=LANES,
        global_batch_size=GLOBAL_BATCH,
        seq_len=SEQ_LEN,
    )
    # which records are held out depends on the datasets and holdout_bytes, not the mixture
    source = build_pipeline(data, dp_size=1, dp_rank=0, microbatch_size=GLOBAL_BATCH).source
    tokenizer = load_tokenizer("gpt2")
    texts: list[str] = []
    tokens, records, heldout_bytes = {}, {}, {}
    for d, ds in enumerate(source.datasets):
        train, held = source.training_records(d), source.heldout_records(d)
        assert not np.intersect1d(train, held).size, "held-out records in the training set"
        assert len(train) + len(held) == ds.num_records
        domain_texts = ds.read_records(train)
        held_texts = set(ds.read_records(held))
        # A training record with the very text of a held-out one would leak it.
        domain_texts = [t for t in domain_texts if t not in held_texts]
        tokens[ds.name] = sum(len(ids) for ids in tokenizer.encode_batch(domain_texts))
        records[ds.name] = {"train": len(domain_texts), "heldout": len(held)}
        heldout_bytes[ds.name] = sum(len(t.encode()) for t in held_texts)
        texts += domain_texts
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(texts))
    content = "".join(json.dumps({"text": texts[i]}) + "\n" for i in order).encode()
    folder = work_dir / "stock-json"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.json"
    if not path.is_file() or path.read_bytes() != content:  # keep HF's cache valid otherwise
        path.write_bytes(content)
    total = sum(tokens.values())
    mixture = {name: round(n / total, 6) for name, n in tokens.items()}
    spec = work_dir / "data.json"
    write_data_spec(spec, replace(data, mixture=mixture))
    return Prepared(
        domains=domains,
        mixture=mixture,
        spec=str(spec),
        stock_dataset=str(folder),
        holdout_bytes=holdout_bytes,
        records=records,
        tokens=tokens,
        heldout_bytes_actual=heldout_bytes,
    )
