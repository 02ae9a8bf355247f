"""Seeded shuffle buffer: a permutation, reproducible per (seed, lane, window)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.stages.shuffle import ShuffleBuffer


def run(items: list[int], buffer_size: int, seed: int, lane: int, window: int) -> list[int]:
    buf: ShuffleBuffer[int] = ShuffleBuffer(buffer_size, seed)
    buf.start_window(lane, window)
    out = [o for x in items for o in buf.push(x)]
    return out + buf.flush()


@given(
    items=st.lists(st.integers(), max_size=200), size=st.integers(0, 64), seed=st.integers(0, 2**32)
)
def test_output_is_a_reproducible_permutation(items: list[int], size: int, seed: int) -> None:
    out = run(items, size, seed, 0, 0)
    assert sorted(out) == sorted(items)
    assert out == run(items, size, seed, 0, 0)
    if size <= 1:
        assert out == items


def test_order_depends_on_seed_lane_and_window() -> None:
    items = list(range(100))
    base = run(items, 16, 1, 0, 0)
    assert base != items
    assert base != run(items, 16, 2, 0, 0)
    assert base != run(items, 16, 1, 1, 0)
    assert base != run(items, 16, 1, 0, 1)


@given(
    batches=st.lists(st.lists(st.integers(), max_size=40), max_size=8),
    size=st.integers(0, 24),
    seed=st.integers(0, 2**32),
)
def test_push_many_equals_pushing_one_at_a_time(
    batches: list[list[int]], size: int, seed: int
) -> None:
    items = [x for batch in batches for x in batch]
    buf: ShuffleBuffer[int] = ShuffleBuffer(size, seed)
    buf.start_window(3, 5)
    out = [o for batch in batches for o in buf.push_many(batch)]
    assert out + buf.flush() == run(items, size, seed, 3, 5)
