"""The plan: lane split, permutations, exhaustion policies, mixture validation, held-out records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import ConfigError, Dataset, WorkSource, load_tokenizer
from pipeline.source import cut_to_budget


def drain(source: WorkSource, lanes: int) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for lane in range(lanes):
        plan = source.lane_plan(lane, lanes)
        records = []
        while (chunk := plan.next_chunk()) is not None:
            records += list(zip(chunk.datasets.tolist(), chunk.records.tolist(), strict=True))
        out[lane] = records
    return out


@pytest.mark.parametrize("lanes", [1, 3, 8, 64])
def test_stop_policy_visits_every_record_exactly_once_across_lanes(
    small: list[Dataset], lanes: int
) -> None:
    source = WorkSource(small, {"a": 0.7, "b": 0.3}, seed=1, chunk_tokens=16)
    source.calibrate(load_tokenizer("gpt2"))
    seen = Counter(r for records in drain(source, lanes).values() for r in records)
    assert set(seen.values()) == {1}
    assert sorted(seen) == [(0, i) for i in range(37)] + [(1, i) for i in range(11)]


def test_repeat_policy_uses_a_fresh_permutation_each_epoch(endless: list[Dataset]) -> None:
    source = WorkSource(endless[:1], {"a": 1.0}, seed=1, chunk_tokens=1)
    source.calibrate(load_tokenizer("gpt2"))
    plan = source.lane_plan(0, 1)
    order = [int(plan.next_chunk().records[0]) for _ in range(3 * 37)]
    epochs = [order[i * 37 : (i + 1) * 37] for i in range(3)]
    assert all(sorted(e) == list(range(37)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


def test_plan_resumes_from_its_state(endless: list[Dataset]) -> None:
    source = WorkSource(endless, {"a": 0.5, "b": 0.5}, seed=3, chunk_tokens=40)
    source.calibrate(load_tokenizer("gpt2"))
    plan = source.lane_plan(2, 4)
    for _ in range(3):
        plan.next_chunk()
    state = json.loads(json.dumps(plan.state()))
    expected = plan.next_chunk()
    resumed = source.lane_plan(2, 4, state).next_chunk()
    np.testing.assert_array_equal(resumed.records, expected.records)
    assert resumed.index == expected.index == 3


def test_plan_resumes_from_every_state_including_the_first(endless: list[Dataset]) -> None:
    """Phase offsets and the first draw are recomputed from the plan, never stored: a plan
    restored from any state, the very first included, continues exactly."""
    source = WorkSource(endless, {"a": 0.8, "b": 0.2}, seed=4, chunk_tokens=24)
    source.calibrate(load_tokenizer("gpt2"))
    plan = source.lane_plan(1, 3)
    states, chunks = [], []
    for _ in range(12):
        states.append(json.loads(json.dumps(plan.state())))
        chunks.append(plan.next_chunk())
    for i, state in enumerate(states):
        resumed = source.lane_plan(1, 3, state)
        for expected in chunks[i : i + 3]:
            got = resumed.next_chunk()
            np.testing.assert_array_equal(got.datasets, expected.datasets)
            np.testing.assert_array_equal(got.records, expected.records)


def test_seed_changes_the_order(small: list[Dataset]) -> None:
    orders = []
    for seed in (1, 2):
        source = WorkSource(small, {"a": 0.5, "b": 0.5}, seed=seed, chunk_tokens=10_000)
        source.calibrate(load_tokenizer("gpt2"))
        orders.append(source.lane_plan(0, 1).next_chunk().records.tolist())
    assert orders[0] != orders[1]


@pytest.mark.parametrize(
    ("mixture", "message"),
    [
        ({"a": 0.5, "b": 0.5, "c": 0.1}, "unknown dataset"),
        ({"a": -0.1, "b": 1.0}, "must be finite and >= 0"),
        ({"a": 0.0, "b": 0.0}, "sum to zero"),
        ({"a": 1.0}, "no mixture weight"),
        ({"a": float("nan"), "b": 1.0}, "must be finite"),
    ],
)
def test_bad_mixtures_are_refused_before_any_work(
    small: list[Dataset], mixture: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        WorkSource(small, mixture)


def test_duplicate_dataset_names_are_refused(small: list[Dataset]) -> None:
    with pytest.raises(ConfigError, match="unique"):
        WorkSource([small[0], small[0]], {"a": 1.0})


@pytest.mark.parametrize("lanes", [1, 4])
def test_held_out_records_are_never_trained_on(small: list[Dataset], lanes: int) -> None:
    source = WorkSource(
        small, {"a": 0.7, "b": 0.3}, seed=1, chunk_tokens=16, holdout_bytes=60, holdout_docs=3
    )
    source.calibrate(load_tokenizer("gpt2"))
    held = {d: set(source.heldout_records(d).tolist()) for d in range(2)}
    for d, ds in enumerate(small):
        assert len(held[d]) == min(3, ds.num_records // 4)
    seen = Counter(r for records in drain(source, lanes).values() for r in records)
    trained = {d: {i for dd, i in seen if dd == d} for d in range(2)}
    for d, ds in enumerate(small):  # "stop": every other record exactly once
        assert trained[d] == set(range(ds.num_records)) - held[d]
    assert set(seen.values()) == {1}


def test_held_out_records_depend_on_the_dataset_only(small: list[Dataset]) -> None:
    def held(seed: int, mixture: dict[str, float]) -> list[list[int]]:
        source = WorkSource(small, mixture, seed=seed, holdout_bytes=80)
        return [source.heldout_records(d).tolist() for d in range(2)]

    assert held(1, {"a": 0.7, "b": 0.3}) == held(9, {"a": 0.1, "b": 0.9})
    assert WorkSource(small, {"a": 1, "b": 1}, holdout_bytes=0).contract()["holdout_bytes"] == 0


def test_held_out_documents_are_a_quarter_of_the_records_at_most(small: list[Dataset]) -> None:
    source = WorkSource(small, {"a": 0.5, "b": 0.5}, holdout_bytes=10**9, holdout_docs=10**6)
    assert [len(source.heldout_records(d)) for d in range(2)] == [
        ds.num_records // 4 for ds in small
    ]
    texts = source.heldout_documents(0)  # a budget above the documents' bytes: all of them
    assert texts == small[0].read_texts(source.heldout_records(0))


def test_a_dataset_too_small_to_hold_out_two_documents_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"text": f"record {i}"}) + "\n" for i in range(7)))
    source = WorkSource([Dataset("few", [path])], {"few": 1.0}, holdout_bytes=100)
    with pytest.raises(ConfigError, match=r"holding out 2 documents .* needs at least 8"):
        source.heldout_records(0)
    with pytest.raises(ConfigError, match="holdout_docs must be an integer >= 2"):
        WorkSource([Dataset("few", [path])], {"few": 1.0}, holdout_bytes=100, holdout_docs=1)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(max_size=300), min_size=1, max_size=12),
    budget=st.integers(min_value=0, max_value=2000),
)
def test_held_out_text_is_cut_to_its_budget(texts: list[str], budget: int) -> None:
    cut = cut_to_budget(texts, budget)
    sizes = [len(t.encode()) for t in texts]
    assert len(cut) == len(texts)
    assert sum(len(c.encode()) for c in cut) <= max(budget, 0) or sum(sizes) <= budget
    for text, piece in zip(texts, cut, strict=True):
        assert text.startswith(piece)  # a prefix, never a broken character
    if sum(sizes) <= budget:
        assert cut == texts
    else:  # water filling: the documents cut are cut at one length, the others are whole
        cut_sizes = [len(c.encode()) for c, t in zip(cut, texts, strict=True) if c != t]
        cap = max(cut_sizes)
        assert all(len(t.encode()) <= cap + 3 for c, t in zip(cut, texts, strict=True) if c == t)
        assert max(cut_sizes) - min(cut_sizes) <= 3  # at most a character's bytes apart
        # the cap is the largest within budget: one byte more per cut document breaks it
        assert budget - sum(len(c.encode()) for c in cut) < 4 * len(cut_sizes)
