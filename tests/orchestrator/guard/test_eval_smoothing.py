"""Deciding on the mean of each run's last k held-out evals
(orchestrator.guard.eval_smoothing, ``DecisionPolicy(smooth_last=k)``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.guard import DecisionPolicy, compare, comparison_markdown, plot
from orchestrator.guard.comparison import RunSummary
from orchestrator.guard.eval_smoothing import (
    check_smooth_last,
    smoothed_runs,
    smoothing_steps,
)
from tests.orchestrator.guard.test_held_out_metrics import with_accuracy
from tests.support.guard_runs import DOMAINS, MIX_A, MIX_B, evals_for, seeded

STEPS = (4, 6, 8, 10)


def runs_at(steps: tuple[int, ...] = STEPS, seeds: int = 3) -> list[RunSummary]:
    """A and B under ``seeds`` seeds, evaluated at ``steps`` (scores fall 0.01 a step)."""
    return [
        seeded(f"{name}-s{s}", mix, s, base + 0.01 * s, evals=evals_for(base, steps))
        for name, mix, base in (("a", MIX_A, 1.0), ("b", MIX_B, 1.02))
        for s in range(seeds)
    ]


def test_smoothing_steps_are_the_last_common_ones() -> None:
    runs = runs_at()
    assert smoothing_steps(runs, 10, last=1) == [10]
    assert smoothing_steps(runs, 10, last=3) == [6, 8, 10]
    assert smoothing_steps(runs, 8, last=2) == [6, 8]
    # a step one run lacks is not common
    first = runs[0]
    runs[0] = dataclasses.replace(
        first,
        evals={s: v for s, v in first.evals.items() if s != 8},
        documents={s: v for s, v in first.documents.items() if s != 8},
    )
    assert smoothing_steps(runs, 10, last=3) == [4, 6, 10]


@pytest.mark.parametrize("last", [0, -1, 1.5, True, "2"])
def test_a_bad_k_is_refused_saying_what_to_pass(last: object) -> None:
    with pytest.raises(ValueError, match=r"--smooth-last\) must be an integer >= 1"):
        check_smooth_last(last)
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        DecisionPolicy(smooth_last=last)  # type: ignore[arg-type]


def test_more_evals_than_the_runs_share_is_refused_naming_them() -> None:
    with pytest.raises(ValueError, match=r"share 4 eval step\(s\).*\(4, 6, 8, 10\).*from 1 to 4"):
        compare(runs_at(), DecisionPolicy(smooth_last=5))


def test_k_1_leaves_the_runs_and_the_comparison_as_they_are() -> None:
    runs = runs_at()
    assert smoothed_runs(runs, 10, last=1) is runs
    plain, one = compare(runs), compare(runs, DecisionPolicy(smooth_last=1))
    assert plain.to_json() == one.to_json()
    assert one.smooth_last == 1 and one.smoothed_steps == [10]
    assert "held-out evals" not in comparison_markdown(one)


def test_k_evals_are_averaged_per_document_and_per_domain() -> None:
    runs = runs_at()
    smoothed = smoothed_runs(runs, 10, last=3)
    for run, new in zip(runs, smoothed, strict=True):
        for d in DOMAINS:
            expected = np.mean([run.documents[s][d]["bits"] for s in (6, 8, 10)], axis=0)
            assert new.documents[10][d]["bits"] == pytest.approx(list(expected))
            assert new.documents[10][d]["bytes"] == run.documents[10][d]["bytes"]
            assert new.evals[10][d] == pytest.approx(np.mean([run.evals[s][d] for s in (6, 8, 10)]))
        assert new.documents[8] == run.documents[8] and new.evals[6] == run.evals[6]
    result = compare(runs, DecisionPolicy(smooth_last=3))
    assert result.accepted and result.eval_step == 10
    assert result.smooth_last == 3 and result.smoothed_steps == [6, 8, 10]
    # scores fall 0.01 a step: the mean of steps 6, 8 and 10 is step 8's
    assert result.rows[0].bpb["code"] == pytest.approx(compare(runs).rows[0].bpb["code"] + 0.02)
    payload = result.to_json()
    assert payload["smooth_last"] == 3 and payload["smoothed_steps"] == [6, 8, 10]
    assert "mean of its last 3 held-out evals (steps 6, 8, 10)" in comparison_markdown(result)
    # another statistic: another sequence of looks
    assert result.sequence != compare(runs).sequence


def test_other_documents_at_an_earlier_step_are_refused_naming_step_and_dataset() -> None:
    runs = runs_at()
    first = runs[0]
    changed = {**first.documents[6]["docs"], "bytes": [1.0] * len(first.documents[6]["docs"])}
    runs[0] = dataclasses.replace(
        first, documents={**first.documents, 6: {**first.documents[6], "docs": changed}}
    )
    with pytest.raises(ValueError, match=r"a-s0.*eval step 6.*other documents of dataset docs"):
        compare(runs, DecisionPolicy(smooth_last=3))
    assert compare(runs, DecisionPolicy(smooth_last=2)).accepted  # steps 8 and 10 are unchanged


def test_a_task_or_another_metric_is_not_smoothed() -> None:
    runs = [with_accuracy(run, 0.5, seed) for seed, run in enumerate(runs_at())]
    assert compare(runs, DecisionPolicy(decide_on=["accuracy"], smooth_last=1)).accepted
    with pytest.raises(ValueError, match=r"accuracy.*--smooth-last 1"):
        compare(runs, DecisionPolicy(decide_on=["accuracy"], smooth_last=2))


@settings(max_examples=40, deadline=None)
@given(
    steps=st.integers(2, 5),
    data=st.data(),
    values=st.lists(st.floats(0.5, 5.0), min_size=6, max_size=6),
)
def test_smoothing_scores_that_do_not_change_changes_nothing(
    steps: int, data: st.DataObject, values: list[float]
) -> None:
    """Runs scoring the same at every eval step: any k gives the comparison of k = 1, but
    for the record of the smoothing."""
    last = data.draw(st.integers(1, steps))
    at = tuple(range(2, 2 * steps + 1, 2))
    runs = []
    for run, value in zip(runs_at(at, seeds=3), values, strict=True):
        final = max(at)
        runs.append(
            dataclasses.replace(
                run,
                evals={s: {**run.evals[final], "code": value} for s in at},
                documents={s: run.documents[final] for s in at},
            )
        )
    plain, smoothed = compare(runs), compare(runs, DecisionPolicy(smooth_last=last))
    assert smoothed.smoothed_steps == list(at[-last:])
    assert [r.mixture for r in smoothed.rows] == [r.mixture for r in plain.rows]
    for new, old in zip(smoothed.rows, plain.rows, strict=True):
        assert new.aggregate_bpb == pytest.approx(old.aggregate_bpb, abs=1e-12)
        assert new.bpb == pytest.approx(old.bpb, abs=1e-12)
    for new_pair, old_pair in zip(smoothed.pairs, plain.pairs, strict=True):
        assert new_pair["decision"] == old_pair["decision"]
        assert new_pair["interval"] == pytest.approx(old_pair["interval"], abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    bits=st.lists(st.lists(st.floats(0.0, 1000.0), min_size=6, max_size=6), min_size=2, max_size=5),
    data=st.data(),
)
def test_smoothed_bits_are_the_mean_over_the_last_k_steps(
    bits: list[list[float]], data: st.DataObject
) -> None:
    last = data.draw(st.integers(1, len(bits)))
    at = tuple(range(1, len(bits) + 1))
    (run,) = runs_at(at, seeds=1)[:1]
    run = dataclasses.replace(
        run,
        documents={
            s: {d: {**run.documents[s][d], "bits": b} for d in DOMAINS}
            for s, b in zip(at, bits, strict=True)
        },
    )
    (new,) = smoothed_runs([run], at[-1], last=last)
    assert new.documents[at[-1]]["code"]["bits"] == pytest.approx(
        list(np.mean(bits[-last:], axis=0)), abs=1e-9
    )


def test_the_plot_draws_a_smoothed_comparison(tmp_path: Path) -> None:
    runs = runs_at()
    assert (
        plot(compare(runs, DecisionPolicy(smooth_last=2)), runs, tmp_path / "c.png").stat().st_size
        > 0
    )
