"""Deciding on the mean of each run's last k held-out evaluations (``--smooth-last K``).

A run's score at its last eval step carries the noise of that one checkpoint (the last
batches it saw). With ``smooth_last=k`` the guard scores every run on the mean of its last
``k`` evaluations instead: the last ``k`` eval steps common to all runs, up to the
comparison's eval step, each scoring the same held-out documents. Each run's per-document
bits and per-domain scores at the eval step are replaced by their means over those steps
(bits per byte of the mean bits: the documents' bytes do not change), and the comparison
goes on as if the run had scored them there. ``k = 1`` (the default) leaves the runs as they
are. Only held-out bits per byte are smoothed: a task or another held-out metric is decided
at the eval step alone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from orchestrator.guard.comparison import HELD_OUT_SCORE, RunSummary

DEFAULT_SMOOTH_LAST = 1
"""The last eval alone: no smoothing."""


def check_smooth_last(last: object) -> None:
    """``ValueError`` unless ``last`` is an integer >= 1, saying what to pass."""
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(
            f"smooth_last (--smooth-last) must be an integer >= 1, the number of each run's "
            f"last held-out evals to average (1: the last eval alone); got {last!r}"
        )


def smoothing_steps(runs: list[RunSummary], step: int, *, last: int) -> list[int]:
    """The last ``last`` eval steps, ascending, up to ``step``, at which every run has
    per-document held-out scores. ``ValueError`` if ``last`` is not an integer >= 1 or the
    runs share fewer such steps, saying how many they share."""
    check_smooth_last(last)
    common = set.intersection(*({s for s in r.evals if s in r.documents} for r in runs))
    shared = sorted(s for s in common if s <= step)
    if last > len(shared):
        raise ValueError(
            f"cannot average the last {last} held-out evals: the runs share "
            f"{len(shared)} eval step(s) with per-document scores up to step {step} "
            f"({', '.join(map(str, shared)) or 'none'}); pass smooth_last (--smooth-last) "
            f"from 1 to {max(len(shared), 1)}"
        )
    return shared[-last:]


def smoothed_runs(runs: list[RunSummary], step: int, *, last: int) -> list[RunSummary]:
    """``runs`` whose held-out scores at ``step`` (per-document bits and per-domain bits per
    byte, the aggregate too) are their means over :func:`smoothing_steps`; ``runs`` itself
    when ``last`` is 1. ``ValueError`` naming the run, step and dataset where a run scored
    other documents (their sizes differ) or lacks a score it has at ``step``."""
    check_smooth_last(last)
    if last == 1:
        return runs
    steps = smoothing_steps(runs, step, last=last)
    return [_smoothed_run(run, step, steps) for run in runs]


def check_smoothed_score(last: int, score: str) -> None:
    """``ValueError`` when ``last > 1`` and the decision is on ``score`` other than held-out
    bits per byte (a task or another held-out metric is not smoothed)."""
    if last > 1 and score != HELD_OUT_SCORE:
        raise ValueError(
            f"smooth_last={last} averages held-out bits per byte over evals; the comparison "
            f"decides on the {score}, scored at the last eval alone: pass smooth_last 1 "
            "(--smooth-last 1) or decide on held-out domains"
        )


def smoothing_note(last: int, steps: list[int]) -> str:
    """The smoothing in words for reports ("" when ``last`` is 1)."""
    if last <= 1:
        return ""
    return (
        f"each run's scores are the mean of its last {last} held-out evals "
        f"(steps {', '.join(map(str, steps))})"
    )


def _smoothed_run(run: RunSummary, step: int, steps: list[int]) -> RunSummary:
    """``run`` with its scores at ``step`` averaged over ``steps``."""
    documents = {}
    for dataset, scored in run.documents[step].items():
        bits = []
        for s in steps:
            other = run.documents[s].get(dataset)
            if other is None or list(other["bytes"]) != list(scored["bytes"]):
                what = "no per-document scores of" if other is None else "other documents of"
                raise ValueError(
                    f"cannot average {run.name}'s last {len(steps)} held-out evals: at eval "
                    f"step {s} it has {what} dataset {dataset} than at step {step} (document "
                    "sizes differ); pass a smaller smooth_last (--smooth-last)"
                )
            bits.append(np.asarray(other["bits"], dtype=np.float64))
        documents[dataset] = {
            "bits": [float(b) for b in np.mean(bits, axis=0)],
            "bytes": scored["bytes"],
        }
    evals = {}
    for key in run.evals[step]:
        missing = [s for s in steps if key not in run.evals[s]]
        if missing:
            raise ValueError(
                f"cannot average {run.name}'s last {len(steps)} held-out evals: it has no "
                f"{key} score at eval step {missing[0]}; pass a smaller smooth_last "
                "(--smooth-last)"
            )
        evals[key] = float(np.mean([run.evals[s][key] for s in steps]))
    return replace(
        run,
        documents={**run.documents, step: documents},
        evals={**run.evals, step: evals},
    )
