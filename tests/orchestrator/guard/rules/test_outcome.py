"""Every rule applied at once (orchestrator.guard.rules.outcome): all reasons are collected."""

from __future__ import annotations

import pytest

from orchestrator.guard import RefusalCode, RunSummary, compare, comparison_markdown
from tests.support.guard_runs import MIX_A, MIX_B, codes, make_contract, make_run


def test_all_refusals_collected() -> None:
    a1 = make_run("a-1", MIX_A)
    a2 = make_run("a-2", MIX_A)
    a2.digests = {**a2.digests, 7: "bad"}
    b = make_run("b", MIX_B, contract=make_contract(global_batch_size=32))
    empty = make_run("c", MIX_B, digests={})
    no_eval = make_run("d", {"code": 1.0}, evals={})
    result = compare([a1, a2, b, empty, no_eval])
    assert not result.accepted and result.rows == []
    assert sorted(codes(result.refusals)) == [
        RefusalCode.CONTRACT_MISMATCH,
        RefusalCode.DIVERGED_DATA,
        RefusalCode.NO_COMMON_EVAL,
        RefusalCode.NO_DATA,
    ]
    by_code = {r.code: r for r in result.refusals}
    assert by_code[RefusalCode.DIVERGED_DATA].detail["step"] == 7
    assert "global_batch_size" in by_code[RefusalCode.CONTRACT_MISMATCH].detail["fields"]
    assert "c has no per-step batch digests" in by_code[RefusalCode.NO_DATA].message
    assert "d has no held-out eval scores" in by_code[RefusalCode.NO_COMMON_EVAL].message
    md = comparison_markdown(result)
    assert "4 reasons" in md and all(c in md for c in by_code)


@pytest.mark.parametrize("runs", [[], [make_run("only")]])
def test_too_few_runs(runs: list[RunSummary]) -> None:
    result = compare(runs)
    assert not result.accepted
    assert RefusalCode.TOO_FEW_RUNS in codes(result.refusals)
