"""Smoke test of ``benchmarks.tokenizer_ratio`` on a tiny corpus: structure only, no timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.tokenizer_ratio import measure_pipeline_ratio, render_markdown


@pytest.mark.parametrize(("text_kind", "runner"), [("prose", "threads"), ("code", "processes")])
def test_measures_both_sides(tmp_path: Path, text_kind: str, runner: str) -> None:
    result = measure_pipeline_ratio(
        text_kind, 2, runner, steps=2, reps=1, work_dir=tmp_path, max_bytes_per_domain=100_000
    )
    assert (result["text_kind"], result["runner"], result["parallelism"]) == (text_kind, runner, 2)
    assert result["raw_tokens_per_s"] > 0 and result["pipeline_tokens_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["pipeline_tokens_per_s"] / result["raw_tokens_per_s"]
    )
    assert len(result["raw_runs"]) == len(result["pipeline_runs"]) == 1
    # Two steps of 64 sequences of at most 512 label tokens; raw tiktoken encodes as many.
    delivered = result["pipeline_runs"][0]["tokens"]
    assert 0 < delivered <= 2 * 64 * 512 <= result["raw_runs"][0]["tokens"]
    assert set(result["cpu_ns_per_token"]) == {"raw", "pipeline", "consumer", "workers"}
    assert result["cpu_ns_per_token"]["workers"] > 0
    assert text_kind in render_markdown([result], "test machine", "today", 1.0)
