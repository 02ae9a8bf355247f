"""``TokenStore``: records' tokens on disk, under a key made of what they are made from.

An entry is a folder named by its key (the shard's content fingerprint, the tokenizer's and
the processing chain's: never a path). It holds segments, each a whole file of some of the
shard's records: their rows, token ids, and what the chain made of them. A segment is
written to a temporary file and renamed into place (``atomic_write``), and carries a CRC-32
of its bytes that a reader checks before using it, so neither a killed writer nor a torn or
damaged file is ever read as records. Writers never share a file: two runs filling one entry at once each
add their own segment (a record both tokenized is the same in both). The store is bounded:
``evict`` removes the least recently used entries until it fits. Any failure to write (a
full disk, a read-only folder) is reported to the caller, which goes on without the cache.

Design: docs/design/pipeline_token_cache.md
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.io.atomic import atomic_write

SEGMENT_MAGIC = b"ZTOKSEG1"
_HEADER = struct.Struct("<8sQQ")  # magic, records, tokens
_TRAILER = struct.Struct("<I4s")  # CRC-32 of everything before it, end mark
_END = b"ZEND"
KEY_VERSION = "zephon-token-cache-v1"
STALE_TMP_S = 3600
"""Age past which ``evict`` removes a temporary file (its writer was killed)."""


def entry_key(shard_fingerprint: str, tokenizer_fingerprint: str, chain_fingerprint: str) -> str:
    """The key of one shard's entry: SHA-256 of the three content fingerprints."""
    text = f"{KEY_VERSION}\0{shard_fingerprint}\0{tokenizer_fingerprint}\0{chain_fingerprint}"
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Segment:
    """Some records of one shard, as stored (arrays may be views of a mapped file)."""

    rows: np.ndarray
    """int64, the records' rows in their shard (unique)."""
    lengths: np.ndarray
    """int64, tokens of each record (0 for a dropped one)."""
    dropped_by: np.ndarray
    """int16, the chain step that dropped each record, or ``KEPT``."""
    overlapping: np.ndarray
    """bool, kept and sharing a word n-gram with a scored document."""
    tokens: np.ndarray
    """uint32, every kept record's ids, in row order of this segment."""

    def to_bytes(self) -> bytes:
        """The segment file's bytes: header, arrays, trailer with the CRC-32."""
        body = b"".join(
            (
                _HEADER.pack(SEGMENT_MAGIC, len(self.rows), len(self.tokens)),
                self.rows.astype("<i8").tobytes(),
                self.lengths.astype("<i8").tobytes(),
                self.tokens.astype("<u4").tobytes(),
                self.dropped_by.astype("<i2").tobytes(),
                self.overlapping.astype(np.uint8).tobytes(),
            )
        )
        return body + _TRAILER.pack(zlib.crc32(body), _END)

    @classmethod
    def from_buffer(cls, buffer: memoryview) -> Segment | None:
        """The segment in ``buffer``, or None if it is not a whole, undamaged segment."""
        if len(buffer) < _HEADER.size + _TRAILER.size:
            return None
        magic, records, tokens = _HEADER.unpack_from(buffer)
        body_size = _HEADER.size + records * 19 + tokens * 4
        if magic != SEGMENT_MAGIC or len(buffer) != body_size + _TRAILER.size:
            return None
        crc, end = _TRAILER.unpack_from(buffer, body_size)
        if end != _END or zlib.crc32(buffer[:body_size]) != crc:
            return None
        at = _HEADER.size

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal at
            array = np.frombuffer(buffer, dtype=dtype, count=count, offset=at)
            at += array.nbytes
            return array

        rows, lengths = take("<i8", records), take("<i8", records)
        ids = take("<u4", tokens)
        dropped_by, overlapping = take("<i2", records), take("u1", records).view(bool)
        if int(lengths.sum()) != tokens or (lengths < 0).any():
            return None
        return cls(rows, lengths, dropped_by, overlapping, ids)


class TokenStore:
    """The entries under ``root``, at most ``max_bytes`` of them after each ``evict``."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def entry_dir(self, key: str) -> Path:
        """The folder of entry ``key``."""
        return self.root / key[:2] / key

    def segments(self, key: str, *, known: frozenset[str] = frozenset()) -> dict[str, Segment]:
        """Entry ``key``'s whole, undamaged segments by file name, except those ``known``
        (a caller's already); marks the entry used now (for ``evict``)."""
        folder = self.entry_dir(key)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".seg"))
            os.utime(folder)
        except OSError:  # no entry yet, or evicted meanwhile
            return {}
        found = {}
        for name in names:
            if name not in known and (segment := _read(folder / name)) is not None:
                found[name] = segment
        return found

    def add(self, key: str, segment: Segment) -> str:
        """Write ``segment`` into entry ``key`` whole or not at all; its file name. Raises
        OSError when it cannot (the disk is full, the folder is read-only)."""
        name = f"{os.getpid()}-{time.time_ns()}.seg"
        # A temporary file renamed into place, readable by a team's other users.
        atomic_write(self.entry_dir(key) / name, lambda f: f.write(segment.to_bytes()))
        return name

    def replace(self, key: str, names: list[str], merged: Segment) -> None:
        """Swap the segments ``names`` of entry ``key`` for one ``merged`` segment (written
        first, so a reader finds the records in one or the other)."""
        self.add(key, merged)
        for name in names:
            (self.entry_dir(key) / name).unlink(missing_ok=True)

    def size(self) -> int:
        """Bytes of all segments in the store."""
        return sum(size for _, size, _ in self._entries())

    def evict(self) -> int:
        """Remove the least recently used entries until the store holds at most
        ``max_bytes``; the number removed."""
        entries = sorted(self._entries(), key=lambda e: e[2])  # oldest use first
        total = sum(size for _, size, _ in entries)
        removed = 0
        for folder, size, _ in entries:
            if total <= self.max_bytes:
                break
            shutil.rmtree(folder, ignore_errors=True)
            total -= size
            removed += 1
        return removed

    def _entries(self) -> list[tuple[Path, int, float]]:
        """Each entry's folder, segment bytes and last use."""
        found = []
        for prefix in _listdir(self.root):
            for key in _listdir(self.root / prefix):
                folder = self.root / prefix / key
                try:
                    used = folder.stat().st_mtime
                    size = sum(e.stat().st_size for e in os.scandir(folder))
                    for left in folder.glob(".*.tmp"):  # by writers killed an hour ago or more
                        if left.stat().st_mtime < time.time() - STALE_TMP_S:
                            left.unlink(missing_ok=True)
                except OSError:  # removed meanwhile
                    continue
                found.append((folder, size, used))
        return found


def _read(path: Path) -> Segment | None:
    """The segment file at ``path`` (read whole: a mapping would hold a descriptor per
    segment), or None if it is gone or damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return Segment.from_buffer(memoryview(data))


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
