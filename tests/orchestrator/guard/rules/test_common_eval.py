"""The rule that runs were scored alike (orchestrator.guard.rules.common_eval): one common
eval step, the same domains and the same held-out documents."""

from __future__ import annotations

from orchestrator.guard import RefusalCode, check, compare
from tests.support.guard_runs import DOC_BYTES, MIX_A, MIX_B, codes, evals_for, make_run


def test_no_common_eval_step() -> None:
    runs = [
        make_run("a", MIX_A, evals=evals_for(1.0, (5, 10))),
        make_run("b", MIX_B, evals=evals_for(1.0, (6, 12))),
    ]
    result = compare(runs)
    assert codes(result.refusals) == [RefusalCode.NO_COMMON_EVAL]
    assert result.eval_step is None


def test_last_common_eval_step_is_used() -> None:
    runs = [
        make_run("a", MIX_A, evals=evals_for(1.0, (5, 10, 15))),
        make_run("b", MIX_B, evals=evals_for(1.0, (5, 10))),
    ]
    assert compare(runs).eval_step == 10


def test_different_eval_domains_refused() -> None:
    evals = evals_for(1.0)
    del evals[10]["i18n"]
    result = compare([make_run("a", MIX_A), make_run("b", MIX_B, evals=evals)])
    assert codes(result.refusals) == [RefusalCode.NO_COMMON_EVAL]
    assert "different held-out domains" in result.refusals[0].message


def test_other_held_out_text_is_refused() -> None:
    a, b = make_run("a", MIX_A), make_run("b", MIX_B)
    b.documents[10]["code"]["bytes"] = [1] * len(DOC_BYTES)
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.NO_COMMON_EVAL and "other held-out text" in refusal.message
    assert refusal.detail == {"step": 10, "runs_with_other_documents": ["b"]}
    a.documents = {}  # recorded before per-document scores
    (refusal,) = check([a, b])
    assert refusal.detail == {"step": 10, "runs_without_documents": ["a"]}
    assert "a has no per-document held-out scores at eval step 10" in refusal.message
