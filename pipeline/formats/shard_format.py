"""``ShardFormat``: what a dataset needs from a format, and what the formats share."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.formats.shard_index import ShardIndex

READ_BLOCK_BYTES = 8 << 20
"""Read size of streaming passes over a file."""


class FormatName(StrEnum):
    """A shard format (part of each shard's entry in a dataset's fingerprints)."""

    JSONL = "jsonl"
    TEXT = "text"
    PARQUET = "parquet"
    ARROW = "arrow"
    """Arrow IPC streams or files, as Hugging Face ``datasets`` saves them."""
    MDS = "mds"
    """Mosaic Streaming shards."""


class ShardFormat(Protocol):
    """What ``Dataset`` needs from a format (see the design doc)."""

    name: FormatName

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index the shard at ``path`` (Parquet also takes a URL, read by range)."""
        ...

    def open(self, path: Path) -> Any:
        """A handle to pass to ``read`` (Parquet also takes a URL, read by range)."""
        ...

    def read(
        self, handle: Any, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]: ...


def utf8_len(text: str) -> int:
    """UTF-8 byte length of ``text``; skips encoding for ASCII (an O(1) check in CPython)."""
    return len(text) if text.isascii() else len(text.encode())


def read_utf8_ranges(handle: ReadOnlyFile, index: ShardIndex, rows: np.ndarray) -> list[str | None]:
    """The text at each row's (offset, length) in the file; ``None`` where it is no longer
    UTF-8 (the formats whose index holds byte ranges: plain text, MDS)."""
    texts: list[str | None] = []
    for r in rows:
        try:
            texts.append(os.pread(handle.fd, int(index.lengths[r]), int(index.offsets[r])).decode())
        except UnicodeDecodeError:
            texts.append(None)
    return texts


class ReadOnlyFile:
    """An open read-only file descriptor, closed when the last reference goes away.

    Readers use ``os.pread`` on it: no shared file position, so concurrent
    reads need no lock. Unlike an mmap, a file truncated under us gives a short
    read instead of a SIGBUS.
    """

    fd = -1  # stays -1 if os.open fails, so __del__ has nothing to close

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
