"""Datasets: named sets of shards whose records are read by key, each shard indexed lazily.

A ``Dataset`` resolves its file patterns at construction and reads nothing else until first
used. A shard is indexed when it is first reached, not before: its content is hashed and its
index built (or mapped from the cache under ``cache_dir``, keyed by that hash, every cache
file written by atomic rename so later runs and concurrent processes share it). The plan
itself needs only each shard's metadata (size and stat, or a remote file's validators).
Records are addressed by key, ``shard << 32 | row``. Remote shards are read from verified
local copies (:mod:`pipeline.io`), with the same fingerprint as the same bytes read locally;
remote Parquet shards, with ``io_options["remote_read"] = "range"``, in place by byte range,
identified by their server's ETag and size (``ShardIdentity.REMOTE_VERSION``).

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
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pipeline import io
from pipeline.errors import ConfigError, DataError, ZephonError
from pipeline.filelock import file_lock
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

INDEX_VERSION = "v2"  # a memory-mapped .npy table and a .json of skips (v1: one .npz)
FINGERPRINT_TAG = "zephon-dataset-v1"
MANIFEST_TAG = "zephon-manifest-v2"
RECORD_KEY_SHIFT = 32
"""A record's key is ``shard << RECORD_KEY_SHIFT | row``: shards and rows below 2**31."""
_ROW_MASK = (1 << RECORD_KEY_SHIFT) - 1
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MAX_OPEN_SHARDS = 64  # bounds open file descriptors for datasets with many shards
_INDEX_LOCKS = 64  # shards are indexed under one of this many locks (striped by shard)
_MAX_MAPPED_INDEXES = 512  # bounds memory maps (the kernel allows ~65,000 a process)
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


def record_keys(shards: np.ndarray | int, rows: np.ndarray | int) -> np.ndarray:
    """Keys of records ``(shard, row)`` (int64)."""
    return (np.asarray(shards, dtype=np.int64) << RECORD_KEY_SHIFT) | np.asarray(rows, np.int64)


def split_record_keys(keys: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(shards, rows)`` of record keys."""
    array = np.asarray(keys, dtype=np.int64)
    return array >> RECORD_KEY_SHIFT, array & _ROW_MASK


@dataclass(frozen=True)
class RecordPointer:
    """Address of one record: dataset name, shard index (sorted order), record in shard."""

    dataset: str
    shard: int
    record: int

    def as_tuple(self) -> tuple[str, int, int]:
        """``(dataset, shard, record)``."""
        return (self.dataset, self.shard, self.record)


class ShardIdentity(StrEnum):
    """What a shard's fingerprint is the SHA-256 of."""

    CONTENT = "content"
    """Its bytes: the same wherever they are read from."""
    REMOTE_VERSION = "remote-version"
    """Its server's ETag and size (a shard read by range, never read whole)."""


@dataclass(frozen=True)
class _Shard:
    source: Path | str  # a local file, or the URL of a remote one
    format: str
    compression: str | None

    @property
    def remote(self) -> bool:
        return isinstance(self.source, str)


@dataclass(frozen=True)
class ShardMetadata:
    """What the plan knows of a shard without reading it."""

    size: int
    """Bytes of the file (for a remote shard, as its server reports)."""
    version: tuple[Any, ...]
    """What changes when the file is rewritten: (mtime_ns, inode) of a local file, checked
    with the size when the shard is first read; (ETag, modification time) of a remote one,
    of which the ETag is checked then for a shard read by range, and only the size for a
    downloaded one (its copy is validated against the server)."""


@dataclass(frozen=True)
class _IndexedShard:
    """What indexing one shard established, kept for the dataset's life (a few fields a
    shard); the index itself is mapped on demand and only a bounded number stay mapped."""

    fingerprint: str  # SHA-256 of the shard's raw bytes, or of its remote version if by range
    local_path: Path | None  # the shard, or the local copy of a remote one; None if by range
    stat: tuple[int, int | str]  # (size, mtime_ns) of local_path, (size, ETag) if by range
    read_path: Path | str  # the local path, its decompressed copy, or the URL read by range
    records: int  # usable records
    skipped: dict[str, int]  # bad records by reason
    examples: dict[str, list[int]]  # the first lines of each reason


@dataclass(frozen=True)
class _WholeDataset:
    """Global record numbering over every shard (built only when asked for)."""

    starts: np.ndarray  # global index of each shard's first record; len = shards + 1
    record_bytes: np.ndarray
    fingerprint: str


class Dataset:
    """A named set of shards with a text field, a content fingerprint and lazy indexes.

    ``paths`` are files or glob patterns (``~`` and ``**`` allowed), or fsspec
    URLs (globs too, except over HTTP, where each file must be listed),
    resolved at construction into a sorted list of shards; a missing file is a
    ``ConfigError`` then, an unreachable server a ``DataError``. ``io_options``
    configures remote IO: ``{"cache": {"enabled": True, "dir": None}}`` keeps
    verified local copies of remote shards under ``dir`` (default
    ``cache_dir``) for later runs and other processes (see ``pipeline.io``).
    Records are addressed by key (``record_keys``); the whole-dataset views
    (``num_records``, ``record_bytes``, ``fingerprint``, ``read_texts``) number them
    globally in shard order and index every shard first. Bad records are skipped and
    counted (``on_bad_record="skip"``) or fail indexing (``"error"``). ``exhausted``
    tells the plan what to do when the dataset runs out: ``"repeat"`` it or ``"stop"``.
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
        self._indexed: list[_IndexedShard | None] = [None] * len(self._shards)
        self._read_order: list[int] = []  # shards in the order they were first indexed
        self._metadata: list[ShardMetadata] | None = None
        self._whole: _WholeDataset | None = None
        self._warned_bad = False
        self._init_transients()

    def set_io_options(self, io_options: Mapping[str, Any] | None) -> None:
        """Configure remote shard IO (the ``io_options`` of the class docstring); raises
        ConfigError naming the dataset when they are invalid."""
        try:
            self._io = io.ShardCache(io.IOOptions.parse(io_options), self.cache_dir)
        except ConfigError as e:
            raise ConfigError(f"dataset {self.name!r}: {e}") from e

    def __repr__(self) -> str:
        indexed = len(self._read_order)
        return (
            f"Dataset({self.name!r}, {len(self._shards)} shards, field={self.field!r}, "
            f"{indexed} indexed)"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the shards indexed so far (their indexes as cache paths), no files or locks.

        Process workers receive a Dataset once; they map the parent's indexes and index
        the shards it had not reached themselves.
        """
        state = self.__dict__.copy()
        for transient in ("_formats", "_locks", "_handles", "_handles_lock", "_mapped"):
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
        self._locks = [threading.Lock() for _ in range(_INDEX_LOCKS + 1)]  # the last: whole
        self._handles: OrderedDict[int, tuple[Any, io.CopyPin | None]] = OrderedDict()
        self._handles_lock = threading.Lock()
        self._mapped: OrderedDict[int, ShardIndex] = OrderedDict()  # LRU, under _handles_lock

    # -- shards: metadata without reading, indexes on first use -----------------

    @property
    def shards(self) -> list[Path | str]:
        """Shards in sorted order: a ``Path`` per local file, the URL (a ``str``) per remote one.

        Known from construction; reading them is not needed. A ``file://`` URL
        is a local file. The local copies of remote shards are not listed.
        """
        return [s.source for s in self._shards]

    @property
    def num_shards(self) -> int:
        """Number of shards (known from construction)."""
        return len(self._shards)

    def shard_metadata(self) -> list[ShardMetadata]:
        """Each shard's size and version, from a stat (or one metadata request) per shard.

        Taken once, at the first call (the plan); a shard first read later must still match.
        """
        with self._locks[-1]:
            if self._metadata is None:
                self._metadata = [self._query_metadata(s) for s in self._shards]
            return self._metadata

    @property
    def manifest_fingerprint(self) -> str:
        """SHA-256 over the field and each shard's format and size, in order: what the plan
        knows of the data without reading it (the content is checked as shards are read)."""
        canonical = [
            MANIFEST_TAG,
            self.field,
            [
                [s.format, s.compression, m.size]
                for s, m in zip(self._shards, self.shard_metadata(), strict=True)
            ],
        ]
        return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()

    def shard_index(self, shard: int) -> ShardIndex:
        """The index of one shard, built (or mapped from the cache) at its first use; the
        least recently used of more than 512 are unmapped and mapped again when asked for."""
        with self._handles_lock:
            index = self._mapped.get(shard)
            if index is not None:
                self._mapped.move_to_end(shard)
                return index
        state = self._index_of(shard)
        with self._handles_lock:
            index = self._mapped.get(shard)
        if index is None:
            index = self._shard_index(self._shards[shard], state.fingerprint, state.read_path)
            self._keep_mapped(shard, index)
        return index

    def _keep_mapped(self, shard: int, index: ShardIndex) -> None:
        with self._handles_lock:
            self._mapped[shard] = index
            self._mapped.move_to_end(shard)
            while len(self._mapped) > _MAX_MAPPED_INDEXES:
                self._mapped.popitem(last=False)

    def shard_records(self, shard: int) -> int:
        """Usable records of one shard (indexes it; known without mapping it later)."""
        return self._index_of(shard).records

    def shard_fingerprint(self, shard: int) -> str:
        """SHA-256 of one shard's raw bytes, computed when it is first read (of its remote
        version for a shard read by range: ``shard_identity``)."""
        return self._index_of(shard).fingerprint

    def shard_identity(self, shard: int) -> ShardIdentity:
        """What ``shard_fingerprint(shard)`` identifies (known without reading the shard)."""
        if self._reads_by_range(self._shards[shard]):
            return ShardIdentity.REMOTE_VERSION
        return ShardIdentity.CONTENT

    def read_shard_fingerprints(self, start: int = 0) -> dict[int, str]:
        """Content SHA-256 of the shards read (indexed) in this process, by shard: all, or
        from the ``start``-th read on (a caller that records them as they come)."""
        return {s: self._index_of(s).fingerprint for s in self._read_order[start:]}

    def record_text_bytes(self, keys: np.ndarray | Sequence[int]) -> np.ndarray:
        """UTF-8 byte length of the text of each record key (int64)."""
        shards, rows = split_record_keys(keys)
        out = np.empty(len(shards), dtype=np.int64)
        for s in np.unique(shards).tolist():
            where = shards == s
            out[where] = self.shard_index(s).text_bytes[rows[where]]
        return out

    def text_bytes_of(self, key: int) -> int:
        """UTF-8 byte length of one record's text (the plan's per-draw lookup)."""
        shard, row = int(key) >> RECORD_KEY_SHIFT, int(key) & _ROW_MASK
        return int(self.shard_index(shard).table[row, 2])

    def pointer(self, key: int) -> RecordPointer:
        """Pointer of the record with key ``key``."""
        shard, row = int(key) >> RECORD_KEY_SHIFT, int(key) & _ROW_MASK
        return RecordPointer(self.name, shard, row)

    def read_records(self, keys: np.ndarray | Sequence[int]) -> list[str]:
        """Texts of the records ``keys``, in the given order. Thread-safe.

        Raises ``DataError`` naming the record if a shard no longer holds what
        was indexed, ``IndexError`` for a key outside the dataset.
        """
        return self.read_records_and_bytes(keys)[0]

    def read_records_and_bytes(self, keys: np.ndarray | Sequence[int]) -> tuple[list[str], int]:
        """``read_records``' texts and their UTF-8 bytes in all (the indexed sizes, which
        every read checks), for callers that count bytes without looking them up again."""
        shards, rows = split_record_keys(keys)
        texts: list[str] = [""] * len(shards)
        text_bytes = 0
        # A tokenize chunk's few records are spread over several shards: grouping them in
        # plain Python costs less than numpy calls per shard.
        by_shard: dict[int, list[int]] = {}
        for pos, s in enumerate(shards.tolist()):
            by_shard.setdefault(s, []).append(pos)
        for s in sorted(by_shard):
            if not 0 <= s < len(self._shards):
                raise IndexError(f"dataset {self.name!r}: shard {s} out of range")
            positions = by_shard[s]
            state = self._index_of(s)
            index = self.shard_index(s)
            wanted = rows[positions]
            wanted_rows = wanted.tolist()
            if max(wanted_rows, default=-1) >= len(index):
                raise IndexError(
                    f"dataset {self.name!r}: shard {s} has {len(index)} records, "
                    f"record {max(wanted_rows)} asked for"
                )
            fmt = self._formats[self._shards[s].format]
            got = fmt.read(self._open_shard_handle(s, state), index, wanted, self.field)
            expected = index.text_bytes[wanted].tolist()
            for pos, row, text, size in zip(positions, wanted_rows, got, expected, strict=True):
                if text is None or utf8_len(text) != size:
                    raise self._shard_changed_error(s, row)
                texts[pos] = text
            text_bytes += sum(expected)
        return texts, text_bytes

    # -- the whole dataset (indexes every shard) --------------------------------

    @property
    def fingerprint(self) -> str:
        """SHA-256 over the field and each shard's format and content fingerprint, in order
        (reads every shard; the plan's order v1 uses it)."""
        return self._whole_dataset().fingerprint

    @property
    def shard_fingerprints(self) -> list[str]:
        """SHA-256 of each shard file's raw bytes (reads every shard)."""
        return [self.shard_fingerprint(s) for s in range(len(self._shards))]

    @property
    def num_records(self) -> int:
        """Usable records over all shards (indexes every shard)."""
        return int(self._whole_dataset().starts[-1])

    @property
    def record_bytes(self) -> np.ndarray:
        """UTF-8 byte length of each record's text (int64), in global record order."""
        return self._whole_dataset().record_bytes

    def global_keys(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Record keys of global record numbers (shard order, then row)."""
        whole = self._whole_dataset()
        idx = np.asarray(indices, dtype=np.int64)
        n = int(whole.starts[-1])
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"dataset {self.name!r}: record index out of range [0, {n})")
        shard = np.searchsorted(whole.starts, idx, side="right") - 1
        return record_keys(shard, idx - whole.starts[shard])

    def read_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of global records ``indices``, in the given order (see ``read_records``)."""
        return self.read_records(self.global_keys(indices))

    def report(self) -> dict[str, Any]:
        """Record, shard and skip counts of the shards indexed so far, with up to 3
        ``"path:line"`` examples per reason.

        ``empty_shards`` counts indexed shards without usable records; Parquet
        examples give 1-based row numbers instead of lines.
        """
        indexed = [(self._shards[s], self._index_of(s)) for s in self._read_order]
        skipped, examples = self._skip_summary(indexed)
        return {
            "records": sum(st.records for _, st in indexed),
            "shards": len(self._shards),
            "shards_indexed": len(indexed),
            "empty_shards": sum(st.records == 0 for _, st in indexed),
            "skipped": skipped,
            "examples": examples,
        }

    # -- indexing --------------------------------------------------------------

    def _whole_dataset(self) -> _WholeDataset:
        whole = self._whole
        if whole is None:
            states = [self._index_of(s) for s in range(len(self._shards))]
            with self._locks[-1]:
                if self._whole is None:
                    self._whole = self._number_globally(states)
                whole = self._whole
        return whole

    def _number_globally(self, states: list[_IndexedShard]) -> _WholeDataset:
        counts = np.array([st.records for st in states], dtype=np.int64)
        record_bytes = np.concatenate(
            [np.zeros(0, np.int64)]
            + [np.asarray(self.shard_index(s).text_bytes) for s in range(len(states))]
        ).astype(np.int64)
        record_bytes.flags.writeable = False  # shared with every caller
        canonical = [
            FINGERPRINT_TAG,
            self.field,
            [[s.format, st.fingerprint] for s, st in zip(self._shards, states, strict=True)],
        ]
        if counts.sum() == 0:
            skipped, _ = self._skip_summary(list(zip(self._shards, states, strict=True)))
            raise DataError(
                f"dataset {self.name!r} has no usable records ({len(self._shards)} files; "
                f"skipped: {skipped}); check `field=` and the files"
            )
        return _WholeDataset(
            starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            record_bytes=record_bytes,
            fingerprint=hashlib.sha256(json.dumps(canonical).encode()).hexdigest(),
        )

    def _index_of(self, s: int) -> _IndexedShard:
        state = self._indexed[s]
        if state is None:
            with self._locks[s % _INDEX_LOCKS]:
                state = self._indexed[s]
                if state is None:
                    state = self._indexed[s] = self._index_shard(s)
                    self._read_order.append(s)
        return state

    def _query_metadata(self, shard: _Shard) -> ShardMetadata:
        if shard.remote:
            try:
                remote = io.remote_validators(str(shard.source))
            except DataError as e:
                raise DataError(f"dataset {self.name!r}: {e}") from e
            return ShardMetadata(int(remote["size"] or 0), (remote["etag"], remote["modified"]))
        try:
            st = os.stat(shard.source)
        except OSError as e:
            raise DataError(f"dataset {self.name!r}: cannot stat {shard.source}: {e}") from e
        return ShardMetadata(st.st_size, (st.st_mtime_ns, st.st_ino))

    def _reads_by_range(self, shard: _Shard) -> bool:
        """Whether ``shard`` is read in place by byte range (a remote Parquet file, with
        ``io_options["remote_read"] = "range"``), not from a downloaded copy."""
        return (
            shard.remote
            and shard.format == ParquetFormat.name
            and self._io.remote_read is io.RemoteRead.RANGE
        )

    def _index_shard(self, s: int) -> _IndexedShard:
        shard = self._shards[s]
        if self._reads_by_range(shard):
            return self._index_shard_by_range(s)
        try:
            if shard.remote:
                local, _pin = self._pin_remote_copy(shard)  # pinned until indexed
                st = os.stat(local)
                fp = io.content_sha256(local)  # verified by local_copy
            else:
                local = Path(shard.source)
                st = os.stat(local)
            self._check_unchanged_since_plan(s, st.st_size, (st.st_mtime_ns, st.st_ino))
            # Every rank of a node reaches the same shards at once: one process hashes and
            # indexes a shard while the others wait, then they all map its cached index.
            with file_lock(self.cache_dir / "locks" / _file_version_key(local, st)):
                if not shard.remote:
                    fp = self._content_fingerprint(local, st)
                read_path = local
                if shard.compression:
                    read_path = self._ensure_decompressed_copy(shard, local, fp)
                index = self._shard_index(shard, fp, read_path)
        except OSError as e:
            raise DataError(f"dataset {self.name!r}: cannot index {shard.source}: {e}") from e
        self._check_records(shard, index)
        self._keep_mapped(s, index)
        return _IndexedShard(
            fp,
            local,
            (st.st_size, st.st_mtime_ns),
            read_path,
            len(index),
            index.skipped,
            index.examples,
        )

    def _index_shard_by_range(self, s: int) -> _IndexedShard:
        """Index a remote Parquet shard in place: its footer and text column, by range."""
        url = str(self._shards[s].source)
        size, etag, fp = self._query_remote_version(url)
        self._check_unchanged_since_plan(s, size, etag)
        with file_lock(self.cache_dir / "locks" / fp):  # one process of a node indexes it
            index = self._shard_index(self._shards[s], fp, url)
        self._check_records(self._shards[s], index)
        self._keep_mapped(s, index)
        return _IndexedShard(fp, None, (size, etag), url, len(index), index.skipped, index.examples)

    def _query_remote_version(self, url: str) -> tuple[int, str, str]:
        """Size, ETag and version fingerprint of a shard read by range, asked of its server."""
        try:
            remote = io.remote_validators(url)
            fingerprint = io.remote_version_fingerprint(url, remote)
        except DataError as e:
            raise DataError(f"dataset {self.name!r}: {e}") from e
        return int(remote["size"] or 0), str(remote["etag"]), fingerprint

    def _check_records(self, shard: _Shard, index: ShardIndex) -> None:
        """Fail on bad records (``on_bad_record="error"``), or warn once per dataset."""
        if self.on_bad_record == "error":
            self._raise_on_bad(shard, index)
        bad = {r: n for r, n in index.skipped.items() if r != _IGNORED}
        if bad and not self._warned_bad:
            # Skipping is allowed, but never silent: once per dataset, the rest is counted.
            self._warned_bad = True
            _, examples = self._skip_summary([(shard, index)])
            warnings.warn(
                f"dataset {self.name!r}: skipped {sum(bad.values())} bad records {bad} in "
                f"{shard.source}, e.g. {examples}; Dataset.report() counts them over every "
                "shard read",
                stacklevel=4,
            )

    def _check_unchanged_since_plan(self, s: int, size: int, version: object) -> None:
        """A shard must be read as the plan saw it: its size, and its version where the
        first read cannot hash its bytes (a local file's (mtime_ns, inode), a shard read by
        range's ETag); a downloaded copy is checked against its server by ``pipeline.io``."""
        planned = self._metadata[s] if self._metadata is not None else None
        if planned is None:
            return
        shard = self._shards[s]
        if self._reads_by_range(shard):
            now, then = (size, version), (planned.size, planned.version[0])
        elif shard.remote:
            now, then = size, planned.size
        else:
            now, then = (size, version), (planned.size, planned.version)
        if now != then:
            raise DataError(
                f"dataset {self.name!r}: shard {shard.source} changed between the plan and its "
                f"first read (size {planned.size} -> {size}, or rewritten in place); "
                "restore it, or plan again (a new run: its data contract changes)"
            )

    def _content_fingerprint(self, path: Path, st: os.stat_result) -> str:
        """SHA-256 of the file's bytes, remembered per (path, size, mtime, inode)."""
        entry = self.cache_dir / "stat" / _file_version_key(path, st)
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
        """Cached index of the shard (memory-mapped), built and cached if missing or damaged."""
        field_hash = hashlib.sha256(self.field.encode()).hexdigest()[:16]
        stem = self.cache_dir / "index" / f"{fp}.{shard.format}.{field_hash}.{INDEX_VERSION}"
        files = (stem.with_name(stem.name + ".npy"), stem.with_name(stem.name + ".json"))
        try:
            return ShardIndex.load(*files)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # missing, or damaged: build it and replace the entry
        return self._formats[shard.format].build_index(read_path, self.field).save(*files)

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

    @staticmethod
    def _skip_summary(
        indexed: Sequence[tuple[_Shard, ShardIndex | _IndexedShard]],
    ) -> tuple[dict[str, int], dict[str, list[str]]]:
        skipped: dict[str, int] = {}
        examples: dict[str, list[str]] = {}
        for shard, index in indexed:
            for reason, n in index.skipped.items():
                skipped[reason] = skipped.get(reason, 0) + n
                kept = examples.setdefault(reason, [])
                kept.extend(
                    f"{shard.source}:{line}" for line in index.examples[reason][: 3 - len(kept)]
                )
        return skipped, examples

    # -- reading ---------------------------------------------------------------

    def _open_shard_handle(self, s: int, state: _IndexedShard) -> Any:
        """Open handle of shard ``s`` (LRU-cached; evicted handles close once unused). A
        remote shard's copy is pinned while its handle is open, so a size-limited cache
        does not evict it (an evicted copy is fetched again, and must hold the same bytes)."""
        with self._handles_lock:
            opened = self._handles.get(s)
            if opened is not None:
                self._handles.move_to_end(s)
                return opened[0]
            shard = self._shards[s]
            pin = None
            try:
                if self._reads_by_range(shard):
                    # Each open asks the server again, so a rewrite since indexing is caught.
                    size, etag, _ = self._query_remote_version(str(shard.source))
                    if (size, etag) != state.stat:
                        raise self._shard_changed_error(s, None)
                    read_path = state.read_path
                elif shard.remote and not shard.compression:
                    copy, pin = self._pin_remote_copy(shard)
                    if io.content_sha256(copy) != state.fingerprint:
                        raise self._shard_changed_error(s, None)
                    read_path = copy
                elif shard.remote:  # read from its decompressed copy, named by its content
                    read_path = state.read_path
                else:
                    st = os.stat(state.local_path)
                    if (st.st_size, st.st_mtime_ns) != state.stat:
                        raise self._shard_changed_error(s, None)
                    read_path = state.read_path
                handle = self._formats[shard.format].open(read_path)
            except OSError as e:
                raise DataError(
                    f"dataset {self.name!r}: cannot open shard {self._shards[s].source}: {e}"
                ) from e
            self._handles[s] = (handle, pin)
            if len(self._handles) > _MAX_OPEN_SHARDS:
                # A reader still using the evicted handle keeps it alive until it is done;
                # its copy's pin goes with it.
                self._handles.popitem(last=False)
            return handle

    def _pin_remote_copy(self, shard: _Shard) -> tuple[Path, io.CopyPin]:
        try:
            return self._io.pin(str(shard.source))
        except DataError as e:
            raise DataError(f"dataset {self.name!r}: {e}") from e

    def _shard_changed_error(self, s: int, row: int | None) -> DataError:
        what = f"shard {self._shards[s].source}"
        if row is not None:
            what = f"record {RecordPointer(self.name, s, row).as_tuple()}: {what}"
        return DataError(
            f"dataset {self.name!r}: {what} changed since it "
            "was indexed; restore the original file, or re-create the Dataset to re-index it "
            f"(this changes its fingerprint; if the file is unchanged, delete {self.cache_dir})"
        )


def _file_version_key(path: Path, st: os.stat_result) -> str:
    """A name for one version of one file: SHA-256 of its path, size, mtime and inode."""
    return hashlib.sha256(
        f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode()
    ).hexdigest()


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
