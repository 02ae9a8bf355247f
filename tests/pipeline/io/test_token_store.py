"""The token store: a segment is read whole or not at all (torn, damaged, killed mid-write,
two writers at once), and the store keeps its bound by evicting the least recently used."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import Dataset, load_tokenizer
from pipeline.io.token_store import Segment, TokenStore, entry_key
from pipeline.processing import KEPT, Decontaminator, ProcessChain
from pipeline.stages.encode import TextEncoder
from pipeline.stages.token_cache import TokenCache
from tests.support.helpers import write_jsonl

REPO = Path(__file__).resolve().parents[3]


@st.composite
def segments(draw: st.DrawFn) -> Segment:
    rows = np.array(sorted(draw(st.sets(st.integers(0, 10**6), max_size=30))), np.int64)
    lengths = np.array([draw(st.integers(0, 20)) for _ in rows], np.int64)
    dropped = np.array([draw(st.sampled_from([KEPT, 0, 1])) for _ in rows], np.int16)
    lengths[dropped != KEPT] = 0
    tokens = np.array([draw(st.integers(0, 2**32 - 1)) for _ in range(lengths.sum())], np.uint32)
    overlapping = np.array([draw(st.booleans()) for _ in rows], bool) & (dropped == KEPT)
    return Segment(rows, lengths, dropped, overlapping, tokens)


def same(a: Segment, b: Segment) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("rows", "lengths", "dropped_by", "overlapping", "tokens")
    )


@settings(max_examples=60, deadline=None)
@given(segment=segments())
def test_a_segment_reads_back_as_written(segment: Segment) -> None:
    read = Segment.from_buffer(memoryview(segment.to_bytes()))
    assert read is not None and same(read, segment)


@settings(max_examples=80, deadline=None)
@given(segment=segments(), data=st.data())
def test_a_torn_or_damaged_segment_is_never_read(segment: Segment, data: st.DataObject) -> None:
    whole = segment.to_bytes()
    cut = data.draw(st.integers(0, len(whole) - 1))
    assert Segment.from_buffer(memoryview(whole[:cut])) is None
    flipped = bytearray(whole)
    at = data.draw(st.integers(0, len(whole) - 1))
    flipped[at] ^= 1 << data.draw(st.integers(0, 7))
    assert Segment.from_buffer(memoryview(bytes(flipped))) is None


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(segment=segments())
def test_only_whole_segment_files_are_read(tmp_path: Path, segment: Segment) -> None:
    store = TokenStore(tmp_path / "tokens", 1 << 30)
    key = entry_key("shard", "tokenizer", "chain")
    name = store.add(key, segment)
    folder = store.entry_dir(key)
    (folder / ".left-by-a-killed-writer.tmp").write_bytes(segment.to_bytes())
    (folder / "torn.seg").write_bytes(segment.to_bytes()[:-3])
    found = store.segments(key)
    assert list(found) == [name] and same(found[name], segment)
    for path in folder.iterdir():
        path.unlink()


def test_a_writer_killed_mid_write_leaves_nothing_a_reader_accepts(tmp_path: Path) -> None:
    """The writer is SIGKILLed after writing half of a segment, then just before its rename:
    neither leaves a segment."""
    for kill_at in ("write", "rename"):
        script = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
import numpy as np
from pipeline.io import token_store
from pipeline.io.token_store import Segment, TokenStore
real_fdopen, real_replace = os.fdopen, os.replace
class HalfWriter:
    def __init__(self, f): self.f = f
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def write(self, data):
        self.f.write(data[: len(data) // 2]); self.f.flush(); os.kill(os.getpid(), signal.SIGKILL)
if {kill_at!r} == "write":
    token_store.os.fdopen = lambda fd, mode: HalfWriter(real_fdopen(fd, mode))
else:
    token_store.os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)
rows = np.arange(1000, dtype=np.int64)
segment = Segment(rows, np.full(1000, 5, np.int64), np.full(1000, -1, np.int16),
                  np.zeros(1000, bool), np.arange(5000, dtype=np.uint32))
TokenStore({str(tmp_path / kill_at)!r}, 1 << 30).add("ab" * 32, segment)
"""
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert done.returncode == -9, done.stderr
        store = TokenStore(tmp_path / kill_at, 1 << 30)
        assert [p.name.endswith(".tmp") for p in store.entry_dir("ab" * 32).iterdir()] == [True]
        assert store.segments("ab" * 32) == {}


def _fill(args: tuple[str, str, str]) -> int:
    """One run filling the cache from a shard (a separate process)."""
    path, index, tokens = args
    encoder = TokenCache(
        TextEncoder("gpt2", ProcessChain([Decontaminator([])])), TokenStore(Path(tokens), 1 << 30)
    )
    got = encoder.outcomes(Dataset("web", [path], cache_dir=index), np.arange(400, dtype=np.int64))
    encoder.close()
    return got.encoded


def test_two_runs_filling_one_shard_at_once_leave_whole_records(tmp_path: Path) -> None:
    texts = [f"record {i}: " + "words of text " * (i % 13 + 1) for i in range(400)]
    path = str(write_jsonl(tmp_path / "web.jsonl", texts))
    Dataset("web", [path], cache_dir=tmp_path / "idx").shard_fingerprint(0)  # index once
    jobs = [(path, str(tmp_path / "idx"), str(tmp_path / "tokens"))] * 2
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        encoded = pool.map(_fill, jobs)
    assert sum(encoded) >= 400
    reader = TokenCache(
        TextEncoder("gpt2", ProcessChain([Decontaminator([])])),
        TokenStore(tmp_path / "tokens", 1 << 30),
    )
    got = reader.outcomes(Dataset("web", [path], cache_dir=tmp_path / "idx"), np.arange(400))
    assert got.encoded == 0
    tokenizer = load_tokenizer("gpt2")
    assert [t.tolist() for t in got.tokens] == [tokenizer.encode(t) for t in texts]


def test_the_store_evicts_the_least_recently_used_entries_beyond_its_bound(
    tmp_path: Path,
) -> None:
    segment = Segment(
        np.arange(100, dtype=np.int64),
        np.full(100, 10, np.int64),
        np.full(100, KEPT, np.int16),
        np.zeros(100, bool),
        np.zeros(1000, np.uint32),
    )
    size = len(segment.to_bytes())
    store = TokenStore(tmp_path / "tokens", 3 * size)
    keys = [entry_key(f"shard {i}", "tok", "chain") for i in range(5)]
    for i, key in enumerate(keys):
        store.add(key, segment)
        os.utime(store.entry_dir(key), (time.time() - 100 + i, time.time() - 100 + i))
    store.segments(keys[0])  # used now: the most recent
    assert store.evict() == 2
    assert store.size() <= 3 * size
    kept = [k for k in keys if store.entry_dir(k).exists()]
    assert kept == [keys[0], keys[3], keys[4]]
