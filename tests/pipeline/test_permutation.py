"""``IndexPermutation``: a seeded bijection of any range, the same on every call."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.permutation import IndexPermutation


@settings(max_examples=150, deadline=None)
@given(size=st.integers(0, 3000), seed=st.lists(st.integers(0, 2**63), min_size=1, max_size=4))
def test_a_permutation_is_a_bijection_and_a_pure_function_of_size_and_seed(
    size: int, seed: list[int]
) -> None:
    perm = IndexPermutation(size, seed)
    values = perm.take(size)
    assert sorted(values) == list(range(size))
    assert values == IndexPermutation(size, seed).take(size)


@settings(max_examples=50, deadline=None)
@given(size=st.integers(50, 5000), seed=st.integers(0, 2**32))
def test_seeds_give_different_orders_that_look_shuffled(size: int, seed: int) -> None:
    first, second = IndexPermutation(size, [seed]).take(size), IndexPermutation(size, [seed + 1])
    assert first != second.take(size)
    fixed = sum(v == i for i, v in enumerate(first))
    assert fixed < 10  # a shuffle has about one fixed point
    ascending = sum(b > a for a, b in itertools.pairwise(first))
    # about half the steps go up: (n - 1) / 2, with a standard deviation of sqrt((n + 1) / 12)
    assert abs(ascending - (size - 1) / 2) < 6 * ((size + 1) / 12) ** 0.5


def test_a_huge_range_costs_nothing_to_build() -> None:
    perm = IndexPermutation(10**12, [7])
    values = perm.take(1000)
    assert len(set(values)) == 1000 and all(0 <= v < 10**12 for v in values)
