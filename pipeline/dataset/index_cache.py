"""``IndexCache``: what datasets keep under their ``cache_dir``, shared by later runs and
concurrent processes: shard fingerprints by file version, decompressed copies and shard
indexes, each written by atomic rename."""

from __future__ import annotations

import hashlib
import os
import re
import time
from contextlib import AbstractContextManager
from pathlib import Path

from pipeline import io
from pipeline.dataset.shard import file_version_key
from pipeline.filelock import file_lock
from pipeline.formats import Compression, ShardFormat, ShardIndex, decompress

INDEX_VERSION = "v2"  # a memory-mapped .npy table and a .json of skips (v1: one .npz)
_HEX64 = re.compile(r"[0-9a-f]{64}")
# A file modified within this window may be modified again without its
# (size, mtime) changing, so its fingerprint is not put in the stat cache.
_RACY_NS = 2_000_000_000


class IndexCache:
    """The cache directory of a dataset's shard indexes (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def lock(self, key: str) -> AbstractContextManager[None]:
        """An exclusive lock between processes, named ``key`` (one process of a node
        indexes a shard while the others wait for its cached index)."""
        return file_lock(self.directory / "locks" / key)

    def content_fingerprint(self, path: Path, st: os.stat_result) -> str:
        """SHA-256 of the file's bytes, remembered per (path, size, mtime, inode)."""
        entry = self.directory / "stat" / file_version_key(path, st)
        try:
            fp = entry.read_text()
            if _HEX64.fullmatch(fp):
                return fp
        except FileNotFoundError:
            pass
        with open(path, "rb") as f:
            fp = hashlib.file_digest(f, "sha256").hexdigest()
        if time.time_ns() - st.st_mtime_ns > _RACY_NS:
            io.atomic_write(entry, lambda out: out.write(fp.encode()))
        return fp

    def decompressed_copy(
        self, local: Path, compression: Compression, fp: str, *, root: Path
    ) -> Path:
        """Path of the decompressed copy of ``local`` (whose bytes hash to ``fp``) under
        ``root``, writing it if missing."""
        copy = root / "decompressed" / f"{fp}.jsonl"
        if not copy.exists():
            io.atomic_write(copy, lambda out: decompress(local, compression, out))
        return copy

    def shard_index(
        self, fmt: ShardFormat, *, fingerprint: str, field: str, read_path: Path | str
    ) -> ShardIndex:
        """The cached index of the shard whose bytes hash to ``fingerprint`` (memory-mapped),
        built by ``fmt`` from ``read_path`` and cached if missing or damaged."""
        field_hash = hashlib.sha256(field.encode()).hexdigest()[:16]
        stem = self.directory / "index" / f"{fingerprint}.{fmt.name}.{field_hash}.{INDEX_VERSION}"
        files = (stem.with_name(stem.name + ".npy"), stem.with_name(stem.name + ".json"))
        try:
            return ShardIndex.load(*files)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # missing, or damaged: build it and replace the entry
        return fmt.build_index(read_path, field).save(*files)
