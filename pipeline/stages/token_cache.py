"""``TokenCache``: an encoder that answers records from a :class:`TokenStore` and fills it.

A record's outcome (its tokens, or the chain step that dropped it, and whether it overlaps a
scored document) is a function of its text, the tokenizer and the chain, so it is stored
under its shard's content fingerprint and those two: the first run that reads a record
tokenizes it, every later run, rank and lane reads it back. What is not found is asked of the
text encoder behind, in one call per chunk, and kept to be written, a segment per shard, once
enough has gathered or when the workers stop. A record's outcome is the same from either
path, so the batches, digests and elastic guarantees are those of an uncached run.

Design: docs/design/pipeline_token_cache.md
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from pipeline.dataset import Dataset
from pipeline.dataset.lru_cache import LruCache
from pipeline.dataset.record_key import RECORD_KEY_SHIFT, ROW_MASK, split_record_keys
from pipeline.io.token_store import Segment, TokenStore, entry_key
from pipeline.processing import KEPT
from pipeline.stages.encode import RecordOutcomes, TextEncoder
from pipeline.tokenizer import Tokenizer

FLUSH_RECORDS = 2048
"""Records of one shard gathered before they are written as a segment."""
FLUSH_TOKENS = 1 << 20
"""Tokens gathered over all shards before everything pending is written."""
COMPACT_SEGMENTS = 16
"""Segments an entry may have before the process that wrote it merges them when it stops."""
_REFRESH_S = 2.0
"""Seconds before an entry that misses records is listed again for others' segments."""
_LOADED_ENTRIES = 64
"""Entries kept in memory per process."""


@dataclass
class _Entry:
    """One entry's segments and a lookup of its rows."""

    segments: dict[str, Segment] = field(default_factory=dict)
    loaded_at: float = 0.0
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Sorted unique rows."""
    where: list[tuple[Segment, int, int]] = field(default_factory=list)
    """Per row of ``rows``: its segment, its index there and its first token there."""

    def add(self, segments: dict[str, Segment]) -> None:
        """Take ``segments`` in and rebuild the lookup (a row's first segment answers)."""
        self.segments.update(segments)
        parts = list(self.segments.values())
        if not parts:
            return
        rows = np.concatenate([s.rows for s in parts])
        self.rows, first = np.unique(rows, return_index=True)
        located = []
        for s in parts:
            starts = np.cumsum(s.lengths) - s.lengths
            located += [(s, i, int(start)) for i, start in enumerate(starts.tolist())]
        self.where = [located[i] for i in first.tolist()]

    def find(self, rows: np.ndarray) -> np.ndarray:
        """Index into ``where`` of each of ``rows``, -1 where the entry lacks it."""
        at = np.searchsorted(self.rows, rows)
        at[at == len(self.rows)] = 0
        hit = len(self.rows) > 0 and self.rows[at] == rows
        return np.where(hit, at, -1)


class TokenCache:
    """An :class:`~pipeline.stages.encode.Encoder` backed by ``store`` (see the module
    docstring); picklable, each process keeps its own mapped entries and pending writes."""

    def __init__(self, encoder: TextEncoder, store: TokenStore) -> None:
        self.encoder = encoder
        self.tokenizer_id = encoder.tokenizer_id
        self.store = store
        self._init_transients()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for transient in ("_lock", "_entries", "_keys", "_pending", "_pending_tokens", "_written"):
            state.pop(transient)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_transients()

    def _init_transients(self) -> None:
        self._lock = threading.Lock()
        self._entries: LruCache[str, _Entry] = LruCache(_LOADED_ENTRIES)
        self._keys: dict[tuple[str, int], str] = {}
        self._pending: dict[str, list[tuple[np.ndarray, RecordOutcomes]]] = {}
        self._pending_tokens = 0
        self._written: set[str] = set()
        self.writable = True
        """False once a write failed: the run goes on without filling the cache."""

    def tokenizer(self) -> Tokenizer:
        """The tokenizer, loaded once per process."""
        return self.encoder.tokenizer()

    def outcomes(self, dataset: Dataset, keys: np.ndarray) -> RecordOutcomes:
        """The outcomes of records ``keys`` of ``dataset``: from the store where it has them,
        else from the text (and kept to be written)."""
        if dataset.pretokenized:  # its tokens are on disk already: nothing to cache
            return self.encoder.outcomes(dataset, keys)
        n = len(keys)
        key_list = keys.tolist()
        # A chunk's few records: grouping them in plain Python costs less than numpy calls.
        by_shard: dict[int, list[int]] = {}
        for pos, key in enumerate(key_list):
            by_shard.setdefault(key >> RECORD_KEY_SHIFT, []).append(pos)
        tokens: list[np.ndarray | None] = [None] * n
        dropped_by = np.full(n, KEPT, np.int16)
        overlapping = np.zeros(n, bool)
        absent: list[int] = []
        text_bytes = 0
        for shard, positions in by_shard.items():
            rows = np.array([key_list[p] & ROW_MASK for p in positions], np.int64)
            found = self._find(self._key(dataset, shard), rows)
            for pos, located in zip(positions, found, strict=True):
                if located is None:
                    absent.append(pos)
                    continue
                segment, i, start = located
                step = dropped_by[pos] = segment.dropped_by[i]
                overlapping[pos] = segment.overlapping[i]
                if step == KEPT:
                    tokens[pos] = segment.tokens[start : start + int(segment.lengths[i])]
                text_bytes += dataset.text_bytes_of(key_list[pos])
        if not absent:
            return RecordOutcomes(tokens, dropped_by, overlapping, text_bytes, 0)
        absent.sort()
        missing = keys[absent]
        got = self.encoder.outcomes(dataset, missing)
        for pos, ids in zip(absent, got.tokens, strict=True):
            tokens[pos] = ids
        dropped_by[absent] = got.dropped_by
        overlapping[absent] = got.overlapping
        self._keep(dataset, missing, got)
        return RecordOutcomes(
            tokens, dropped_by, overlapping, text_bytes + got.text_bytes, got.encoded
        )

    def close(self) -> None:
        """Write everything pending, merge the entries written here that have many segments
        and evict the least recently used entries beyond the store's bound."""
        with self._lock:
            self._flush(list(self._pending))
            written, self._written = self._written, set()
        if not self.writable:
            return
        try:
            for key in written:
                segments = self.store.segments(key)
                if len(segments) > COMPACT_SEGMENTS:
                    self.store.replace(key, list(segments), _merged(list(segments.values())))
            self.store.evict()
        except OSError as e:
            self._stop_writing(e)

    # -- lookups ---------------------------------------------------------------------------

    def _key(self, dataset: Dataset, shard: int) -> str:
        """The entry key of ``dataset``'s shard ``shard`` (computed once per process)."""
        key = self._keys.get((dataset.name, shard))
        if key is None:
            key = self._keys[(dataset.name, shard)] = entry_key(
                dataset.shard_fingerprint(shard),
                self.tokenizer().fingerprint,
                self.encoder.chain_fingerprint(dataset.name),
            )
        return key

    def _find(self, key: str, rows: np.ndarray) -> list[tuple[Segment, int, int] | None]:
        """Where each of ``rows`` is stored in entry ``key`` (None: not stored)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = _Entry()
                self._entries.put(key, entry)
            at = entry.find(rows)
            # Listed on first use, and again for a miss once others may have added segments.
            if entry.loaded_at == 0.0 or (
                (at < 0).any() and time.monotonic() - entry.loaded_at > _REFRESH_S
            ):
                entry.add(self.store.segments(key, known=frozenset(entry.segments)))
                entry.loaded_at = time.monotonic()
                at = entry.find(rows)
            return [entry.where[i] if i >= 0 else None for i in at.tolist()]

    # -- writes ----------------------------------------------------------------------------

    def _keep(self, dataset: Dataset, keys: np.ndarray, got: RecordOutcomes) -> None:
        """Keep the just encoded records ``keys`` to be written, by entry; write what is due."""
        if not self.writable:
            return
        shards, rows = split_record_keys(keys)
        with self._lock:
            for s in np.unique(shards).tolist():
                at = np.flatnonzero(shards == s)
                part = RecordOutcomes(
                    [got.tokens[i] for i in at.tolist()],
                    got.dropped_by[at],
                    got.overlapping[at],
                    0,
                    len(at),
                )
                self._pending.setdefault(self._key(dataset, s), []).append((rows[at], part))
                self._pending_tokens += sum(len(t) for t in part.tokens if t is not None)
            due = [k for k, parts in self._pending.items() if _count(parts) >= FLUSH_RECORDS]
            self._flush(list(self._pending) if self._pending_tokens >= FLUSH_TOKENS else due)

    def _flush(self, keys: list[str]) -> None:
        """Write the pending records of entries ``keys`` (the lock held)."""
        for key in keys:
            parts = self._pending.pop(key, [])
            if not parts or not self.writable:
                continue
            segment = _segment(parts)
            self._pending_tokens -= len(segment.tokens)
            try:
                name = self.store.add(key, segment)
            except OSError as e:
                self._stop_writing(e)
                continue
            self._written.add(key)
            entry = self._entries.get(key)
            if entry is not None:
                entry.add({name: segment})
        if not self._pending:
            self._pending_tokens = 0

    def _stop_writing(self, error: OSError) -> None:
        if self.writable:
            self.writable = False
            self._pending.clear()
            warnings.warn(
                f"token cache {self.store.root}: cannot write ({error}); this run goes on "
                "tokenizing without filling the cache (free space there, or set "
                "data.token_cache: 0 to turn it off)",
                RuntimeWarning,
                stacklevel=2,
            )


def _count(parts: list[tuple[np.ndarray, RecordOutcomes]]) -> int:
    return sum(len(rows) for rows, _ in parts)


def _segment(parts: list[tuple[np.ndarray, RecordOutcomes]]) -> Segment:
    """One segment of pending records (a row encoded twice is written once)."""
    rows = np.concatenate([r for r, _ in parts])
    tokens = [t for _, p in parts for t in p.tokens]
    dropped_by = np.concatenate([p.dropped_by for _, p in parts])
    overlapping = np.concatenate([p.overlapping for _, p in parts])
    rows, first = np.unique(rows, return_index=True)
    chosen = [tokens[i] for i in first.tolist()]
    lengths = np.fromiter((0 if t is None else len(t) for t in chosen), np.int64, len(chosen))
    kept = [t for t in chosen if t is not None]
    ids = np.concatenate(kept).astype(np.uint32) if kept else np.zeros(0, np.uint32)
    return Segment(rows, lengths, dropped_by[first], overlapping[first], ids)


def _merged(segments: list[Segment]) -> Segment:
    """One segment of the records of ``segments`` (a row's first segment answers)."""
    entry = _Entry()
    entry.add({str(i): s for i, s in enumerate(segments)})
    chosen = entry.where
    lengths = np.fromiter((s.lengths[i] for s, i, _ in chosen), np.int64, len(chosen))
    pieces = [s.tokens[start : start + int(s.lengths[i])] for s, i, start in chosen]
    return Segment(
        entry.rows,
        lengths,
        np.fromiter((s.dropped_by[i] for s, i, _ in chosen), np.int16, len(chosen)),
        np.fromiter((s.overlapping[i] for s, i, _ in chosen), bool, len(chosen)),
        np.concatenate(pieces).astype(np.uint32) if pieces else np.zeros(0, np.uint32),
    )
