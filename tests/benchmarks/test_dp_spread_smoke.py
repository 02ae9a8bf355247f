"""Smoke test of the dp-spread benchmark (``benchmarks/dp_spread/``): 2 steps, dp 1 and 2.

Real ``torchrun`` launches of the mini model (``--model mini``: what is checked is the
data and the bookkeeping, not what the model learns) on a tiny corpus (5 in all: the seed
checkpoint and both loaders on dp 1 and 2). Checks that the report, the figure and the
JSON are written and name the model, that Zephon's global batches (its digests and the
sequences each rank handed over) are the same on both dp sizes and the stock loader's
are not, and that both Zephon runs start from the same weights (same step-1 loss on the
same batch).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.dp_spread.cli import main

STEPS = 2


def test_dp_spread_benchmark_runs_and_tells_the_loaders_apart(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main(
        [
            *("--steps", str(STEPS), "--dp", "1", "2", "--model", "mini"),
            *("--corpus-bytes", "100000", "--holdout-bytes", "2048"),
            *("--work-dir", str(tmp_path / "work")),
            *("--results-dir", str(out), "--docs-dir", str(out)),
        ]
    )
    assert code == 0
    report = json.loads((out / "dp_spread.json").read_text())
    assert (out / "dp_spread.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "dp_spread.md").read_text()
    assert "## Held-out bits per byte" in markdown and "dp_spread.png" in markdown
    assert report["meta"]["model"] == "mini" and "`zephon_mini`'s" in markdown

    summary = report["summary"]
    zephon, stock = summary["zephon"], summary["stock"]
    for s in (zephon, stock):
        assert s["dps"] == [1, 2]
        assert set(s["spread"]) == {"aggregate", *s["bpb"]}
        assert all(x >= 0 for x in s["eval_noise"].values())
        assert all(0 < x < 20 for x in s["aggregate_bpb"])

    assert zephon["global_batches_agree"]
    (pair,) = zephon["agreement"].values()
    assert pair["steps_with_same_zephon_digest"] == STEPS
    assert pair["steps_with_same_global_batch"] == STEPS
    assert pair["sequences_shared_at_any_step"] == 1.0

    assert not stock["global_batches_agree"]
    (pair,) = stock["agreement"].values()
    assert pair["steps_with_same_global_batch"] == 0

    first = zephon["first_loss"]  # same weights (seed checkpoint), same batch
    assert abs(first[0] - first[1]) < 1e-3, first
