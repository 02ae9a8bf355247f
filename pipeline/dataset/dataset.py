"""``Dataset``: a named set of shards whose records are read by key, each shard indexed lazily.

A ``Dataset`` resolves its file patterns at construction and reads nothing else until first
used. A shard is indexed when it is first reached, not before: its content is hashed and its
index built, or mapped from its :class:`IndexCache`. The plan itself needs only each shard's
metadata (size and stat, or a remote file's validators).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import io
from pipeline.choice import parse_choice
from pipeline.dataset.bad_records import BadRecordPolicy, skip_summary
from pipeline.dataset.global_numbering import GlobalNumbering, number_globally
from pipeline.dataset.lru_cache import LruCache
from pipeline.dataset.pretokenized import TokenDeclaration
from pipeline.dataset.record_key import RecordPointer, split_record_key, split_record_keys
from pipeline.dataset.shard import IndexedShard, Shard, ShardIdentity, ShardMetadata
from pipeline.dataset.shard_access import ShardAccess
from pipeline.dataset.shard_paths import resolve_shards
from pipeline.errors import ConfigError
from pipeline.formats import ShardIndex, utf8_len
from pipeline.paths import zephon_home
from pipeline.state import ordered_fingerprint

MANIFEST_TAG = "zephon-manifest-v2"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_MAX_OPEN_SHARDS = 64  # bounds open file descriptors for datasets with many shards
_INDEX_LOCKS = 64  # shards are indexed under one of this many locks (striped by shard)
_MAX_MAPPED_INDEXES = 512  # bounds memory maps (the kernel allows ~65,000 a process)


class ExhaustedPolicy(StrEnum):
    """What the plan does when a dataset runs out of records (``exhausted``)."""

    REPEAT = "repeat"
    """Go on with its next epoch, in a new seeded order."""
    STOP = "stop"
    """Draw no more from it; a plan whose datasets all stop ends."""


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
    counted (``on_bad_record="skip"``) or fail indexing (``"error"``): a
    :class:`BadRecordPolicy`. ``exhausted`` tells the plan what to do when the dataset
    runs out: ``"repeat"`` it or ``"stop"`` (an :class:`ExhaustedPolicy`).

    A dataset of Megatron indexed datasets (``.bin`` and ``.idx``) or OLMo-core token files
    (``.npy``) is pre-tokenized: ``tokens`` declares their tokenizer (and the OLMo-core ids'
    width), ``read_record_tokens`` reads their ids, ``read_records`` their ids decoded to text
    (for the processing chain and evaluation), and ``record_text_bytes`` gives token counts.
    """

    def __init__(
        self,
        name: str,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        field: str = "text",
        exhausted: ExhaustedPolicy | str = ExhaustedPolicy.REPEAT,
        on_bad_record: BadRecordPolicy | str = BadRecordPolicy.SKIP,
        cache_dir: str | Path | None = None,
        io_options: Mapping[str, Any] | None = None,
        tokens: TokenDeclaration | None = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(
                f"dataset name {name!r} is invalid: use one or more of A-Z a-z 0-9 _ . -"
            )
        if not isinstance(field, str) or not field:
            raise ConfigError(f"dataset {name!r}: field must be a non-empty string, got {field!r}")
        self.name = name
        self.field = field
        self.exhausted = parse_choice(ExhaustedPolicy, exhausted, f"dataset {name!r}: exhausted")
        self.on_bad_record = parse_choice(
            BadRecordPolicy, on_bad_record, f"dataset {name!r}: on_bad_record"
        )
        self.cache_dir = (
            Path(cache_dir).expanduser() if cache_dir is not None else zephon_home() / "cache"
        )
        self._access = ShardAccess(
            name,
            field,
            cache_dir=self.cache_dir,
            on_bad_record=self.on_bad_record,
            io_options=io_options,
            tokens=tokens,
        )
        self._shards = [Shard.at(p) for p in resolve_shards(name, paths)]
        self.tokens = tokens
        self.pretokenized = _check_pretokenized(name, self._shards, tokens)
        self._indexed: list[IndexedShard | None] = [None] * len(self._shards)
        self._read_order: list[int] = []  # shards in the order they were first indexed
        self._metadata: list[ShardMetadata] | None = None
        self._numbering: GlobalNumbering | None = None
        self._init_transients()

    def set_io_options(self, io_options: Mapping[str, Any] | None) -> None:
        """Configure remote shard IO (the ``io_options`` of the class docstring); raises
        ConfigError naming the dataset when they are invalid."""
        self._access.set_io_options(io_options)

    @property
    def shard_cache(self) -> io.ShardCache:
        """Where the local copies of remote shards are kept, as ``io_options`` configure."""
        return self._access.shard_cache

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
        for transient in ("_locks", "_handles", "_mapped"):
            state.pop(transient)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transients()

    def _init_transients(self) -> None:
        """Open shards, mapped indexes and locks: per process, never pickled."""
        self._locks = [threading.Lock() for _ in range(_INDEX_LOCKS + 1)]  # the last: whole
        # A reader still using an evicted handle keeps it alive until it is done; a remote
        # shard's copy stays pinned as long as its handle.
        self._handles: LruCache[int, tuple[Any, io.CopyPin | None]] = LruCache(_MAX_OPEN_SHARDS)
        self._mapped: LruCache[int, ShardIndex] = LruCache(_MAX_MAPPED_INDEXES)

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
                self._metadata = [self._access.query_metadata(s) for s in self._shards]
            return self._metadata

    @property
    def manifest_fingerprint(self) -> str:
        """SHA-256 over the field and each shard's format and size (and a remote shard's ETag),
        in order: what the plan knows of the data without reading it (the content is checked
        as shards are read)."""
        canonical = [
            MANIFEST_TAG,
            self.field,
            [s.manifest_entry(m) for s, m in zip(self._shards, self.shard_metadata(), strict=True)],
        ]
        return ordered_fingerprint(canonical)

    def shard_index(self, shard: int) -> ShardIndex:
        """The index of one shard, built (or mapped from the cache) at its first use; the
        least recently used of more than 512 are unmapped and mapped again when asked for."""
        index = self._mapped.get(shard)
        if index is None:
            state = self._index_of(shard)
            index = self._mapped.get(shard)  # mapped if it was indexed just now
            if index is None:
                index = self._access.cached_index(
                    self._shards[shard], state.fingerprint, state.read_path
                )
                self._mapped.put(shard, index)
        return index

    def shard_records(self, shard: int) -> int:
        """Usable records of one shard (indexes it; known without mapping it later)."""
        return self._index_of(shard).records

    def shard_fingerprint(self, shard: int) -> str:
        """SHA-256 of one shard's raw bytes, computed when it is first read (of its remote
        version for a shard read by range: ``shard_identity``)."""
        return self._index_of(shard).fingerprint

    def shard_identity(self, shard: int) -> ShardIdentity:
        """What ``shard_fingerprint(shard)`` identifies (known without reading the shard)."""
        if self._access.reads_by_range(self._shards[shard]):
            return ShardIdentity.REMOTE_VERSION
        return ShardIdentity.CONTENT

    def read_shard_fingerprints(self, start: int = 0) -> dict[int, str]:
        """Content SHA-256 of the shards read (indexed) in this process, by shard: all, or
        from the ``start``-th read on (a caller that records them as they come)."""
        return {s: self._index_of(s).fingerprint for s in self._read_order[start:]}

    def read_shard_entries(self, start: int = 0) -> dict[str, dict[str, str]]:
        """A run's record of the shards read (:meth:`read_shard_fingerprints`), by shard
        index: each one's file name and SHA-256, marked ``"identity": "remote-version"``
        where the hash is of a remote version (content identities keep the entry they always
        had)."""
        entries = {}
        for s, sha in sorted(self.read_shard_fingerprints(start).items()):
            entry = {"file": str(self.shards[s]).rstrip("/").rsplit("/", 1)[-1], "sha256": sha}
            identity = self.shard_identity(s)
            if identity is not ShardIdentity.CONTENT:
                entry["identity"] = str(identity)
            entries[str(s)] = entry
        return entries

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
        shard, row = split_record_key(key)
        return int(self.shard_index(shard).table[row, 2])

    def pointer(self, key: int) -> RecordPointer:
        """Pointer of the record with key ``key``."""
        return RecordPointer(self.name, *split_record_key(key))

    def read_records(self, keys: np.ndarray | Sequence[int]) -> list[str]:
        """Texts of the records ``keys``, in the given order. Thread-safe.

        Raises ``DataError`` naming the record if a shard no longer holds what
        was indexed, ``IndexError`` for a key outside the dataset.
        """
        return self.read_records_and_bytes(keys)[0]

    def read_records_and_bytes(self, keys: np.ndarray | Sequence[int]) -> tuple[list[str], int]:
        """``read_records``' texts and their UTF-8 bytes in all (the indexed sizes, which
        every read checks), for callers that count bytes without looking them up again. A
        pre-tokenized dataset's texts are its ids decoded with the declared tokenizer."""
        if self.tokens is not None:  # pre-tokenized (the declaration is refused otherwise)
            tokenizer = self.tokens.load()
            texts = [tokenizer.decode(ids.tolist()) for ids in self.read_record_tokens(keys)[0]]
            return texts, sum(utf8_len(text) for text in texts)
        texts: list[str] = [""] * len(keys)
        text_bytes = 0
        for part in self._by_shard(keys):
            shard = self._shards[part.shard]
            got = self._access.read(shard, part.handle, part.index, part.rows)
            expected = part.index.text_bytes[part.rows].tolist()
            for pos, row, text, size in zip(
                part.positions, part.row_list, got, expected, strict=True
            ):
                if text is None or utf8_len(text) != size:
                    raise self._access.changed_error(
                        shard, RecordPointer(self.name, part.shard, row)
                    )
                texts[pos] = text
            text_bytes += sum(expected)
        return texts, text_bytes

    def read_record_tokens(self, keys: np.ndarray | Sequence[int]) -> tuple[list[np.ndarray], int]:
        """The token ids (uint32, no EOS) of the records ``keys`` of a pre-tokenized dataset,
        in the given order, and the bytes read from its files. Thread-safe; errors as
        ``read_records``'."""
        if not self.pretokenized:
            raise ConfigError(f"dataset {self.name!r} holds text, not token ids: read_records")
        tokens: list[np.ndarray] = [np.zeros(0, np.uint32)] * len(keys)
        read_bytes = 0
        for part in self._by_shard(keys):
            shard = self._shards[part.shard]
            got = self._access.read_tokens(shard, part.handle, part.index, part.rows)
            expected = part.index.lengths[part.rows].tolist()
            for pos, row, ids, count in zip(
                part.positions, part.row_list, got, expected, strict=True
            ):
                if len(ids) != count:  # the file was cut since it was indexed
                    raise self._access.changed_error(
                        shard, RecordPointer(self.name, part.shard, row)
                    )
                tokens[pos] = ids
                read_bytes += len(ids) * part.handle.dtype.itemsize
        return tokens, read_bytes

    def _by_shard(self, keys: np.ndarray | Sequence[int]) -> list[_ShardRows]:
        """The rows of ``keys`` in each of their shards, in shard order, with its index and an
        open handle; IndexError for a key outside the dataset."""
        shards, rows = split_record_keys(keys)
        # A tokenize chunk's few records are spread over several shards: grouping them in
        # plain Python costs less than numpy calls per shard.
        by_shard: dict[int, list[int]] = {}
        for pos, s in enumerate(shards.tolist()):
            by_shard.setdefault(s, []).append(pos)
        parts = []
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
            shard = self._shards[s]
            handle, _pin = self._handles.get_or_add(s, partial(self._access.open, shard, state))
            parts.append(_ShardRows(s, positions, wanted, wanted_rows, index, handle))
        return parts

    def token_contract(self) -> dict[str, Any] | None:
        """A pre-tokenized dataset's declaration in the data contract; None for text."""
        return None if self.tokens is None else self.tokens.contract()

    # -- the whole dataset (indexes every shard) --------------------------------

    @property
    def fingerprint(self) -> str:
        """SHA-256 over the field and each shard's format and content fingerprint, in order
        (reads every shard; the plan's order v1 uses it)."""
        return self._global_numbering().fingerprint

    @property
    def shard_fingerprints(self) -> list[str]:
        """SHA-256 of each shard file's raw bytes (reads every shard)."""
        return [self.shard_fingerprint(s) for s in range(len(self._shards))]

    @property
    def num_records(self) -> int:
        """Usable records over all shards (indexes every shard)."""
        return self._global_numbering().num_records

    @property
    def record_bytes(self) -> np.ndarray:
        """UTF-8 byte length of each record's text (int64), in global record order."""
        return self._global_numbering().record_bytes

    def global_keys(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Record keys of global record numbers (shard order, then row)."""
        return self._global_numbering().keys(self.name, indices)

    def read_texts(self, indices: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of global records ``indices``, in the given order (see ``read_records``)."""
        return self.read_records(self.global_keys(indices))

    def report(self) -> dict[str, Any]:
        """Record, shard and skip counts of the shards indexed so far, with up to 3
        ``"path:line"`` examples per reason.

        ``empty_shards`` counts indexed shards without usable records; Parquet
        examples give 1-based row numbers instead of lines.
        """
        indexed = [self._index_of(s) for s in self._read_order]
        skipped, examples = skip_summary(
            [(self._shards[s].source, st) for s, st in zip(self._read_order, indexed, strict=True)]
        )
        return {
            "records": sum(st.records for st in indexed),
            "shards": len(self._shards),
            "shards_indexed": len(indexed),
            "empty_shards": sum(st.records == 0 for st in indexed),
            "skipped": skipped,
            "examples": examples,
        }

    def _global_numbering(self) -> GlobalNumbering:
        numbering = self._numbering
        if numbering is None:
            indexed = [self._index_of(s) for s in range(len(self._shards))]
            with self._locks[-1]:
                if self._numbering is None:
                    self._numbering = number_globally(
                        self.name,
                        self.field,
                        shards=self._shards,
                        indexed=indexed,
                        text_bytes=lambda s: self.shard_index(s).text_bytes,
                    )
                numbering = self._numbering
        return numbering

    # -- indexing --------------------------------------------------------------

    def _index_of(self, s: int) -> IndexedShard:
        state = self._indexed[s]
        if state is None:
            with self._locks[s % _INDEX_LOCKS]:
                state = self._indexed[s]
                if state is None:
                    planned = self._metadata[s] if self._metadata is not None else None
                    state, index = self._access.index(self._shards[s], planned)
                    self._mapped.put(s, index)
                    self._indexed[s] = state
                    self._read_order.append(s)
        return state


@dataclass(frozen=True, slots=True)
class _ShardRows:
    """Some records of one shard, ready to read: where they go, their rows, the shard's index
    and an open handle."""

    shard: int
    positions: list[int]
    """Each record's position among the keys asked for."""
    rows: np.ndarray
    row_list: list[int]
    """``rows`` as Python ints (zipped with the records read)."""
    index: ShardIndex
    handle: Any


def _check_pretokenized(name: str, shards: list[Shard], tokens: TokenDeclaration | None) -> bool:
    """Whether the dataset's shards are pre-tokenized; ConfigError where they mix token files
    with text, are remote, or lack (or do not need) a declared tokenizer."""
    kinds = {s.format.pretokenized for s in shards}
    if len(kinds) > 1:
        raise ConfigError(
            f"dataset {name!r} mixes token files (.bin, .npy) with text files; make them two "
            "datasets"
        )
    pretokenized = True in kinds
    if pretokenized and tokens is None:
        raise ConfigError(
            f"dataset {name!r} is pre-tokenized (Megatron .bin/.idx or OLMo-core .npy files): "
            f"declare their tokenizer (data.pretokenized.{name}.tokenizer, or "
            "Dataset(tokens=TokenDeclaration(...))); it must be the run's tokenizer"
        )
    if tokens is not None and not pretokenized:
        raise ConfigError(
            f"dataset {name!r} holds text, but a tokenizer is declared for its files; remove "
            f"the declaration (data.pretokenized.{name})"
        )
    if pretokenized and any(s.remote for s in shards):
        raise ConfigError(
            f"dataset {name!r}: pre-tokenized files are read from local disk only; copy them "
            "locally (a Megatron .bin needs its .idx beside it)"
        )
    return pretokenized
