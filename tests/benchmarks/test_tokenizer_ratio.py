"""Smoke test of ``benchmarks.tokenizer_ratio`` on a tiny corpus: structure only, no timing."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.tokenizer_ratio import measure_pipeline_ratio, render_markdown
from tests.support.tokenizers import GPT_NEOX


@pytest.mark.parametrize(
    ("text_kind", "runner", "tokenizer", "kind"),
    [
        ("prose", "threads", "gpt2", "gpt2"),
        ("code", "processes", "gpt2", "gpt2"),
        ("prose", "threads", str(GPT_NEOX), "huggingface"),
    ],
)
def test_measures_both_sides(
    tmp_path: Path, text_kind: str, runner: str, tokenizer: str, kind: str
) -> None:
    result = measure_pipeline_ratio(
        text_kind,
        2,
        runner,
        steps=2,
        reps=1,
        work_dir=tmp_path,
        max_bytes_per_domain=100_000,
        tokenizer=tokenizer,
    )
    assert (result["text_kind"], result["runner"], result["parallelism"]) == (text_kind, runner, 2)
    assert result["tokenizer"] == kind
    assert result["raw_tokens_per_s"] > 0 and result["pipeline_tokens_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["pipeline_tokens_per_s"] / result["raw_tokens_per_s"]
    )
    assert len(result["raw_runs"]) == len(result["pipeline_runs"]) == 1
    # Two steps of 64 sequences of at most 512 label tokens; the raw library encodes as many.
    delivered = result["pipeline_runs"][0]["tokens"]
    assert 0 < delivered <= 2 * 64 * 512 <= result["raw_runs"][0]["tokens"]
    assert set(result["cpu_ns_per_token"]) == {"raw", "pipeline", "consumer", "workers"}
    assert result["cpu_ns_per_token"]["workers"] > 0
    page = render_markdown([result], "test machine", "today", 1.0, kind)
    assert text_kind in page and ("tokenizers" in page) == (kind == "huggingface")
