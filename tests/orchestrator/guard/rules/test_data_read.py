"""The rules on the data read (orchestrator.guard.rules.data_read): replicates saw the same
batches, and every run read the same content for a shard."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.guard import RefusalCode, check, compare
from tests.support.guard_runs import codes, four_runs, make_run, sha


def test_same_variant_diverging_at_step_5() -> None:
    a, b = make_run("a", dp=[1]), make_run("a-again", dp=[2])
    b.digests = dict(b.digests)
    for step in range(5, 11):
        b.digests[step] = sha("other data", step)
    (refusal,) = check([b, a])  # order of input does not matter
    assert refusal.code == RefusalCode.DIVERGED_DATA
    assert refusal.detail["step"] == 5
    assert "step 5" in refusal.message and "re-run one of them" in refusal.message
    assert a.digests[5][:12] in refusal.message and b.digests[5][:12] in refusal.message
    assert refusal.runs == ["id-a", "id-a-again"]


def test_same_variant_without_common_steps() -> None:
    a, b = make_run("a"), make_run("b")
    b.digests = {s + 100: d for s, d in b.digests.items()}
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.DIVERGED_DATA and "no common steps" in refusal.message


def test_shorter_replicate_checked_on_common_steps_only() -> None:
    a, b = make_run("a"), make_run("b", base=1.01)
    b.digests = {s: d for s, d in b.digests.items() if s <= 6}
    assert codes(compare([a, b]).refusals) == [RefusalCode.UNFINISHED]  # not diverged_data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    digests=st.lists(st.binary(min_size=4, max_size=8), min_size=1, max_size=40),
    data=st.data(),
)
def test_refusal_names_exactly_the_mutated_step(digests: list[bytes], data: st.DataObject) -> None:
    steps = {i + 1: d.hex() for i, d in enumerate(digests)}
    ref = make_run("r-1", digests=steps)
    copy_ok = make_run("r-2", digests=dict(steps), base=1.01)
    assert compare([ref, copy_ok]).accepted

    k = data.draw(st.integers(1, len(steps)), label="k")
    mutated = dict(steps)
    mutated[k] = mutated[k] + "00"
    tail = data.draw(st.booleans(), label="also later steps")
    if tail:
        for s in range(k + 1, len(steps) + 1):
            mutated[s] = "ff" + mutated[s]
    bad = make_run("r-3", digests=mutated)
    refusals = check([ref, copy_ok, bad])
    assert codes(refusals) == [RefusalCode.DIVERGED_DATA]
    assert refusals[0].detail["step"] == k
    assert f"step {k} " in refusals[0].message
    assert refusals[0].runs == [ref.run_id, bad.run_id]


def test_a_shard_read_with_other_content_is_refused_naming_it() -> None:
    """Order v2 checks content as shards are read: compared runs must agree on every shard
    both of them read (the contract holds only the shards' sizes)."""
    runs = four_runs()
    shard = {"file": "part-0007.jsonl", "sha256": "a" * 64}
    for run in runs:
        run.shards_read = {"web": {"7": dict(shard)}, "code": {"0": {"file": "c", "sha256": "c"}}}
    assert check(runs) == []
    runs[3].shards_read["web"]["9"] = {"file": "part-0009.jsonl", "sha256": "d" * 64}
    assert check(runs) == []  # a shard only one run read is not a difference
    runs[2].shards_read["web"]["7"] = {**shard, "sha256": "b" * 64}
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.SHARD_CHANGED
    assert "part-0007.jsonl" in refusal.message and "'web'" in refusal.message
    assert refusal.detail["shard"] == 7 and refusal.detail["dataset"] == "web"
    assert refusal.runs == [runs[0].run_id, runs[2].run_id]


def test_a_shard_hashed_by_one_run_and_read_by_range_by_another_is_refused_saying_so() -> None:
    """A shard read by range is identified by its server's ETag, not its bytes: the guard
    cannot tell whether the two runs read the same content, and says why."""
    runs = four_runs()
    for run in runs:
        run.shards_read = {"web": {"3": {"file": "part-3.parquet", "sha256": "a" * 64}}}
    runs[1].shards_read["web"]["3"] = {
        "file": "part-3.parquet",
        "sha256": "e" * 64,
        "identity": "remote-version",
    }
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.SHARD_CHANGED
    assert "by range" in refusal.message and "io_options['remote_read']" in refusal.message
    assert "was changed between the runs" not in refusal.message
