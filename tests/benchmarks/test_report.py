"""The benchmark report's headline table: every ratio the benchmarks measure against a
target is listed, met or missed (or not measured), with the undisturbed runs it rests on.

Built from made-up child outputs of every variant of :func:`benchmarks.plan.families`, in
the shape :mod:`benchmarks.child` writes them; nothing is measured.
"""

from __future__ import annotations

from typing import Any

from benchmarks.noise import NOISY_PERCENT
from benchmarks.plan import Family, families
from benchmarks.report import RESTORE_BASES, build_report, to_markdown

TOKENS = 1_000_000
ROUNDS = 3
QUIET, BUSY = 0.0, NOISY_PERCENT + 10
SPEED = {  # M tokens/s of each variant: threads misses 0.85 x raw, beats both loaders
    "raw-tiktoken": 7.0,
    "zephon-threads-p2-L8": 5.6,
    "zephon-processes-p2-L8": 4.0,
    "torch-dataloader": 4.5,
    "torchtitan-hf": 2.8,
    "zephon-threads-p2-L8-unordered": 5.5,
}
TORCHTITAN_LOADS = (BUSY, BUSY, QUIET)
"""TorchTitan's loader ran undisturbed in one round of three."""


def child_output(tokens_per_s: float, round_: int, other_load: float) -> dict[str, Any]:
    """One successful run as :mod:`benchmarks.child` reports it."""
    seconds = TOKENS / tokens_per_s
    return {
        "ok": True,
        "round": round_,
        "result": {
            "tokens": TOKENS,
            "seconds": seconds,
            "cpu_s": 2 * seconds,
            "first_batch_s": 0.1,
            "steady_tokens_per_s": tokens_per_s,
            "other_load_percent": other_load,
            "tokens_per_s": tokens_per_s,
        },
        "peak_rss_mb": {"process": 300.0, "tree": 600.0},
    }


def outputs_of(selected: list[Family], failing: str | None = None) -> dict[str, list[dict]]:
    """Three rounds of every variant (``failing``'s runs all fail)."""
    outputs: dict[str, list[dict]] = {}
    for family in selected:
        for variant in family.variants:
            speed = SPEED.get(variant.key, 5.0) * 1e6
            loads = TORCHTITAN_LOADS if variant.key == "torchtitan-hf" else (QUIET,) * ROUNDS
            outputs[variant.key] = [
                {"ok": False, "round": r, "error": "no loader"}
                if variant.key == failing
                else child_output(speed, r, load)
                for r, load in enumerate(loads)
            ]
    return outputs


def restore_run(seconds: float) -> dict[str, Any]:
    return {"seconds": seconds, "tokenized": 1000, "matches": True, "other_load_percent": QUIET}


RESTORE = {
    "ok": True,
    "result": {
        "spec": {
            "lanes": 8,
            "parallelism": 2,
            "runner": "threads",
            "max_length": 128,
            "global_batch_size": 8,
        },
        "replay_from_start_s": 3.0,
        "points": {  # late / early = 5 (missed), late / matched = 1 (met)
            "early": {
                "step": 10,
                "mean_window": 0.0,
                "mean_offset": 10,
                "runs": [restore_run(0.04)] * 3,
            },
            "matched": {
                "step": 916,
                "mean_window": 0.0,
                "mean_offset": 916,
                "runs": [restore_run(0.2)] * 3,
            },
            "late": {
                "step": 10_000,
                "mean_window": 8.0,
                "mean_offset": 916,
                "runs": [restore_run(0.2)] * 3,
            },
        },
    },
}
META = {
    "date": "2026-12-02 00:00 UTC",
    "mode": "test",
    "reps": ROUNDS,
    "machine": "2 CPUs",
    "load_average_before": [0.1],
    "load_average_after": [0.2],
    "noise_spent_s": 0.0,
    "noise_budget_s": 0.0,
    "corpus": {"text_bytes": {"code": 1e6}, "tokens": {"code": 5e5}},
    "zephon_tokens": TOKENS,
    "seq_len": 2048,
}


def headline_rows(markdown: str) -> dict[str, list[str]]:
    """The markdown headline table: metric -> its other cells."""
    table = markdown.split("## Headline ratios", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in table.splitlines()
        if line.startswith("| ")
    ]
    assert rows[0] == ["metric", "value", "target", "target met", "undisturbed runs"]
    return {cells[0]: cells[1:] for cells in rows[1:]}


def expected_metrics(selected: list[Family]) -> list[str]:
    """Every ratio a family with headlines compares against its baseline, and the restore's."""
    metrics = []
    for family in selected:
        if family.headline:
            for variant in family.variants:
                if variant is not family.baseline:
                    pair = (family.baseline.label, variant.label)
                    metrics.append(" ÷ ".join(pair if family.inverted else pair[::-1]))
    restores = [(10, "early"), (916, "matched")]
    return metrics + [f"restore step 10,000 ÷ step {step} ({name})" for step, name in restores]


def test_every_target_is_listed_met_or_missed_with_its_undisturbed_runs() -> None:
    selected = families(TOKENS)
    report = build_report(META, selected, outputs_of(selected), RESTORE)
    rows = headline_rows(to_markdown(report))
    assert list(rows) == expected_metrics(selected)
    threads = "Zephon threads p2 L8"
    assert rows[f"{threads} ÷ raw tiktoken (2 threads)"] == ["0.80", ">= 0.85", "missed", "3 of 3"]
    assert rows["Zephon processes p2 L8 ÷ raw tiktoken (2 threads)"][2] == "missed"
    assert rows[f"{threads} ÷ PyTorch DataLoader (2 workers)"][2:] == ["met", "3 of 3"]
    # the fewer undisturbed runs of the two sides: TorchTitan's loader's one
    assert rows[f"{threads} ÷ TorchTitan 0.3.0 HF loader (2 workers)"] == [
        "2.00",
        ">= 1.0",
        "met",
        "1 of 3",
    ]
    assert rows[f"{threads} ÷ {threads} unordered"][1:3] == ["n/a", "no target"]
    assert rows["restore step 10,000 ÷ step 10 (early)"] == ["5.00", "<= 1.2", "missed", "3 of 3"]
    assert rows["restore step 10,000 ÷ step 916 (matched)"][2] == "met"


def test_a_failed_measurement_keeps_its_targets_as_not_measured() -> None:
    selected = families(TOKENS)
    report = build_report(
        META, selected, outputs_of(selected, failing="torchtitan-hf"), {"ok": False}
    )
    rows = headline_rows(to_markdown(report))
    titan = rows["Zephon threads p2 L8 ÷ TorchTitan 0.3.0 HF loader (2 workers)"]
    assert titan == ["n/a", ">= 1.0", "not measured", "0 of 0"]
    for base in RESTORE_BASES:
        assert rows[f"restore late ÷ {base}"] == ["n/a", "<= 1.2", "not measured", "n/a"]
