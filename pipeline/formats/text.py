"""``TextFormat``: a plain UTF-8 text file is one document."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.formats.shard_format import FormatName, ReadOnlyFile, read_utf8_ranges
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason


class TextFormat:
    """A plain UTF-8 text file is one document; an empty file has no records."""

    name = FormatName.TEXT

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index ``path`` as a single record (``field`` does not apply)."""
        data = path.read_bytes()
        skips = SkipCounter()
        if not data:
            return skips.index([], [], [])
        try:
            data.decode()
        except UnicodeDecodeError as e:
            skips.add(SkipReason.INVALID_UTF8, [data.count(b"\n", 0, e.start) + 1])
            return skips.index([], [], [])
        return skips.index([0], [len(data)], [len(data)])

    def open(self, path: Path) -> ReadOnlyFile:
        """Open ``path`` for ``read``."""
        return ReadOnlyFile(path)

    def read(
        self, handle: ReadOnlyFile, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """The document's text for each row; ``None`` if it is no longer UTF-8."""
        return read_utf8_ranges(handle, index, rows)
