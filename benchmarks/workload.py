"""The benchmark workload: one real corpus, the same for every variant.

``prepare_workload`` builds (or reuses) the local corpus of :mod:`demo.local_corpus`,
indexes it with Zephon's ``Dataset`` and counts its gpt2 tokens per domain once, so that the
pipeline's mixture is each domain's *natural* token share and its token budget the corpus's
token count: a pipeline run reads about the documents one pass of the baselines reads.

Design: docs/design/benchmarks_throughput.md
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from demo.local_corpus import MANIFEST_NAME, build_local_corpus
from pipeline import Dataset, WorkSource, load_tokenizer

TOKENIZER_ID = "gpt2"
"""Tokenizer of every variant (tiktoken ``r50k_base``, provisioned by ``scripts/setup.sh``)."""
SEQ_LEN = 2048
"""Sequence length T: inputs per sequence (each sequence holds T+1 tokens)."""
MICROBATCH = 8
"""Sequences per micro-batch / DataLoader batch."""
SEED = 0
"""Seed of the Zephon plan and shuffle."""
COUNT_BATCH = 1024
"""Texts per ``encode_ordinary_batch`` call when counting (bounds memory)."""
WORKLOAD_NAME = "workload.json"


@dataclass(frozen=True)
class Workload:
    """The corpus every variant reads, and what it contains."""

    work_dir: str
    """Benchmark work dir (corpus, caches, scratch files)."""
    shards: dict[str, list[str]]
    """Domain -> shard paths (JSONL.zst, JSONL.gz or Parquet)."""
    records: dict[str, int]
    """Domain -> usable records (as indexed by ``Dataset``)."""
    text_bytes: dict[str, int]
    """Domain -> UTF-8 text bytes of those records."""
    tokens: dict[str, int]
    """Domain -> gpt2 tokens of those records (``encode_ordinary``, no EOS)."""
    corpus_key: str
    """sha256 of the corpus manifest; identifies the corpus content and build."""

    @property
    def total_tokens(self) -> int:
        """gpt2 tokens of the whole corpus (one pass, no EOS)."""
        return sum(self.tokens.values())

    @property
    def mixture(self) -> dict[str, float]:
        """Each domain's natural token share (the Zephon mixture of every benchmark)."""
        return {name: n / self.total_tokens for name, n in self.tokens.items()}

    @property
    def cache_dir(self) -> Path:
        """Zephon's shard index cache for this workload."""
        return Path(self.work_dir) / "cache"

    def save(self, path: Path) -> None:
        """Write the workload as JSON."""
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> Workload:
        """Read a workload written by :meth:`save`."""
        return cls(**json.loads(path.read_text()))


def open_datasets(workload: Workload) -> list[Dataset]:
    """One Zephon ``Dataset`` per domain, sorted by name, sharing the workload's index cache."""
    return [
        Dataset(name, workload.shards[name], cache_dir=workload.cache_dir)
        for name in sorted(workload.shards)
    ]


def open_source(workload: Workload) -> WorkSource:
    """The Zephon plan over the workload: natural token shares, seed ``SEED``, not calibrated."""
    return WorkSource(open_datasets(workload), workload.mixture, seed=SEED)


def iter_domain_texts(datasets: list[Dataset]) -> Iterator[tuple[str, list[str]]]:
    """``(domain, texts)`` for every dataset: all usable records, in record order."""
    for ds in datasets:
        yield ds.name, ds.read_texts(range(ds.num_records))


def corpus_texts(workload: Workload) -> list[str]:
    """Every document of the workload, domain by domain in name order (read from the shards)."""
    return [text for _, texts in iter_domain_texts(open_datasets(workload)) for text in texts]


def count_tokens(texts: list[str], num_threads: int = 2) -> int:
    """gpt2 tokens of ``texts`` (``encode_ordinary``), encoded in batches of ``COUNT_BATCH``."""
    encoding = load_tokenizer(TOKENIZER_ID).encoding
    return sum(
        len(ids)
        for start in range(0, len(texts), COUNT_BATCH)
        for ids in encoding.encode_ordinary_batch(
            texts[start : start + COUNT_BATCH], num_threads=num_threads
        )
    )


def prepare_workload(work_dir: Path, max_bytes_per_domain: int) -> Workload:
    """Build or reuse the corpus and its token counts under ``work_dir``; return the workload.

    Not timed by any benchmark: the corpus build (~10 s), the shard indexes and
    the token count (~10 s for 50 MB) are paid once per corpus.
    """
    work_dir = work_dir.resolve()
    corpus = build_local_corpus(work_dir / "corpus", max_bytes_per_domain=max_bytes_per_domain)
    manifest = (work_dir / "corpus" / MANIFEST_NAME).read_bytes()
    key = hashlib.sha256(manifest).hexdigest()
    path = work_dir / WORKLOAD_NAME
    if path.is_file():
        cached = Workload.load(path)
        if cached.corpus_key == key and cached.work_dir == str(work_dir):
            return cached
    shards = {name: [str(p) for p in paths] for name, paths in sorted(corpus.items())}
    draft = Workload(str(work_dir), shards, {}, {}, {}, key)
    records, text_bytes, tokens = {}, {}, {}
    datasets = open_datasets(draft)
    for ds, (name, texts) in zip(datasets, iter_domain_texts(datasets), strict=True):
        records[name] = ds.num_records
        text_bytes[name] = int(ds.record_bytes.sum())
        tokens[name] = count_tokens(texts)
    workload = Workload(str(work_dir), shards, records, text_bytes, tokens, key)
    workload.save(path)
    return workload
