"""``MegatronFormat``: documents of a Megatron/NeMo indexed dataset, read as token ids.

A shard is one ``.bin`` of token ids with its ``.idx`` beside it (the same name), as
``megatron.core.datasets.indexed_dataset.IndexedDatasetBuilder`` writes them. The ``.idx``:
the magic ``MMIDIDX\\x00\\x00``, a uint64 version (1), a uint8 dtype code, uint64 sequence and
document counts, then the sequences' lengths (int32, in tokens), their byte pointers into the
``.bin`` (int64) and the document indices (int64: ``[0, end of document 0, ...]`` in
sequences). A record is one document: its sequences are contiguous in the ``.bin``, read with
one ``pread``; a trailing EOS (Megatron's ``--append-eod``) is not part of it, since the packer
puts EOS between documents. The shard's fingerprint covers both files.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import DataError
from pipeline.formats.shard_format import (
    FormatName,
    TokenFile,
    TokenFiles,
    read_token_ranges,
    scan_tokens,
)
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
_HEADER = struct.Struct("<9sQBQQ")
"""Magic, version, dtype code, sequence count, document count."""
DTYPES = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    8: np.dtype("<u2"),
}
"""Megatron's dtype codes of integer ids (6 and 7, floats, are not token ids)."""


def index_file(bin_path: Path) -> Path:
    """The ``.idx`` beside a ``.bin``."""
    return bin_path.with_suffix(".idx")


def combined_fingerprint(bin_sha256: str, idx_sha256: str) -> str:
    """A Megatron shard's content fingerprint: SHA-256 over both files' SHA-256s."""
    return hashlib.sha256(f"megatron\0{bin_sha256}\0{idx_sha256}".encode()).hexdigest()


@dataclass(frozen=True)
class _Header:
    """What an ``.idx`` header says, checked against the sizes of both files."""

    dtype: np.dtype
    sequences: int
    documents: int
    """Entries of the document indices: one more than the documents."""


class MegatronFormat:
    """Documents of a Megatron indexed dataset (module docstring); ``path`` is the ``.bin``.

    Ids must be below the declared tokenizer's vocabulary; documents of no tokens are bad
    records (``empty_document``). A missing or damaged ``.idx``, or a ``.bin`` whose size is
    not the one the ``.idx`` gives, is a ``DataError`` naming the file.
    """

    name = FormatName.MEGATRON

    def __init__(self, tokens: TokenFiles) -> None:
        self.tokens = tokens

    def check(self, path: Path) -> None:
        """The plan's check, reading the ``.idx`` header and last entries only."""
        self._header(path)

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every document of ``path`` (``field`` does not apply)."""
        header = self._header(path)
        n, d = header.sequences, header.documents
        raw = index_file(path).read_bytes()
        lengths = np.frombuffer(raw, "<i4", n, _HEADER.size).astype(np.int64)
        pointers = np.frombuffer(raw, "<i8", n, _HEADER.size + 4 * n)
        documents = np.frombuffer(raw, "<i8", d, _HEADER.size + 12 * n)
        width = header.dtype.itemsize
        expected = np.concatenate([[0], np.cumsum(lengths * width)[:-1]]) if n else lengths
        bounds_ok = d >= 1 and documents[0] == 0 and documents[-1] == n
        if (lengths < 0).any() or (pointers != expected).any() or not bounds_ok:
            raise self._damaged(path, "its sequences are not laid out one after the other")
        if (np.diff(documents) < 0).any():
            raise self._damaged(path, "its document indices are out of order")
        starts = np.concatenate([[0], np.cumsum(lengths)])  # in tokens
        first, end = starts[documents[:-1]], starts[documents[1:]]
        eos = scan_tokens(path, header.dtype, self.tokens)
        counts = end - first - np.isin(end - 1, eos) * (end > first)
        skips = SkipCounter()
        empty = counts == 0
        if empty.any():
            skips.add(SkipReason.EMPTY_DOCUMENT, np.flatnonzero(empty) + 1)
        return skips.index(first[~empty] * width, counts[~empty], counts[~empty])

    def open(self, path: Path) -> TokenFile:
        """Open the ``.bin`` for ``read_tokens``, with the dtype its ``.idx`` gives."""
        return TokenFile(path, self._header(path).dtype)

    def read_tokens(
        self, handle: TokenFile, index: ShardIndex, rows: np.ndarray
    ) -> list[np.ndarray]:
        """Token ids of ``rows`` (uint32, no trailing EOS)."""
        return read_token_ranges(handle, index, rows)

    def _header(self, path: Path) -> _Header:
        """The ``.idx`` header of ``path``, checked against both files' sizes."""
        idx = index_file(path)
        if not idx.is_file():
            raise DataError(
                f"{path}: a Megatron .bin without its index {idx.name} beside it; copy the "
                ".idx next to it (or give files of another format another suffix)"
            )
        with open(idx, "rb") as f:
            head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            raise self._damaged(idx, f"{len(head)} bytes, shorter than its header")
        magic, version, code, n, d = _HEADER.unpack(head)
        if magic != MAGIC:
            raise self._damaged(idx, f"its magic is {magic!r}, not {MAGIC!r}")
        if version != VERSION:
            raise self._damaged(idx, f"version {version}; only version {VERSION} is read")
        if code not in DTYPES:
            raise self._damaged(
                idx, f"dtype code {code} is not one of integer ids {sorted(DTYPES)}"
            )
        size = idx.stat().st_size
        if size != _HEADER.size + 12 * n + 8 * d:
            raise self._damaged(
                idx,
                f"{size} bytes where {n} sequences and {d} document entries take "
                f"{_HEADER.size + 12 * n + 8 * d} (a multimodal index, or cut)",
            )
        header = _Header(DTYPES[code], n, d)
        expected = self._bin_bytes(idx, header)
        actual = path.stat().st_size
        if actual != expected:
            raise DataError(
                f"{path}: {actual} bytes where its index {idx.name} gives {expected}: the .bin "
                "is cut, or not the one its .idx was written with; copy both files again"
            )
        return header

    @staticmethod
    def _bin_bytes(idx: Path, header: _Header) -> int:
        """The ``.bin`` size the ``.idx`` gives: its last sequence's pointer and length."""
        n = header.sequences
        if n == 0:
            return 0
        fd = os.open(idx, os.O_RDONLY)
        try:
            (length,) = struct.unpack("<i", os.pread(fd, 4, _HEADER.size + 4 * (n - 1)))
            (pointer,) = struct.unpack("<q", os.pread(fd, 8, _HEADER.size + 4 * n + 8 * (n - 1)))
        finally:
            os.close(fd)
        return pointer + length * header.dtype.itemsize

    @staticmethod
    def _damaged(file: Path, what: str) -> DataError:
        return DataError(
            f"{file}: not a valid Megatron index ({what}); copy it again, or write the "
            "dataset again with megatron-core's IndexedDatasetBuilder"
        )
