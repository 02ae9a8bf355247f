"""Datasets: named, fingerprinted sets of shards whose records are read by pointer.

A ``Dataset`` resolves its file patterns at construction and reads nothing else until first
used. It then indexes every shard once and caches each index on disk under ``cache_dir``,
keyed by the shard's content fingerprint; every cache file is written by atomic rename, so
later runs and concurrent processes share it. Remote shards are read from verified local
copies (:mod:`pipeline.io`), with the same fingerprint as the same bytes read locally.

Design: docs/design/pipeline_datasets.md
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import threading
import time
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pipeline import io
from pipeline.errors import ConfigError, DataError, ZephonError
from pipeline.formats import (
    JsonlFormat,
    ParquetFormat,
    ShardFormat,
    ShardIndex,
    TextFormat,
    decompress,
    detect_format,
    utf8_len,
)
from pipeline.paths import zephon_home

INDEX_VERSION = "v1"
FINGERPRINT_TAG = "zephon-dataset-v1"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_OPEN_SHARDS = 64  # bounds open file descriptors for datasets with many shards
# A file modified within this window may be modified again without its
# (size, mtime) changing, so its fingerprint is not put in the stat cache.
_RACY_NS = 2_000_000_000
_REASONS = {
    "malformed_json": "the line is not valid JSON",
    "not_an_object": "the line is JSON but not an object",
    "missing_field": "the text field is missing or not a string",
    "invalid_utf8": "the bytes are not valid UTF-8",
    "empty_document": "the text is empty",
}
_IGNORED = "blank_line"  # counted in report() but never an error or a warning


@dataclass(frozen=True)
class RecordPointer:
    """Address of one record: dataset name, shard index (sorted order), record in shard."""

    dataset: str
    shard: int
    record: int

    def as_tuple(self) -> tuple[str, int, int]:
        """``(dataset, shard, record)``."""
        return (self.dataset, self.shard, self.record)


@dataclass(frozen=True)
class _Shard:
    source: Path | str  # a local file, or the URL of a remote one
    format: str
    compression: str | None

    @property
    def remote(self) -> bool:
        return isinstance(self.source, str)


@dataclass(frozen=True)
class _DatasetIndex:
    """Everything the lazy indexing pass produces; built once, then read-only."""

    fingerprints: list[str]
    local_paths: list[Path]  # the shard itself, or the local copy of a remote shard
    stats: list[tuple[int, int]]  # (size, mtime_ns) of each local path when indexed
    read_paths: list[Path]  # the local path, or its decompressed copy
    indexes: list[ShardIndex]
    starts: np.ndarray  # global index of each shard's first record; len = shards + 1
    record_bytes: np.ndarray
    fingerprint: str


class Dataset:
    """A named set of shards with a text field, a content fingerprint and a record index.

    ``paths`` are files or glob patterns (``~`` and ``**`` allowed), or fsspec
    URLs (globs too, except over HTTP, where each file must be listed),
    resolved at construction into a sorted list of shards; a missing file is a
    ``ConfigError`` then, an unreachable server a ``DataError``. ``io_options``
    configures remote IO: ``{"cache": {"enabled": True, "dir": None}}`` keeps
    verified local copies of remote shards under ``dir`` (default
    ``cache_dir``) for later runs and other processes (see ``pipeline.io``).
    Records are numbered globally in shard order, then in record order within
    a shard; bad records are skipped and counted (``on_bad_record="skip"``) or
    fail indexing (``"error"``). ``exhausted`` tells the plan what to do when
    the dataset runs out: ``"repeat"`` it or ``"stop"``.
    """

    def __init__(
        self,
        name: str,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        field: str = "text",
        exhausted: Literal["repeat", "stop"] = "repeat",
        on_bad_record: Literal["skip", "error"] = "skip",
        cache_dir: str | Path | None = None,
        io_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"dataset name {name!r} is invalid: use one or more of A-Z a-z 0-9 _ . -"
            )
        if not isinstance(field, str) or not field:
            raise ConfigError(f"dataset {name!r}: field must be a non-empty string, got {field!r}")
        if exhausted not in ("repeat", "stop"):
            raise ConfigError(
                f"dataset {name!r}: exhausted={exhausted!r} is invalid; use 'repeat' or 'stop'"
            )
        if on_bad_record not in ("skip", "error"):
            raise ConfigError(
                f"dataset {name!r}: on_bad_record={on_bad_record!r} is invalid; "
                "use 'skip' or 'error'"
            )
        self.name = name
        self.field = field
        self.exhausted = exhausted
        self.on_bad_record = on_bad_record
        self.cache_dir = (
            Path(cache_dir).expanduser() if cache_dir is not None else zephon_home() / "cache"
        )
        self.set_io_options(io_options)
        self._shards = [_Shard(p, *detect_format(p)) for p in _resolve_shards(name, paths)]
        self._state: _DatasetIndex | None = None
        self._init_transients()

    def set_io_options(self, io_options: Mapping[str, Any] | None) -> None:
        """Configure remote shard IO (the ``io_options`` of the class docstring); raises
        ConfigError naming the dataset when they are invalid."""
        try:
            self._io = io.ShardCache(io.IOOptions.parse(io_options), self.cache_dir)
        except ConfigError as e:
            raise ConfigError(f"dataset {self.name!r}: {e}") from e

    def __repr__(self) -> str:
        records = f"{self.num_records} records" if self._state else "not indexed"
        return (
            f"Dataset({self.name!r}, {len(self._shards)} shards, field={self.field!r}, {records})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the index (built here first) but no open files or locks.

        Process workers receive a Dataset once; they reuse the parent's index and open
        the shards themselves.
        """
        self._ensure_indexed()
        state = self.__dict__.copy()
        for transient in ("_formats", "_lock", "_handles", "_handles_lock"):
            state.pop(transient)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transients()

    def _init_transients(self) -> None:
        """Readers, open-file cache and locks: per process, never pickled."""
        self._formats: dict[str, ShardFormat] = {
            f.name: f for f in (JsonlFormat(), TextFormat(), ParquetFormat())
        }
        self._lock = threading.Lock()
        self._handles: OrderedDict[int, Any] = OrderedDict()
        self._handles_lock = threading.Lock()

    # -- properties (the first use indexes the dataset) ------------------------

    @property
    def shards(self) -> list[Path | str]:
        """Shards in sorted order: a ``Path`` per local file, the URL (a ``str``) per remote one.

        Known from construction; reading them is not needed. A ``file://`` URL
        is a local file. The local copies of remote shards are not listed.
        """
        return [s.source for s in self._shards]

    @property
    def fingerprint(self) -> str:
        """SHA-256 over the field and each shard's format and content fingerprint, in order."""
        return self._ensure_indexed().fingerprint

    @property
    def shard_fingerprints(self) -> list[str]:
        """SHA-256 of each shard file's raw bytes."""
        return list(self._ensure_indexed().fingerprints)

    @property
    def num_records(self) -> int:
        """Usable records over all shards."""
        return int(self._ensure_indexed().starts[-1])

    @property
    def record_bytes(self) -> np.ndarray:
        """UTF-8 byte length of each record's text (int64), in global record order."""
        return self._ensure_indexed().record_bytes

    def pointer(self, i: int) -> RecordPointer:
        """Pointer of global record ``i``."""
        state = self._ensure_indexed()
        self._check_range(np.array([i]), state)
        shard = int(np.searchsorted(state.starts, i, side="right")) - 1
        return RecordPointer(self.name, shard, int(i - state.starts[shard]))

    def read_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of global records ``indices``, in the given order. Thread-safe.

        Raises ``DataError`` naming the record if a shard no longer holds what
        was indexed.
        """
        state = self._ensure_indexed()
        idx = np.asarray(indices, dtype=np.int64)
        self._check_range(idx, state)
        shard_of = np.searchsorted(state.starts, idx, side="right") - 1
        texts: list[str] = [""] * len(idx)
        for s in sorted(set(shard_of.tolist())):  # np.unique costs more on a chunk's few items
            positions = np.flatnonzero(shard_of == s)
            rows = idx[positions] - state.starts[s]
            index = state.indexes[s]
            fmt = self._formats[self._shards[s].format]
            got = fmt.read(self._open_shard_handle(int(s), state), index, rows, self.field)
            expected = index.text_bytes[rows].tolist()
            for pos, row, text, size in zip(
                positions.tolist(), rows.tolist(), got, expected, strict=True
            ):
                if text is None or utf8_len(text) != size:
                    raise self._shard_changed_error(int(s), row)
                texts[pos] = text
        return texts

    def report(self) -> dict[str, Any]:
        """Record, shard and skip counts, with up to 3 ``"path:line"`` examples per reason.

        ``empty_shards`` counts shards without usable records; Parquet
        examples give 1-based row numbers instead of lines.
        """
        state = self._ensure_indexed()
        skipped, examples = self._skip_summary(state)
        return {
            "records": int(state.starts[-1]),
            "shards": len(self._shards),
            "empty_shards": sum(len(ix) == 0 for ix in state.indexes),
            "skipped": skipped,
            "examples": examples,
        }

    # -- indexing --------------------------------------------------------------

    def _ensure_indexed(self) -> _DatasetIndex:
        state = self._state
        if state is None:
            with self._lock:
                if self._state is None:
                    self._state = self._index_shards()
                state = self._state
        return state

    def _index_shards(self) -> _DatasetIndex:
        fingerprints, local_paths, stats, read_paths, indexes = [], [], [], [], []
        for shard in self._shards:
            try:
                if shard.remote:
                    try:
                        local = self._io.local_copy(str(shard.source))
                    except DataError as e:
                        raise DataError(f"dataset {self.name!r}: {e}") from e
                    st = os.stat(local)
                    fp = io.content_sha256(local)  # verified by local_copy
                else:
                    local = Path(shard.source)
                    st = os.stat(local)
                    fp = self._content_fingerprint(local, st)
                read_path = local
                if shard.compression:
                    read_path = self._ensure_decompressed_copy(shard, local, fp)
                index = self._shard_index(shard, fp, read_path)
            except OSError as e:
                raise DataError(f"dataset {self.name!r}: cannot index {shard.source}: {e}") from e
            if self.on_bad_record == "error":
                self._raise_on_bad(shard, index)
            fingerprints.append(fp)
            local_paths.append(local)
            stats.append((st.st_size, st.st_mtime_ns))
            read_paths.append(read_path)
            indexes.append(index)
        counts = np.array([len(ix) for ix in indexes], dtype=np.int64)
        record_bytes = np.concatenate([ix.text_bytes for ix in indexes]).astype(np.int64)
        record_bytes.flags.writeable = False  # shared with every caller
        canonical = [
            FINGERPRINT_TAG,
            self.field,
            [[s.format, fp] for s, fp in zip(self._shards, fingerprints, strict=True)],
        ]
        state = _DatasetIndex(
            fingerprints=fingerprints,
            local_paths=local_paths,
            stats=stats,
            read_paths=read_paths,
            indexes=indexes,
            starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            record_bytes=record_bytes,
            fingerprint=hashlib.sha256(json.dumps(canonical).encode()).hexdigest(),
        )
        skipped, examples = self._skip_summary(state)
        if state.starts[-1] == 0:
            raise DataError(
                f"dataset {self.name!r} has no usable records ({len(self._shards)} files; "
                f"skipped: {skipped}); check `field=` and the files"
            )
        bad = {r: n for r, n in skipped.items() if r != _IGNORED}
        if bad:
            # Skipping is allowed, but never silent.
            warnings.warn(
                f"dataset {self.name!r}: skipped {sum(bad.values())} bad records {bad}, "
                f"e.g. {examples}; see Dataset.report()",
                stacklevel=2,
            )
        return state

    def _content_fingerprint(self, path: Path, st: os.stat_result) -> str:
        """SHA-256 of the file's bytes, remembered per (path, size, mtime, inode)."""
        key = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
        entry = self.cache_dir / "stat" / hashlib.sha256(key.encode()).hexdigest()
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

    def _ensure_decompressed_copy(self, shard: _Shard, local: Path, fp: str) -> Path:
        """Path of the decompressed copy of ``local`` (the shard's bytes), writing it if missing."""
        # Without a shared IO cache, remote data stays in the private directory.
        root = self._io.root if shard.remote and not self._io.shared else self.cache_dir
        copy = root / "decompressed" / f"{fp}.jsonl"
        if not copy.exists():
            io.atomic_write(copy, lambda out: decompress(local, shard.compression, out))
        return copy

    def _shard_index(self, shard: _Shard, fp: str, read_path: Path) -> ShardIndex:
        """Cached index of the shard, built and cached if missing or unreadable."""
        field_hash = hashlib.sha256(self.field.encode()).hexdigest()[:16]
        name = f"{fp}.{shard.format}.{field_hash}.{INDEX_VERSION}.npz"
        cached = self.cache_dir / "index" / name
        try:
            return ShardIndex.load(cached)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile):
            pass  # missing, or damaged: build it and replace the entry
        index = self._formats[shard.format].build_index(read_path, self.field)
        io.atomic_write(cached, index.save)
        return index

    def _raise_on_bad(self, shard: _Shard, index: ShardIndex) -> None:
        bad = [(lines[0], r) for r, lines in index.examples.items() if r != _IGNORED]
        if bad:
            line, reason = min(bad)
            others = sum(n for r, n in index.skipped.items() if r != _IGNORED) - 1
            raise DataError(
                f"dataset {self.name!r}: {shard.source}:{line}: {_REASONS[reason]} "
                f"(reason {reason!r}, field {self.field!r}; {others} more bad records in "
                "this file); fix or remove the record, or pass on_bad_record='skip'"
            )

    def _skip_summary(self, state: _DatasetIndex) -> tuple[dict[str, int], dict[str, list[str]]]:
        skipped: dict[str, int] = {}
        examples: dict[str, list[str]] = {}
        for shard, index in zip(self._shards, state.indexes, strict=True):
            for reason, n in index.skipped.items():
                skipped[reason] = skipped.get(reason, 0) + n
                kept = examples.setdefault(reason, [])
                kept.extend(
                    f"{shard.source}:{line}" for line in index.examples[reason][: 3 - len(kept)]
                )
        return skipped, examples

    # -- reading ---------------------------------------------------------------

    def _open_shard_handle(self, s: int, state: _DatasetIndex) -> Any:
        """Open handle of shard ``s`` (LRU-cached; evicted handles close once unused)."""
        with self._handles_lock:
            handle = self._handles.get(s)
            if handle is not None:
                self._handles.move_to_end(s)
                return handle
            try:
                st = os.stat(state.local_paths[s])
                if (st.st_size, st.st_mtime_ns) != state.stats[s]:
                    raise self._shard_changed_error(s, None)
                handle = self._formats[self._shards[s].format].open(state.read_paths[s])
            except OSError as e:
                raise DataError(
                    f"dataset {self.name!r}: cannot open shard {self._shards[s].source}: {e}"
                ) from e
            self._handles[s] = handle
            if len(self._handles) > _MAX_OPEN_SHARDS:
                # A reader still using the evicted handle keeps it alive until it is done.
                self._handles.popitem(last=False)
            return handle

    def _shard_changed_error(self, s: int, row: int | None) -> DataError:
        what = f"shard {self._shards[s].source}"
        if row is not None:
            what = f"record {RecordPointer(self.name, s, row).as_tuple()}: {what}"
        return DataError(
            f"dataset {self.name!r}: {what} changed since it "
            "was indexed; restore the original file, or re-create the Dataset to re-index it "
            f"(this changes its fingerprint; if the file is unchanged, delete {self.cache_dir})"
        )

    def _check_range(self, idx: np.ndarray, state: _DatasetIndex) -> None:
        n = int(state.starts[-1])
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"dataset {self.name!r}: record index out of range [0, {n})")


def _resolve_shards(
    name: str, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
) -> list[Path | str]:
    """Expand files, URLs and glob patterns into a sorted, de-duplicated list of shards.

    Local files (``file://`` URLs included) become absolute ``Path``s, remote
    files stay URL strings.
    """
    patterns = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not patterns:
        raise ConfigError(f"dataset {name!r}: no paths given; pass files or glob patterns")
    found: set[str] = set()
    for pattern in patterns:
        expanded = os.path.expanduser(os.fspath(pattern))
        if io.is_url(expanded):
            try:
                local = io.local_path(expanded)
                if local is None:
                    found.update(io.expand_url(expanded))
                    continue
            except ZephonError as e:
                raise type(e)(f"dataset {name!r}: {e}") from e
            expanded = local  # a file:// URL: resolved like the path it names
        if os.path.isfile(expanded):
            found.add(os.path.abspath(expanded))
        elif glob.escape(expanded) != expanded:
            matches = [m for m in glob.glob(expanded, recursive=True) if os.path.isfile(m)]
            if not matches:
                raise ConfigError(
                    f"dataset {name!r}: pattern {pattern!r} matches no files; "
                    "check the path and the extension (hidden files are not matched)"
                )
            found.update(os.path.abspath(m) for m in matches)
        elif os.path.isdir(expanded):
            raise ConfigError(
                f"dataset {name!r}: {pattern!r} is a directory; "
                f"give a glob such as '{os.path.join(pattern, '**', '*.jsonl')}'"
            )
        else:
            raise ConfigError(
                f"dataset {name!r}: {pattern!r} does not exist; fix the path or remove it"
            )
    return [p if io.is_url(p) else Path(p) for p in sorted(found)]
