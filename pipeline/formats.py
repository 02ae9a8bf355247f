"""Shard formats: how a shard's records are indexed once and read back by position.

One class per format (JSONL, plain text, Parquet), each with ``build_index``, ``open`` and
``read``, chosen by file name (``detect_format``). Compressed JSONL is not a format of its
own: ``decompress`` writes a plain copy, because records cannot be read by offset from a
compressed stream.

Design: docs/design/pipeline_datasets.md
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import zstandard

from pipeline.errors import ConfigError, DataError
from pipeline.io import atomic_write, is_url, open_by_range, url_filename

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSIONS = {".gz": "gz", ".zst": "zst"}
MAX_EXAMPLES = 3
_BLOCK = 8 << 20  # read size for streaming passes over a file
_Ints = Sequence[int] | np.ndarray


def detect_format(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """Return ``(format name, compression or None)`` for a shard, from its file name.

    ``path`` is a local path or a URL (the file name of its path counts, not
    its query). ``.jsonl``/``.json``/``.ndjson`` (optionally ``.gz``/``.zst``)
    is JSONL, ``.parquet`` is Parquet and any other file is one plain-text
    document.
    """
    location = os.fspath(path)
    name = (url_filename(location) if is_url(location) else os.path.basename(location)).lower()
    suffix = Path(name).suffix
    if suffix in COMPRESSIONS:
        if Path(name[: -len(suffix)]).suffix in JSONL_SUFFIXES:
            return "jsonl", COMPRESSIONS[suffix]
        # Reading compressed bytes as a text document is never what was meant.
        raise ConfigError(
            f"{path}: only compressed JSONL is supported ({', '.join(JSONL_SUFFIXES)} "
            f"followed by {' or '.join(COMPRESSIONS)}); decompress the file or rename it"
        )
    if suffix in JSONL_SUFFIXES:
        return "jsonl", None
    if suffix == ".parquet":
        return "parquet", None
    return "text", None


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


class ShardFormat(Protocol):
    """What ``Dataset`` needs from a format (see the design doc)."""

    name: str

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index the shard at ``path`` (Parquet also takes a URL, read by range)."""
        ...

    def open(self, path: Path) -> Any:
        """A handle to pass to ``read`` (Parquet also takes a URL, read by range)."""
        ...

    def read(
        self, handle: Any, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]: ...


class _Skips:
    """Counts skipped records by reason and keeps the first few positions of each."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[int]] = {}

    def add(self, reason: str, positions: _Ints) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + len(positions)
        kept = self.examples.setdefault(reason, [])
        kept.extend(int(p) for p in positions[: MAX_EXAMPLES - len(kept)])

    def index(self, offsets: _Ints, lengths: _Ints, text_bytes: _Ints) -> ShardIndex:
        columns = [np.asarray(values, dtype=np.int64) for values in (offsets, lengths, text_bytes)]
        table = np.stack(columns, axis=1) if len(columns[0]) else np.zeros((0, 3), np.int64)
        return ShardIndex(table, self.counts, self.examples)


def utf8_len(text: str) -> int:
    """UTF-8 byte length of ``text``; skips encoding for ASCII (an O(1) check in CPython)."""
    return len(text) if text.isascii() else len(text.encode())


class _Fd:
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


def _iter_lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Yield ``(byte offset, line without the newline)`` for every line of ``f``."""
    offset = 0
    rest = b""
    while block := f.read(_BLOCK):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()  # incomplete last line: completed by the next block
        for line in lines:
            yield offset, line
            offset += len(line) + 1
    if rest:
        yield offset, rest


def _parse_jsonl_line(line: bytes, field: str) -> tuple[str, None] | tuple[None, str]:
    """Return ``(text, None)`` for a usable line, else ``(None, skip reason)``."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # Only the failure path pays for working out why it failed.
        if not line.strip():
            return None, "blank_line"
        try:
            line.decode()
        except UnicodeDecodeError:
            return None, "invalid_utf8"
        return None, "malformed_json"
    if type(obj) is not dict:
        return None, "not_an_object"
    text = obj.get(field)
    if type(text) is not str:
        return None, "missing_field"
    if not text:
        return None, "empty_document"
    return text, None


class JsonlFormat:
    """One JSON object per line; the record's text is ``obj[field]``."""

    name = "jsonl"

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index every line of ``path``; bad lines are counted, not indexed."""
        offsets: list[int] = []
        lengths: list[int] = []
        text_bytes: list[int] = []
        skips = _Skips()
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

    def open(self, path: Path) -> _Fd:
        """Open ``path`` for ``read``."""
        return _Fd(path)

    def read(
        self, handle: _Fd, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """Texts of ``rows``; ``None`` where the indexed line no longer parses."""
        fd = handle.fd
        return [
            _parse_jsonl_line(os.pread(fd, length, offset), field)[0]
            for offset, length, _ in index.table[rows].tolist()  # one gather of the rows
        ]


class TextFormat:
    """A plain UTF-8 text file is one document; an empty file has no records."""

    name = "text"

    def build_index(self, path: Path, field: str) -> ShardIndex:
        """Index ``path`` as a single record (``field`` does not apply)."""
        data = path.read_bytes()
        skips = _Skips()
        if not data:
            return skips.index([], [], [])
        try:
            data.decode()
        except UnicodeDecodeError as e:
            skips.add("invalid_utf8", [data.count(b"\n", 0, e.start) + 1])
            return skips.index([], [], [])
        return skips.index([0], [len(data)], [len(data)])

    def open(self, path: Path) -> _Fd:
        """Open ``path`` for ``read``."""
        return _Fd(path)

    def read(
        self, handle: _Fd, index: ShardIndex, rows: np.ndarray, field: str
    ) -> list[str | None]:
        """The document's text for each row; ``None`` if it is no longer UTF-8."""
        texts: list[str | None] = []
        for r in rows:
            try:
                texts.append(
                    os.pread(handle.fd, int(index.lengths[r]), int(index.offsets[r])).decode()
                )
            except UnicodeDecodeError:
                texts.append(None)
        return texts


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


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


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

    name = "parquet"

    def __init__(self, cache_bytes: int = 256 << 20) -> None:
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[tuple[str, int], pa.ChunkedArray | None] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self._footers: dict[str, pq.FileMetaData] = {}  # of URLs indexed, until first opened

    def build_index(self, source: Path | str, field: str) -> ShardIndex:
        """Index every row of ``source``; null, empty or non-string values are skipped."""
        skips = _Skips()
        empty = np.empty(0, dtype=np.int64)
        groups, in_group, text_bytes = [empty], [empty], [empty]
        pf = _open_parquet(source)
        if isinstance(source, str):
            with self._lock:
                self._footers[source] = pf.metadata
        try:
            schema = pf.schema_arrow
            usable = field in schema.names and _is_string(schema.field(field).type)
            first_row = 0
            for g, column in _columns_by_group(
                pf, field if usable else None, isinstance(source, str)
            ):
                n = pf.metadata.row_group(g).num_rows
                row_numbers = np.arange(first_row + 1, first_row + n + 1)
                first_row += n
                if column is None:
                    skips.add("missing_field", row_numbers)
                    continue
                if isinstance(source, str):  # fetched by range: keep it for the first reads
                    self._remember_column((source, g), column)
                lengths = pc.fill_null(pc.binary_length(column), -1).to_numpy()
                for reason, bad in (
                    ("missing_field", lengths < 0),
                    ("empty_document", lengths == 0),
                ):
                    if bad.any():
                        skips.add(reason, row_numbers[bad])
                good = np.flatnonzero(lengths > 0)
                groups.append(np.full(len(good), g, dtype=np.int64))
                in_group.append(good)
                text_bytes.append(lengths[good])
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


def decompress(path: Path, compression: str, out: BinaryIO) -> None:
    """Stream-decompress ``path`` (``"gz"`` or ``"zst"``) into ``out``.

    Raises ``DataError`` naming the file if it is corrupt or truncated.
    """
    try:
        with open(path, "rb") as f:
            if compression == "gz":
                with gzip.open(f) as g:
                    shutil.copyfileobj(g, out, _BLOCK)
            else:
                _decompress_zstd_frames(f, out)
    except (gzip.BadGzipFile, EOFError, zlib.error, zstandard.ZstdError) as e:
        raise DataError(
            f"{path}: cannot decompress ({e}); the file is corrupt or truncated, "
            "re-download or re-compress it"
        ) from e


def _decompress_zstd_frames(f: BinaryIO, out: BinaryIO) -> None:
    # A frame-by-frame loop rather than stream_reader: stream_reader silently
    # stops at a truncated frame, and files may hold several frames.
    frame = None
    while block := f.read(_BLOCK):
        while block:
            if frame is None:
                frame = zstandard.ZstdDecompressor().decompressobj()
            out.write(frame.decompress(block))
            if not frame.eof:
                break
            block, frame = frame.unused_data, None  # the rest starts the next frame
    if frame is not None:
        raise EOFError("compressed data ended in the middle of a frame")
