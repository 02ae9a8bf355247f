"""Order v2: shards permuted per epoch, records permuted within windows of shards.

Epoch ``e`` permutes the dataset's ``S`` shards and cuts the sequence into ``B = max(1,
S // W)`` consecutive blocks of ``W`` to ``2W - 1`` shards; the training records of a block
are permuted by a seeded Feistel bijection (:class:`IndexPermutation`), so a stream position
costs O(1) and only the shards of the blocks a lane has reached are indexed (the next block
is indexed ahead, on a background thread). Held-out documents and the calibration sample
come from a few seeded shards. Memory is O(shards), never O(records).
Design: docs/design/pipeline_order.md.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.dataset import RECORD_KEY_SHIFT, Dataset, record_keys, split_record_keys
from pipeline.errors import DataError
from pipeline.order.base import (
    CALIBRATION_STREAM,
    HOLDOUT_STREAM,
    DatasetOrder,
    OrderSettings,
    OrderVersion,
    holdout_count,
)
from pipeline.permutation import IndexPermutation
from pipeline.state import ordered_fingerprint

SHARD_STREAM = 0x5A4D
CALIBRATION_SHARDS = 16
"""The calibration sample spreads over at least this many shards (where there are)."""
_BLOCKS_KEPT = 4


@dataclass(frozen=True)
class _Block:
    """One window of shards of one epoch: its shards, their training-record prefix sums and
    the permutation of its records."""

    shards: np.ndarray
    prefix: list[int]
    permutation: IndexPermutation


class ShardWindowOrder(DatasetOrder):
    """Order v2 (module docstring); ``shard_window`` is ``W``, part of the data contract."""

    version = OrderVersion.V2

    def __init__(self, dataset: Dataset, settings: OrderSettings) -> None:
        super().__init__(dataset, settings)
        self.shard_window = settings.shard_window
        shards = dataset.num_shards
        blocks = max(1, shards // settings.shard_window)
        self._bounds = [b * shards // blocks for b in range(blocks + 1)]
        self._lock = threading.RLock()
        self._heldout: tuple[np.ndarray, dict[int, np.ndarray]] | None = None
        self._calibration: np.ndarray | None = None
        self._epoch_shards: OrderedDict[int, np.ndarray] = OrderedDict()
        # per epoch: known block starts, (blocks, starts) sorted by block (starts ascend too)
        self._block_starts: dict[int, tuple[list[int], list[int]]] = {}
        self._blocks: OrderedDict[tuple[int, int], _Block] = OrderedDict()
        self._total: int | None = None  # training records of an epoch, once all are counted
        self._ahead: set[tuple[int, int]] = set()

    def contract_fingerprint(self) -> str:
        """The manifest fingerprint: the shards' formats and sizes, not their content."""
        return self.dataset.manifest_fingerprint

    # -- held-out records and calibration: a few seeded shards -----------------------------

    def heldout_keys(self) -> np.ndarray:
        """``k = min(K, floor(n / 4))`` records of the pool: the shortest prefix of
        ``perm(name)`` over shards holding ``4K`` records (or all), chosen by a seeded
        permutation of the pool."""
        return self._heldout_selection()[0]

    def _heldout_selection(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        with self._lock:
            if self._heldout is None:
                self._heldout = self._select_heldout()
            return self._heldout

    def _select_heldout(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        if not self.settings.holds_out:
            return np.zeros(0, dtype=np.int64), {}
        ds = self.dataset
        order = np.random.default_rng([HOLDOUT_STREAM, self.name_key]).permutation(ds.num_shards)
        pool, prefix = [], [0]
        for shard in order.tolist():
            pool.append(shard)
            prefix.append(prefix[-1] + ds.shard_records(shard))
            if prefix[-1] >= 4 * self.settings.holdout_docs:
                break
        take = holdout_count(ds, prefix[-1], self.settings.holdout_docs)
        picks = IndexPermutation(prefix[-1], [HOLDOUT_STREAM, self.name_key, 2]).take(take)
        shards, rows = [], []
        for q in picks:
            j = bisect.bisect_right(prefix, q) - 1
            shards.append(pool[j])
            rows.append(q - prefix[j])
        by_shard: dict[int, list[int]] = {}
        for shard, row in zip(shards, rows, strict=True):
            by_shard.setdefault(shard, []).append(row)
        holes = {s: np.array(sorted(r), dtype=np.int64) for s, r in by_shard.items()}
        return record_keys(np.array(shards, np.int64), np.array(rows, np.int64)), holes

    def calibration_keys(self) -> np.ndarray:
        """Records of seeded shards (``perm(name)`` over shards), each shard's in a seeded
        order, up to ``calibration_bytes / 16`` bytes a shard, until ``calibration_bytes``."""
        with self._lock:
            if self._calibration is None:
                self._calibration = self._select_calibration()
            return self._calibration

    def _select_calibration(self) -> np.ndarray:
        ds = self.dataset
        budget = self.settings.calibration_bytes
        quota = max(1, budget // CALIBRATION_SHARDS)
        order = np.random.default_rng([self.name_key, CALIBRATION_STREAM, 2]).permutation(
            ds.num_shards
        )
        keys: list[int] = []
        total = 0

        def enough() -> bool:
            return total >= budget or len(keys) >= self.settings.max_calibration_records

        for shard in order.tolist():
            index = ds.shard_index(shard)
            rows = IndexPermutation(len(index), [self.name_key, CALIBRATION_STREAM, shard])
            taken = 0
            for i in range(len(index)):
                row = rows[i]
                size = int(index.table[row, 2])
                keys.append((shard << RECORD_KEY_SHIFT) | row)
                taken += size
                total += size
                if taken >= quota or enough():
                    break
            if enough():
                break
        return np.array(keys, dtype=np.int64)

    def _calibration_shards(self) -> list[int]:
        """The shards the calibration sample comes from, sorted."""
        return sorted(set(split_record_keys(self.calibration_keys())[0].tolist()))

    def calibration_identity(self) -> str:
        """The content fingerprints of the shards the sample comes from."""
        shards = self._calibration_shards()
        canonical = [self.version, [[s, self.dataset.shard_fingerprint(s)] for s in shards]]
        return ordered_fingerprint(canonical)

    def mean_cost(self, tokens_per_byte: float) -> float:
        """Mean cost of the calibration sample's records (no other shard is read for it)."""
        keys = self.calibration_keys()
        sizes = self.dataset.record_text_bytes(keys)
        costs = np.rint(sizes * tokens_per_byte).astype(np.int64) + 1
        return int(costs.sum()) / max(1, len(keys))

    def estimated_text_bytes(self) -> float:
        """Every shard's file size times the text bytes per file byte of the calibration
        shards (metadata only, beyond those shards)."""
        metadata = self.dataset.shard_metadata()
        shards = self._calibration_shards()
        text = sum(int(self.dataset.shard_index(s).text_bytes.sum()) for s in shards)
        size = sum(metadata[s].size for s in shards)
        return sum(m.size for m in metadata) * text / max(1, size)

    # -- the training stream ------------------------------------------------------------------

    def training_keys(self) -> np.ndarray:
        """Every shard's rows but the held-out ones (indexes every shard)."""
        holes = self._heldout_selection()[1]
        keys = []
        for shard in range(self.dataset.num_shards):
            rows = np.arange(self.dataset.shard_records(shard), dtype=np.int64)
            if shard in holes:
                rows = np.setdiff1d(rows, holes[shard])
            keys.append(record_keys(shard, rows))
        return np.concatenate(keys) if keys else np.zeros(0, np.int64)

    def key_at(self, position: int) -> int:
        """Epoch, block, permuted record of the block, its shard and training row."""
        with self._lock:
            epoch, b, start = self._locate(position)
            block = self._block(epoch, b)
            q = block.permutation[position - epoch * (self._total or 0) - start]
            j = bisect.bisect_right(block.prefix, q) - 1
            shard = int(block.shards[j])
            row = self._training_row(shard, q - block.prefix[j])
        return (shard << RECORD_KEY_SHIFT) | row

    def in_first_epoch(self, position: int) -> bool:
        """Whether ``position`` is below the number of training records (counts shards only
        as far as ``position`` needs)."""
        with self._lock:
            if self._total is not None:
                return position < self._total
            return self._find_block(0, position) is not None

    def epoch_start(self, position: int) -> int:
        """0 in epoch 0 (counting shards only as far as ``position`` needs), else
        ``position`` less its offset within an epoch."""
        with self._lock:
            epoch, _, _ = self._locate(position)
            return epoch * (self._total or 0)

    def cursor(self, position: int) -> list[int] | None:
        """``[epoch, block, block start, records of an epoch or -1]`` of ``position``: what a
        restored plan needs to place it without counting the blocks before it."""
        with self._lock:
            if self._total is None and self._find_block(0, position) is None:
                return None  # past the end of a dataset that stops after epoch 0
            epoch, b, start = self._locate(position)
            return [epoch, b, start, -1 if self._total is None else self._total]

    def adopt_cursor(self, cursor: Sequence[int]) -> None:
        """Take a block's start (and the epoch's size) from a saved plan state."""
        epoch, b, start, total = (int(v) for v in cursor)
        with self._lock:
            self._add_block_start(epoch, b, start)
            if total >= 0:
                self._total = total

    def _locate(self, position: int) -> tuple[int, int, int]:
        """``(epoch, block, start of the block in its epoch)`` of a stream position."""
        if self._total is None:
            found = self._find_block(0, position)
            if found is not None:
                return 0, found[0], found[1]
        assert self._total is not None  # every block of epoch 0 was counted just above
        if self._total == 0:
            raise DataError(
                f"dataset {self.dataset.name!r} has no usable training records "
                f"({self.dataset.num_shards} files; {self.dataset.report()['skipped']} "
                "skipped); check `field=` and the files"
            )
        epoch, offset = divmod(position, self._total)
        found = self._find_block(epoch, offset)
        assert found is not None, f"offset {offset} lies in an epoch of {self._total} records"
        return epoch, found[0], found[1]

    def _find_block(self, epoch: int, offset: int) -> tuple[int, int] | None:
        """The block of ``epoch`` holding ``offset`` and its start, counting blocks forward
        from the last known start before it; None past the epoch's end (which sets the
        epoch's size)."""
        blocks, starts = self._block_starts.setdefault(epoch, ([0], [0]))
        i = bisect.bisect_right(starts, offset) - 1
        b, start = blocks[i], starts[i]
        last = len(self._bounds) - 1
        while b < last:
            if i + 1 < len(blocks) and blocks[i + 1] == b + 1:
                end = starts[i + 1]
            else:
                end = start + sum(self._training_count(s) for s in self._in_process_order(epoch, b))
                self._add_block_start(epoch, b + 1, end)
            if offset < end:
                return b, start
            i = bisect.bisect_left(blocks, b + 1)
            b, start = b + 1, end
        if self._total is None:
            self._total = start  # the start of the block past the last: the epoch's size
        return None

    def _add_block_start(self, epoch: int, b: int, start: int) -> None:
        blocks, starts = self._block_starts.setdefault(epoch, ([0], [0]))
        i = bisect.bisect_left(blocks, b)
        if i < len(blocks) and blocks[i] == b:
            assert starts[i] == start, f"block {b} starts at {starts[i]}, a state says {start}"
            return
        blocks.insert(i, b)
        starts.insert(i, start)

    def _in_process_order(self, epoch: int, b: int) -> list[int]:
        """A block's shards, rotated for this process: the ranks of a node that index a new
        block at once start at different shards (a lock per shard dedupes the work), so
        they share it instead of queueing behind each other. Only the order of indexing
        changes, never the plan."""
        shards = self._shards_of_block(epoch, b).tolist()
        turn = _rotation(len(shards))
        return shards[turn:] + shards[:turn]

    def _shards_of_block(self, epoch: int, b: int) -> np.ndarray:
        order = self._epoch_shards.get(epoch)
        if order is None:
            order = np.random.default_rng([self.seed, self.name_key, epoch, SHARD_STREAM])
            order = order.permutation(self.dataset.num_shards)
            self._epoch_shards[epoch] = order
            while len(self._epoch_shards) > 2:
                self._epoch_shards.popitem(last=False)
        return order[self._bounds[b] : self._bounds[b + 1]]

    def _training_count(self, shard: int) -> int:
        holes = self._heldout_selection()[1].get(shard)
        return self.dataset.shard_records(shard) - (0 if holes is None else len(holes))

    def _training_row(self, shard: int, j: int) -> int:
        """The ``j``-th row of ``shard`` that is not held out."""
        holes = self._heldout_selection()[1].get(shard)
        if holes is None:
            return j
        # rows skipped before the answer: holes h_i with h_i - i <= j
        return j + int(np.searchsorted(holes - np.arange(len(holes)), j, side="right"))

    def _block(self, epoch: int, b: int) -> _Block:
        key = (epoch, b)
        block = self._blocks.get(key)
        if block is None:
            shards = self._shards_of_block(epoch, b)
            prefix = [0]
            for shard in shards.tolist():
                prefix.append(prefix[-1] + self._training_count(shard))
            seed = [self.seed, self.name_key, epoch, b, SHARD_STREAM]
            block = self._blocks[key] = _Block(shards, prefix, IndexPermutation(prefix[-1], seed))
            while len(self._blocks) > _BLOCKS_KEPT:
                self._blocks.popitem(last=False)
            self._index_ahead(epoch, b)
        return block

    def _index_ahead(self, epoch: int, b: int) -> None:
        """Index the next block's shards on a background thread: a lane reaching it does not
        wait for them (the look-ahead is one block)."""
        nxt = (epoch, b + 1) if b + 2 < len(self._bounds) else (epoch + 1, 0)
        if nxt in self._ahead:
            return
        self._ahead.add(nxt)
        shards = self._in_process_order(*nxt)
        self.closing.clear()

        def index_shards() -> None:
            for shard in shards:
                if self.closing.is_set():  # the pipeline closed: leave the rest for later
                    return
                try:
                    self.dataset.shard_index(shard)
                except Exception:  # raised again, with its context, when the shard is read
                    return

        thread = threading.Thread(target=index_shards, name="zephon-index-ahead", daemon=True)
        self.background = [t for t in self.background if t.is_alive()] + [thread]
        thread.start()


def _rotation(count: int) -> int:
    """Where this process starts in a list of ``count`` shards: torchrun's local rank spread
    evenly over the node's ranks, else the process id spread by Fibonacci hashing (process
    ids of ranks started together are consecutive: ``pid % count`` would start them side
    by side, one behind the other)."""
    if count <= 1:
        return 0
    local, world = os.environ.get("LOCAL_RANK", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and world.isdigit() and int(world) > 0:
        return int(local) * count // int(world)
    spread = (os.getpid() * 0x9E3779B1) & 0xFFFFFFFF  # consecutive ids land ~0.618 apart
    return spread * count >> 32
