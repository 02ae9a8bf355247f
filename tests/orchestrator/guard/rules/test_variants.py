"""How runs group (orchestrator.guard.rules.variants): labels, and seed blocks that pair up
only when every variant ran under each."""

from __future__ import annotations

from orchestrator.guard import RefusalCode, check, mixture_label
from tests.support.guard_runs import MIX_A, MIX_B, codes, make_run, paired_runs, seeded


def test_duplicate_names_get_distinct_labels() -> None:
    a, b = make_run("same"), make_run("same")
    b.run_id = "id-other"
    b.digests = {**b.digests, 3: "x"}
    (refusal,) = check([a, b])
    assert len(refusal.detail["digests"]) == 2


def test_unpaired_seeds_are_refused_with_the_missing_blocks() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))[:3]
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.UNPAIRED_SEEDS
    assert refusal.detail["missing"] == {mixture_label(MIX_B): ["data 1, shuffle 1, init 1"]}
    assert "replicate_seeds" in refusal.message and refusal.runs == ["id-b-s0"]


def test_one_variant_under_two_seeds_is_not_a_pairing() -> None:
    refusals = check([seeded("a-s0", MIX_A, 0, 1.0), seeded("a-s1", MIX_A, 1, 1.0)])
    assert codes(refusals) == [RefusalCode.CONTRACT_MISMATCH, RefusalCode.RECIPE_MISMATCH]
    assert set(refusals[0].detail["fields"]) == {"seed", "shuffle.seed"}
    assert set(refusals[1].detail["fields"]) == {"debug.seed"}
