"""``ShardFormat``: what a dataset needs from a format, and what the formats share."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.errors import DataError
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
    MEGATRON = "megatron"
    """Megatron/NeMo indexed datasets: a ``.bin`` of token ids with its ``.idx`` beside it."""
    TOKEN_ARRAY = "token-array"
    """OLMo-core's token files: a raw array of token ids, documents ended by EOS (``.npy``)."""

    @property
    def pretokenized(self) -> bool:
        """Whether the format's records are token ids (read with ``read_tokens``), not text."""
        return self in (FormatName.MEGATRON, FormatName.TOKEN_ARRAY)


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


@dataclass(frozen=True)
class TokenFiles:
    """What reading a dataset's pre-tokenized files needs of their declared tokenizer."""

    eos_id: int
    """Ends documents: OLMo-core's separator; a document's trailing EOS is not a token of it."""
    vocab_size: int
    """Ids must be below it; a larger id means another tokenizer or a damaged file."""
    dtype: np.dtype | None = None
    """The token width of an OLMo-core file (Megatron's ``.idx`` gives its own); None:
    OLMo-core's rule, the narrowest unsigned integer holding every id of the vocabulary."""

    def array_dtype(self) -> np.dtype:
        """The token dtype of an OLMo-core file of this tokenizer (``get_dtype``'s rule)."""
        if self.dtype is not None:
            return self.dtype
        widths = [np.dtype(code) for code in ("u1", "<u2", "<u4", "<u8")]
        return next(w for w in widths if self.vocab_size - 1 <= np.iinfo(w).max)


class TokenFormat(Protocol):
    """What ``Dataset`` needs from a pre-tokenized format: ``ShardFormat``'s index and handle,
    and token ids instead of texts. ``ShardIndex.text_bytes`` holds each record's token count
    (so the plan's tokens per byte of such a dataset is exactly 1)."""

    name: FormatName

    def build_index(self, path: Path, field: str) -> ShardIndex: ...

    def open(self, path: Path) -> TokenFile: ...

    def read_tokens(
        self, handle: TokenFile, index: ShardIndex, rows: np.ndarray
    ) -> list[np.ndarray]:
        """Token ids (uint32, no EOS) of ``rows``; a shorter array where the file is cut."""
        ...

    def check(self, path: Path) -> None:
        """Plan-time checks reading a few bytes (sizes, headers): ``DataError`` naming the
        file and what to do."""
        ...


def read_token_ranges(handle: TokenFile, index: ShardIndex, rows: np.ndarray) -> list[np.ndarray]:
    """The ids at each row's (byte offset, token count) in the file, as uint32, one ``pread``
    each (the pre-tokenized formats)."""
    width = handle.dtype.itemsize
    ids = []
    for offset, count, _ in index.table[rows].tolist():
        data = os.pread(handle.fd, count * width, offset)
        # A file cut since it was indexed reads short, maybe inside an id: its whole ids.
        ids.append(np.frombuffer(data[: len(data) - len(data) % width], handle.dtype))
    return [i.astype(np.uint32) for i in ids]


def scan_tokens(path: Path, dtype: np.dtype, tokens: TokenFiles) -> np.ndarray:
    """Positions of every EOS among the ids of ``path``, read in blocks; ``DataError`` naming
    the file at an id outside the tokenizer's vocabulary."""
    found: list[np.ndarray] = []
    for base, block in _token_blocks(path, dtype):
        if len(block) and (int(block.max()) >= tokens.vocab_size or int(block.min()) < 0):
            at = int(np.argmax((block >= tokens.vocab_size) | (block < 0)))
            raise DataError(
                f"{path}: token {base + at} is id {int(block[at])}, not in the declared "
                f"tokenizer's vocabulary of {tokens.vocab_size}: the file is damaged, its dtype "
                "is not the one declared, or it was written by another tokenizer; declare the "
                "right tokenizer and dtype, or re-write the file"
            )
        found.append(base + np.flatnonzero(block == tokens.eos_id))
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _token_blocks(path: Path, dtype: np.dtype) -> Iterator[tuple[int, np.ndarray]]:
    """``(position of the block's first id, ids)`` blocks of ``path``'s ids."""
    per_block = READ_BLOCK_BYTES // dtype.itemsize
    done = 0
    with open(path, "rb") as f:
        while len(block := np.fromfile(f, dtype, per_block)):
            yield done, block
            done += len(block)


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


class TokenFile(ReadOnlyFile):
    """An open token file and the dtype of its ids."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        super().__init__(path)
        self.dtype = dtype
