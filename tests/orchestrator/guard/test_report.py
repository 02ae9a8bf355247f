"""The Markdown report (orchestrator.guard.report)."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.guard import compare, comparison_markdown
from tests.support.guard_runs import DOMAINS, documents_for, four_runs


def test_an_accepted_report_shows_the_table_the_decisions_and_what_was_checked() -> None:
    runs = four_runs()
    md = comparison_markdown(compare(runs))
    assert "accepted" in md and "eval step 10" in md
    assert "all data fingerprints agreed" in md and "every run finished its schedule" in md
    assert f"recipe `{runs[0].recipe_fingerprint[:12]}`" in md
    assert "code=0.200 docs=0.300 i18n=0.500" in md and "b-1, b-2" in md
    assert md.count("\n| ") == 5  # header + two rows, then the decisions' header + one pair
    assert "± docs" in md  # the held-out sample's error
    assert "**cannot_tell**" in md and "One seed decides nothing" in md


def test_the_table_shows_what_training_gained_over_the_initial_model() -> None:
    runs = four_runs()
    scored = [
        dataclasses.replace(
            r,
            evals={0: dict.fromkeys([*DOMAINS, "aggregate"], 4.0), **r.evals},
            documents={
                **documents_for(r.name, {0: dict.fromkeys(DOMAINS, 4.0)}),
                **r.documents,
            },
        )
        for r in runs
    ]
    result = compare(scored)
    assert result.accepted, result.refusals
    for row in result.rows:
        assert row.initial_bpb == dict.fromkeys(DOMAINS, 4.0)
        assert row.gain(DOMAINS[0]) == pytest.approx(1 - row.bpb[DOMAINS[0]] / 4.0)
    markdown = comparison_markdown(result)
    assert "### What training gained (step 0 -> step 10)" in markdown
    top = result.rows[0]
    assert f"4.000 -> {top.bpb[DOMAINS[0]]:.3f} (-{top.gain(DOMAINS[0]):.0%})" in markdown
    # without a step-0 score on every run, no gains are claimed
    partial = compare([scored[0], *runs[1:]])
    assert all(not row.initial_bpb for row in partial.rows)
    assert "What training gained" not in comparison_markdown(partial)


def test_the_data_read_shows_distinct_records_epochs_and_what_ran_out() -> None:
    """A variant that read its small filtered dataset three times over, and ran out of it in
    two lanes, is shown so beside one that read each record once."""
    a, b, c, d = four_runs()
    read_thrice = {"records_read": {"docs": 300}, "repeated": {"docs": 200}}
    runs = [
        dataclasses.replace(a, **read_thrice, ran_out={"docs": 2}),
        dataclasses.replace(b, **read_thrice),
        dataclasses.replace(c, records_read={"docs": 100}),
        dataclasses.replace(d, records_read={"docs": 100}),
    ]
    result = compare(runs)
    assert result.data_read[a.name]["docs"] == {
        "records_read": 300, "unique_records": 100, "epochs": 3.0, "ran_out_lanes": 2,
        "removed": {},
    }  # fmt: skip
    assert result.data_read[c.name]["docs"]["epochs"] == 1.0
    md = comparison_markdown(result)
    assert f"| {a.name} | docs | 300 | 100 | 3.00 |" in md
    assert f"{a.name} ran out of docs in 2 lane(s)" in md and f"{b.name} ran out" not in md


def test_the_data_read_section_is_left_out_when_it_has_no_row() -> None:
    """Runs that recorded nothing read (no ``records_read`` in their steps) give no table:
    not a header without rows."""
    result = compare(four_runs())
    assert "Data read per run" not in comparison_markdown(result)
    empty = dataclasses.replace(result, data_read={"a-1": {}, "b-1": {}})
    assert "Data read per run" not in comparison_markdown(empty)
    a = result.rows[0].runs[0]
    one = dataclasses.replace(
        result,
        data_read={
            a: {"docs": {"records_read": 7, "unique_records": 7, "epochs": 1.0, "removed": {}}},
            "other": {},
        },
    )
    md = comparison_markdown(one)
    assert "### Data read per run" in md and f"| {a} | docs | 7 | 7 | 1.00 | - | 0 | - |" in md
    assert "| other |" not in md
