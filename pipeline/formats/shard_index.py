"""``ShardIndex``: where each usable record of one shard lives, and what was skipped."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.io import atomic_write

MAX_EXAMPLES = 3
"""Positions kept per skip reason."""
_Ints = Sequence[int] | np.ndarray


class SkipReason(StrEnum):
    """Why a record was skipped (the keys of ``ShardIndex.skipped``)."""

    BLANK_LINE = "blank_line"
    """Counted, but never an error or a warning."""
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    INVALID_UTF8 = "invalid_utf8"
    EMPTY_DOCUMENT = "empty_document"

    @property
    def description(self) -> str:
        """What is wrong with such a record, for error messages."""
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    SkipReason.BLANK_LINE: "the line is blank",
    SkipReason.MALFORMED_JSON: "the line is not valid JSON",
    SkipReason.NOT_AN_OBJECT: "the line is JSON but not an object",
    SkipReason.MISSING_FIELD: "the text field is missing or not a string",
    SkipReason.INVALID_UTF8: "the bytes are not valid UTF-8",
    SkipReason.EMPTY_DOCUMENT: "the text is empty",
}


@dataclass(frozen=True)
class ShardIndex:
    """Where each usable record of one shard lives, and what was skipped.

    ``table`` holds one int64 row ``(offset, length, text bytes)`` per usable record. For
    JSONL and text, offset and length are the byte range of the record (its line, or the
    whole file); for Parquet they are the row group and the row inside it. Text bytes are
    the UTF-8 length of the record's text. ``skipped`` counts bad records by reason;
    ``examples`` keeps up to three 1-based line (Parquet: row) numbers per reason. Paths
    are not stored, so an index stays valid when its file is renamed. A loaded index is
    memory-mapped: only the pages of the records read are brought into memory.
    """

    table: np.ndarray
    skipped: dict[str, int]
    examples: dict[str, list[int]]
    files: tuple[Path, Path] | None = None
    """The ``.npy`` table and ``.json`` metadata this index was loaded from or saved to."""

    def __len__(self) -> int:
        return len(self.table)

    @property
    def offsets(self) -> np.ndarray:
        """Byte offset (JSONL, text) or row group (Parquet) of each record."""
        return self.table[:, 0]

    @property
    def lengths(self) -> np.ndarray:
        """Byte length (JSONL, text) or row within its group (Parquet) of each record."""
        return self.table[:, 1]

    @property
    def text_bytes(self) -> np.ndarray:
        """UTF-8 length of each record's text."""
        return self.table[:, 2]

    def save(self, table_path: Path, meta_path: Path) -> ShardIndex:
        """Write the table (``.npy``, no pickles) and then its metadata, each by atomic
        rename; returns the index loaded from them (memory-mapped, ``files`` set)."""
        meta = json.dumps({"skipped": self.skipped, "examples": self.examples}).encode()
        atomic_write(table_path, lambda out: np.save(out, self.table, allow_pickle=False))
        atomic_write(meta_path, lambda out: out.write(meta))
        # The saved files, mapped: the table just built is not kept in anonymous memory.
        return ShardIndex.load(table_path, meta_path)

    @classmethod
    def load(cls, table_path: Path, meta_path: Path) -> ShardIndex:
        """Read an index written by ``save``, its table memory-mapped."""
        meta = json.loads(meta_path.read_bytes())
        # A plain ndarray view of the map: slicing a np.memmap runs Python code per view.
        table = np.asarray(np.load(table_path, mmap_mode="r", allow_pickle=False))
        if table.ndim != 2 or table.shape[1] != 3 or table.dtype != np.int64:
            raise ValueError(f"{table_path}: not a shard index table")
        return cls(table, meta["skipped"], meta["examples"], (table_path, meta_path))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # A process worker maps the cached files again instead of receiving a copy.
        if self.files is not None:
            return (ShardIndex.load, self.files)
        return (ShardIndex, (np.asarray(self.table), self.skipped, self.examples))


class SkipCounter:
    """Counts skipped records by reason and keeps the first few positions of each, while
    a format builds a ``ShardIndex``."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[int]] = {}

    def add(self, reason: SkipReason, positions: _Ints) -> None:
        """Count records skipped for ``reason`` at 1-based ``positions`` (lines or rows)."""
        self.counts[reason] = self.counts.get(reason, 0) + len(positions)
        kept = self.examples.setdefault(reason, [])
        kept.extend(int(p) for p in positions[: MAX_EXAMPLES - len(kept)])

    def index(self, offsets: _Ints, lengths: _Ints, text_bytes: _Ints) -> ShardIndex:
        """The index of the usable records given, with the skips counted so far."""
        columns = [np.asarray(values, dtype=np.int64) for values in (offsets, lengths, text_bytes)]
        table = np.stack(columns, axis=1) if len(columns[0]) else np.zeros((0, 3), np.int64)
        return ShardIndex(table, self.counts, self.examples)
