"""Staged mixtures (``WorkSource(mixture=[MixturePhase, ...])``): each phase keeps its own
token shares over its own tokens, the global batches stay a pure function of the plan at
every dp size and across a restore at another dp size through a phase boundary, and a
plain mixture keeps the contract and lanes it always had."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import Dataset, MixturePhase, WorkSource, load_tokenizer, merge_states
from pipeline.errors import ConfigError
from tests.support.helpers import run_ranks

LANES = 8
GLOBAL_BATCH = 16
SEQ = 64
STEP_TOKENS = GLOBAL_BATCH * (SEQ + 1)
"""Tokens a step consumes over every lane (make_pipeline's sequences of max_length + 1)."""
BOUNDARY_STEP = 6


def staged(
    datasets: list[Dataset], *, until_tokens: int = BOUNDARY_STEP * STEP_TOKENS
) -> WorkSource:
    """Code and docs, then mostly unicode after about ``BOUNDARY_STEP`` steps."""
    code, docs, unicode = (ds.name for ds in datasets)
    phases = [
        MixturePhase({code: 0.7, docs: 0.3, unicode: 0.0}, until_tokens=until_tokens),
        MixturePhase({code: 0.1, docs: 0.3, unicode: 0.6}),
    ]
    return WorkSource(datasets, phases, seed=7, chunk_tokens=512, calibration_bytes=200_000)


@pytest.fixture(scope="module")
def two_phases(datasets: list[Dataset]) -> WorkSource:
    source = staged(datasets)
    source.calibrate(load_tokenizer("gpt2"))
    return source


def drawn_tokens_by_phase(source: WorkSource, lanes: int) -> list[np.ndarray]:
    """Estimated tokens per dataset drawn in each phase, over ``lanes`` lanes, until every
    lane is well into the last phase."""
    bound = source.phases[0][0]
    assert bound is not None
    totals = [np.zeros(len(source.datasets)), np.zeros(len(source.datasets))]
    for lane in range(lanes):
        plan = source.lane_plan(lane, lanes)
        drawn = 0
        while drawn * lanes < 2 * bound:
            chunk = plan.next_chunk()
            assert chunk is not None
            for d, key in zip(chunk.datasets.tolist(), chunk.records.tolist(), strict=True):
                cost = source.record_cost(d, key)
                totals[0 if drawn * lanes < bound else 1][d] += cost
                drawn += cost
    return totals


def test_each_phase_keeps_its_own_shares(datasets: list[Dataset]) -> None:
    """Over phases of 50,000 tokens a lane (a proxy run's scale: hundreds of records), each
    phase's token shares are its own mixture's within 2%."""
    long = staged(datasets, until_tokens=LANES * 50_000)
    long.calibrate(load_tokenizer("gpt2"))
    for totals, (_, mixture) in zip(drawn_tokens_by_phase(long, LANES), long.phases, strict=True):
        shares = totals / totals.sum()
        assert np.abs(shares - np.array(mixture.shares)).max() < 0.02, (shares, mixture.shares)


def test_global_batches_are_the_same_at_every_dp_size_across_the_boundary(
    two_phases: WorkSource,
) -> None:
    steps = 2 * BOUNDARY_STEP
    reference = run_ranks(two_phases, 1, steps, parallelism=0, runner="inline")
    for dp in (2, 4):
        assert run_ranks(two_phases, dp, steps, microbatch_size=GLOBAL_BATCH // dp).digests == (
            reference.digests
        )


def test_a_restore_at_another_dp_through_the_boundary_gives_the_same_batches(
    two_phases: WorkSource,
) -> None:
    """Checkpointed at dp 2 two steps before the boundary, resumed at dp 1 through it."""
    steps = 2 * BOUNDARY_STEP
    reference = run_ranks(two_phases, 1, steps, parallelism=0, runner="inline")
    before = BOUNDARY_STEP - 2
    first = run_ranks(two_phases, 2, before, microbatch_size=GLOBAL_BATCH // 2)
    state = json.loads(json.dumps(merge_states(first.states)))
    rest = run_ranks(two_phases, 1, steps - before, state=state)
    assert first.digests + rest.digests == reference.digests


def test_the_phases_are_in_the_contract_and_a_plain_mixture_keeps_its_own(
    datasets: list[Dataset], source: WorkSource
) -> None:
    weights = dict(zip([ds.name for ds in datasets], (0.5, 0.3, 0.2), strict=True))
    one_phase = WorkSource(
        datasets, [MixturePhase(weights)], seed=7, chunk_tokens=512, calibration_bytes=200_000
    )
    assert one_phase.contract() == source.contract()
    assert "phases" not in source.contract()
    contract = staged(datasets).contract()
    assert [p["until_tokens"] for p in contract["phases"]] == [BOUNDARY_STEP * STEP_TOKENS, None]


def test_a_share_too_small_for_its_phase_is_refused_naming_it(datasets: list[Dataset]) -> None:
    code, docs, unicode = (ds.name for ds in datasets)
    phases = [
        MixturePhase({code: 0.999, docs: 0.001, unicode: 0.0}, until_tokens=2_000),
        MixturePhase({code: 1.0, docs: 1.0, unicode: 1.0}),
    ]
    source = WorkSource(datasets, phases, seed=7, chunk_tokens=512, calibration_bytes=200_000)
    with pytest.raises(ConfigError, match=rf"phase 0 .* dataset '{docs}' a share of 0.001"):
        source.calibrate(load_tokenizer("gpt2"))


@pytest.mark.parametrize(
    ("phases", "match"),
    [
        ([MixturePhase({"a": 1.0}, until_tokens=10)], r"phase 0: until_tokens=10; every phase"),
        (
            [MixturePhase({"a": 1.0}, until_tokens=10), MixturePhase({"a": 1.0}, until_tokens=5)],
            r"phase 1: until_tokens=5",
        ),
        (
            [MixturePhase({"a": 1.0}, until_tokens=10), MixturePhase({"b": 1.0})],
            r"phase 1: mixture names unknown dataset",
        ),
        ([], r"non-empty list of MixturePhase"),
    ],
)
def test_malformed_phases_are_refused_naming_the_phase(
    datasets: list[Dataset], phases: list[MixturePhase], match: str
) -> None:
    renamed = [Dataset("a", ds.shards[:1], cache_dir=ds.cache_dir) for ds in datasets[:1]]
    with pytest.raises(ConfigError, match=match):
        WorkSource(renamed, phases)


def test_lanes_enter_the_next_phase_near_their_part_of_the_bound(two_phases: WorkSource) -> None:
    """No record of a dataset the first phase leaves out before the lane's part of the bound."""
    bound = two_phases.phases[0][0]
    assert bound is not None
    unicode = 2
    plan = two_phases.lane_plan(3, LANES)
    drawn = 0
    while drawn * LANES < bound:
        chunk = plan.next_chunk()
        assert chunk is not None
        for d, key in zip(chunk.datasets.tolist(), chunk.records.tolist(), strict=True):
            if drawn * LANES < bound:
                assert d != unicode, f"unicode drawn at {drawn} tokens, before the boundary"
            drawn += two_phases.record_cost(d, key)
