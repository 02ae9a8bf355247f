"""Shard files of every format for dataset tests, and a Dataset over them."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.dataset import Dataset

FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "txt"]
LONG_AGO_NS = 1_000_000_000 * 1_000_000_000  # an mtime old enough for the stat cache


def texts_for(shard: int, n: int) -> list[str]:
    """Varied texts: ASCII, multi-byte UTF-8, newlines, quotes."""
    return [f"shard {shard} rec {i} " + 'héllo ✓ 🎉\n"q"\t' * (i % 4) + "x" * i for i in range(n)]


def write_jsonl_lines(path: Path, lines: list[bytes | dict]) -> Path:
    """Write raw lines or objects, one a line, compressed as the file name says."""
    raw = b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in lines)
    if path.name.endswith(".gz"):
        raw = gzip.compress(raw)
    elif path.name.endswith(".zst"):
        raw = zstd_frames(raw)
    path.write_bytes(raw)
    return path


def zstd_frames(raw: bytes) -> bytes:
    """Two streamed frames without a content size, as many real .zst files are."""
    half = len(raw) // 2
    frames = []
    for part in (raw[:half], raw[half:]):
        buf = _Sink()
        with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
            w.write(part)
        frames.append(bytes(buf.data))
    assert zstandard.frame_content_size(frames[0]) == -1
    return b"".join(frames)


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> int:
        self.data += b
        return len(b)


def write_shards(root: Path, fmt: str, shards: int = 3, per_shard: int = 25) -> list[str]:
    """Shards of one format; returns all texts in global (sorted shard) order."""
    expected = []
    for s in range(shards):
        texts = texts_for(s, per_shard if fmt != "txt" else 1)
        expected += texts
        path = root / f"part-{s:02d}.{fmt}"
        if fmt == "parquet":
            pq.write_table(
                pa.table({"text": texts, "id": list(range(len(texts)))}), path, row_group_size=7
            )
        elif fmt == "txt":
            path.write_text(texts[0], encoding="utf-8")
        else:
            write_jsonl_lines(path, [{"id": i, "text": t} for i, t in enumerate(texts)])
    return expected


def make_dataset(tmp_path: Path, paths, **kwargs) -> Dataset:
    """A Dataset over ``paths`` (``name`` defaults to "ds") cached under ``tmp_path``."""
    return Dataset(kwargs.pop("name", "ds"), paths, cache_dir=tmp_path / "cache", **kwargs)


def set_old_mtime(*paths: Path) -> None:
    """Date the files long ago, so that their fingerprints go in the stat cache."""
    for p in paths:
        os.utime(p, ns=(LONG_AGO_NS, LONG_AGO_NS))
