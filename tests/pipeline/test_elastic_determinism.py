"""The headline guarantee: the global batch of every step is the same for every dp size,
micro-batch size, tokenize parallelism and runner, and across a restore on another dp size."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import datasets
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import Dataset, WorkSource, merge_states
from pipeline.dataset import TokenDeclaration
from tests.support.helpers import GlobalRun, run_ranks
from tests.support.mds_shards import MDS_FIXTURES, fixture_texts
from tests.support.token_files import gpt2_documents, write_megatron, write_token_array

LANES = 8
GLOBAL_BATCH = 16
STEPS = 10
GPT2_EOS = 50256
SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@cache
def reference(source: WorkSource) -> GlobalRun:
    """One rank, inline tokenization, one micro-batch per step."""
    return run_ranks(source, 1, STEPS, parallelism=0, runner="inline")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def layouts(draw: st.DrawFn) -> dict:
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    return {
        "dp_size": dp,
        "microbatch_size": draw(st.sampled_from(divisors(GLOBAL_BATCH // dp))),
        "parallelism": draw(st.integers(1, 4)),
        "runner": draw(st.sampled_from(["threads", "inline"])),
        "prefetch": draw(st.integers(0, 4)),
        "prefetch_steps": draw(st.integers(0, 3)),
    }


@SETTINGS
@given(layout=layouts())
def test_global_batches_identical_for_every_layout(source: WorkSource, layout: dict) -> None:
    ref = reference(source)
    run = run_ranks(source, layout.pop("dp_size"), STEPS, **layout)
    for step in range(STEPS):
        np.testing.assert_array_equal(run.tokens[step], ref.tokens[step], err_msg=f"step {step}")
    assert run.digests == ref.digests


@SETTINGS
@given(
    save_dp=st.sampled_from([1, 2, 4, 8]),
    load_dp=st.sampled_from([1, 2, 4, 8]),
    save_step=st.integers(1, STEPS - 1),
    parallelism=st.integers(0, 3),
)
def test_restore_on_another_dp_size_continues_identically(
    source: WorkSource, save_dp: int, load_dp: int, save_step: int, parallelism: int
) -> None:
    ref = reference(source)
    first = run_ranks(source, save_dp, save_step, parallelism=parallelism)
    state = merge_states(first.states)
    assert state["step"] == save_step
    rest = run_ranks(source, load_dp, STEPS - save_step, state=state, parallelism=parallelism)
    combined = first.tokens + rest.tokens
    for step in range(STEPS):
        np.testing.assert_array_equal(combined[step], ref.tokens[step], err_msg=f"step {step}")
    assert first.digests + rest.digests == ref.digests
    # No sequence lost or duplicated across the restore.
    as_rows = lambda batches: Counter(row.tobytes() for b in batches for row in b)  # noqa: E731
    assert as_rows(combined) == as_rows(ref.tokens)


def test_state_is_small_and_json_serialisable(source: WorkSource) -> None:
    import json

    run = run_ranks(source, 2, 3)
    state = merge_states(run.states)
    text = json.dumps(state)
    assert sorted(int(k) for k in state["lanes"]) == list(range(LANES))
    # Positions only: no token buffers, a few hundred bytes per lane.
    assert len(text) < 1500 * LANES


@pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")
@pytest.mark.parametrize("fmt", ["arrow_folder", "mds_folder"])
def test_arrow_and_mds_folders_give_the_same_global_batches_at_dp_1_and_2(
    fmt: str, tmp_path: Path
) -> None:
    if fmt == "arrow_folder":
        folder = tmp_path / "hf"
        datasets.Dataset.from_dict({"text": fixture_texts()}).save_to_disk(
            str(folder), num_shards=3
        )
    else:
        folder = MDS_FIXTURES / "zstd"
    ds = Dataset("d", folder, cache_dir=tmp_path / "cache")
    source = WorkSource([ds], {"d": 1.0}, seed=7, chunk_tokens=512, calibration_bytes=20_000)
    one = run_ranks(source, 1, STEPS, parallelism=0, runner="inline")
    two = run_ranks(source, 2, STEPS, parallelism=2)
    assert one.digests == two.digests
    for step in range(STEPS):
        np.testing.assert_array_equal(two.tokens[step], one.tokens[step], err_msg=f"step {step}")


@pytest.mark.parametrize("fmt", ["megatron", "token_array"])
def test_pre_tokenized_datasets_give_the_same_global_batches_at_dp_1_2_and_4(
    fmt: str, tmp_path: Path
) -> None:
    docs = gpt2_documents()
    thirds = [docs[i::3] for i in range(3)]  # three shards
    if fmt == "megatron":
        paths = [write_megatron(tmp_path / f"part{i}", part) for i, part in enumerate(thirds)]
    else:
        paths = [
            write_token_array(tmp_path / f"part{i}.npy", part, eos_id=GPT2_EOS)
            for i, part in enumerate(thirds)
        ]
    ds = Dataset("d", paths, tokens=TokenDeclaration("gpt2"), cache_dir=tmp_path / "cache")
    source = WorkSource([ds], {"d": 1.0}, seed=7, chunk_tokens=512, calibration_bytes=20_000)
    one = run_ranks(source, 1, STEPS, parallelism=0, runner="inline")
    for dp in (2, 4):
        run = run_ranks(source, dp, STEPS, parallelism=2)
        assert run.digests == one.digests
        for step in range(STEPS):
            np.testing.assert_array_equal(
                run.tokens[step], one.tokens[step], err_msg=f"step {step}"
            )
