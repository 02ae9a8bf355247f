"""``ParquetFormat``: rows of a Parquet file, its text in one string column; local, or
remote read in place by byte range."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import DataError
from pipeline.formats.shard_format import FormatName
from pipeline.formats.shard_index import ShardIndex, SkipCounter, SkipReason
from pipeline.formats.string_column import is_string, usable_rows
from pipeline.io import open_by_range

REMOTE_READ_BYTES = 64 << 20
"""Indexing a remote Parquet file reads row groups together up to this many bytes (their
size in the footer, all columns): fewer round trips, bounded memory."""


@dataclass
class _ParquetHandle:
    source: str  # the local path or the URL: the key of its decoded columns
    file: pq.ParquetFile
    lock: threading.Lock  # ParquetFile is not documented as thread-safe


def _column_nbytes(column: pa.ChunkedArray | None) -> int:
    return 0 if column is None else column.nbytes


def _open_parquet(source: Path | str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """A local Parquet file, or a remote one (a URL) read by byte range, its column chunks
    fetched ahead together; with ``metadata`` (its footer, already parsed) nothing is read
    until a row group is."""
    try:
        if isinstance(source, str):
            return pq.ParquetFile(open_by_range(source), metadata=metadata, pre_buffer=True)
        return pq.ParquetFile(source, metadata=metadata)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{source}: cannot read Parquet file ({e}); re-export or remove it") from e


def _columns_by_group(
    pf: pq.ParquetFile, field: str | None, remote: bool
) -> Iterator[tuple[int, pa.ChunkedArray | None]]:
    """Each row group's column ``field`` (None for every group if ``field`` is None). A
    remote file's groups are read several at a time, up to ``REMOTE_READ_BYTES``, so that
    their ranged GETs are issued together (``pre_buffer``) instead of one after another."""
    groups = range(pf.num_row_groups)
    if field is None:
        yield from ((g, None) for g in groups)
        return
    if not remote:
        yield from ((g, pf.read_row_group(g, columns=[field]).column(0)) for g in groups)
        return
    batch: list[int] = []
    batch_bytes = 0
    for g in groups:
        batch.append(g)
        batch_bytes += pf.metadata.row_group(g).total_byte_size  # every column: an upper bound
        if batch_bytes >= REMOTE_READ_BYTES or g == groups[-1]:
            column = pf.read_row_groups(batch, columns=[field]).column(0)
            offset = 0
            for member in batch:
                rows = pf.metadata.row_group(member).num_rows
                yield member, column.slice(offset, rows)
                offset += rows
            batch, batch_bytes = [], 0


class ParquetFormat:
    """Rows of a Parquet file; the record's text is the string column ``field``.

    A read decodes a whole row group's column, so an instance keeps recently
    decoded columns in an LRU cache shared by all its shards, bounded by
    ``cache_bytes`` (a budget in bytes adapts to any row-group size). ``source``
    is a local path, or a URL read by byte range: only the footer and the
    column's chunks; indexing a URL leaves the columns it decoded in that cache,
    so the first reads after indexing fetch them no second time, and keeps its
    footer, so opening it to read fetches no second footer.
    """

    name = FormatName.PARQUET

    def __init__(self, cache_bytes: int = 256 << 20) -> None:
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, int], pa.ChunkedArray | None] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self._footers: dict[str, pq.FileMetaData] = {}  # of URLs indexed, until first opened

    def build_index(self, source: Path | str, field: str) -> ShardIndex:
        """Index every row of ``source``; null, empty or non-string values are skipped."""
        skips = SkipCounter()
        empty = np.empty(0, dtype=np.int64)
        groups, in_group, text_bytes = [empty], [empty], [empty]
        pf = _open_parquet(source)
        if isinstance(source, str):
            with self._lock:
                self._footers[source] = pf.metadata
        try:
            schema = pf.schema_arrow
            usable = field in schema.names and is_string(schema.field(field).type)
            first_row = 0
            for g, column in _columns_by_group(
                pf, field if usable else None, isinstance(source, str)
            ):
                n = pf.metadata.row_group(g).num_rows
                row_numbers = np.arange(first_row + 1, first_row + n + 1)
                first_row += n
                if column is None:
                    skips.add(SkipReason.MISSING_FIELD, row_numbers)
                    continue
                if isinstance(source, str):  # fetched by range: keep it for the first reads
                    self._remember_column((source, g), column)
                good, lengths = usable_rows(column, row_numbers, skips)
                groups.append(np.full(len(good), g, dtype=np.int64))
                in_group.append(good)
                text_bytes.append(lengths)
        except (pa.ArrowException, OSError) as e:
            raise DataError(
                f"{source}: cannot read Parquet file ({e}); re-export or remove it"
            ) from e
        finally:
            pf.close(force=True)  # a URL's file too: its connection is not left to the GC
        return skips.index(
            np.concatenate(groups), np.concatenate(in_group), np.concatenate(text_bytes)
        )

    def open(self, source: Path | str) -> _ParquetHandle:
        """Open ``source`` for ``read``."""
        with self._lock:  # a footer serves one open: kept per shard, it would grow with them
            footer = self._footers.pop(source, None) if isinstance(source, str) else None
        return _ParquetHandle(str(source), _open_parquet(source, footer), threading.Lock())

    def read(
        self, handle: _ParquetHandle, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """Texts of ``rows``, decoding each row group they touch once."""
        groups = index.offsets[rows].tolist()
        columns = {g: self._read_cached_column(handle, g, field) for g in set(groups)}
        texts: list[str | None] = []
        for g, r in zip(groups, index.lengths[rows].tolist(), strict=True):
            column = columns[g]
            value = column[r].as_py() if column is not None and r < len(column) else None
            texts.append(value if type(value) is str else None)
        return texts

    def _read_cached_column(
        self, handle: _ParquetHandle, group: int, field: str
    ) -> pa.ChunkedArray | None:
        """Decoded column of one row group (``None`` if it cannot be read any more)."""
        key = (handle.source, group)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        try:
            with handle.lock:  # decode outside the cache lock: other shards stay readable
                column = handle.file.read_row_group(group, columns=[field]).column(0)
        except (pa.ArrowException, OSError, IndexError, KeyError):
            column = None
        self._remember_column(key, column)
        return column

    def _remember_column(self, key: tuple[str, int], column: pa.ChunkedArray | None) -> None:
        """Keep a decoded column in the LRU cache, dropping the oldest past the budget."""
        with self._lock:
            if key not in self._cache:  # another thread may have decoded it meanwhile
                self._cache[key] = column
                self._cached_bytes += _column_nbytes(column)
            while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
                self._cached_bytes -= _column_nbytes(self._cache.popitem(last=False)[1])
