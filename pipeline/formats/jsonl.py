"""``JsonlFormat``: one JSON object per line, its text in one field."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import orjson

from pipeline.formats.shard_format import READ_BLOCK_BYTES, FormatName, ReadOnlyFile, utf8_len
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason


class JsonlFormat:
    """One JSON object per line; the record's text is ``obj[field]``."""

    name = FormatName.JSONL

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every line of ``path``; bad lines are counted, not indexed."""
        offsets: list[int] = []
        lengths: list[int] = []
        text_bytes: list[int] = []
        skips = SkipCounter()
        with open(path, "rb") as f:
            for lineno, (offset, line) in enumerate(_iter_lines(f), start=1):
                text, reason = _parse_jsonl_line(line, field)
                if reason is None:
                    offsets.append(offset)
                    lengths.append(len(line))
                    text_bytes.append(utf8_len(text))
                else:
                    skips.add(reason, [lineno])
        return skips.index(offsets, lengths, text_bytes)

    def open(self, path: Path) -> ReadOnlyFile:
        """Open ``path`` for ``read``."""
        return ReadOnlyFile(path)

    def read(
        self, handle: ReadOnlyFile, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """Texts of ``rows``; ``None`` where the indexed line no longer parses."""
        fd = handle.fd
        return [
            _parse_jsonl_line(os.pread(fd, length, offset), field)[0]
            for offset, length, _ in index.table[rows].tolist()  # one gather of the rows
        ]


def _iter_lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, line without the newline)`` for every line of ``f``."""
    offset = 0
    rest = b""
    while block := f.read(READ_BLOCK_BYTES):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()  # incomplete last line: completed by the next block
        for line in lines:
            yield offset, line
            offset += len(line) + 1
    if rest:
        yield offset, rest


def _parse_jsonl_line(line: bytes, field: str) -> tuple[str, None] | tuple[None, SkipReason]:
    """Return ``(text, None)`` for a usable line, else ``(None, skip reason)``."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # Only the failure path pays for working out why it failed.
        if not line.strip():
            return None, SkipReason.BLANK_LINE
        try:
            line.decode()
        except UnicodeDecodeError:
            return None, SkipReason.INVALID_UTF8
        return None, SkipReason.MALFORMED_JSON
    if type(obj) is not dict:
        return None, SkipReason.NOT_AN_OBJECT
    text = obj.get(field)
    if type(text) is not str:
        return None, SkipReason.MISSING_FIELD
    if not text:
        return None, SkipReason.EMPTY_DOCUMENT
    return text, None
