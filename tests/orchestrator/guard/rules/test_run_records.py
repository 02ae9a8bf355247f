"""The rules on each run alone (orchestrator.guard.rules.run_records): its records exist and
it finished its schedule."""

from __future__ import annotations

import pytest

from orchestrator.guard import RefusalCode, compare
from tests.support.guard_runs import MIX_B, codes, make_run


@pytest.mark.parametrize(
    ("status", "steps"), [("interrupted", 10), ("failed", 10), ("running", 10), ("succeeded", 6)]
)
def test_unfinished_run_refused_with_its_state_and_the_command(status: str, steps: int) -> None:
    short = make_run("b", MIX_B, status=status)
    short.digests = {s: d for s, d in short.digests.items() if s <= steps}
    result = compare([make_run("a"), make_run("a-2"), short])
    assert codes(result.refusals) == [RefusalCode.UNFINISHED]
    (refusal,) = result.refusals
    assert refusal.detail == {
        "run": "b",
        "status": status,
        "steps": steps,
        "planned_steps": 10,
        "command": "zephon resume /runs/b",
    }
    assert f"{status}, {steps} of 10 steps" in refusal.message
    assert "zephon resume /runs/b" in refusal.message


def test_run_without_recorded_recipe_has_no_data() -> None:
    old = make_run("b", MIX_B)
    old.recipe_fingerprint, old.recipe = "", {}
    result = compare([make_run("a"), old])
    assert codes(result.refusals) == [RefusalCode.NO_DATA]
    assert "no recipe" in result.refusals[0].message
