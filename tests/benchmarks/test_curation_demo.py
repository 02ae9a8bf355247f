"""The curation demo's benchmark report (benchmarks/curation_demo.py), from a verdict of the
guard's JSON shape: nothing trains here."""

from __future__ import annotations

from typing import Any

from benchmarks.curation_demo import summary, to_markdown

RAW = "process: none · code=0.334 docs=0.333 unicode=0.333"
FILTERED = "process: fineweb_quality · code=0.334 docs=0.333 unicode=0.333"


def _row(mixture: str, runs: list[str], docs_eval: float, best: bool) -> dict[str, Any]:
    return {
        "mixture": mixture,
        "runs": runs,
        "seeds": 2,
        "dp_sizes": "1",
        "bpb": {"code": 3.0, "docs": 4.0, "docs_eval": docs_eval},
        "aggregate_bpb": docs_eval,
        "tier": 1 if best else 2,
        "best": best,
    }


def _read(records: int, filtered: int) -> dict[str, Any]:
    removed = {"decontaminate": 3, **({"fineweb_quality": filtered} if filtered else {})}
    return {"docs": {"records_read": records, "removed": removed}, "code": {"records_read": 9}}


VERDICT = {
    "accepted": True,
    "domains": ["code", "docs", "docs_eval"],
    "decided_on": ["docs_eval"],
    "design": "fixed",
    "rows": [_row(FILTERED, ["f0", "f1"], 3.41, True), _row(RAW, ["r0", "r1"], 3.62, False)],
    "data_read": {"f0": _read(773, 553), "f1": _read(692, 473), "r0": _read(123, 0), "r1": {}},
    "pairs": [
        {
            "a_mixture": FILTERED,
            "b_mixture": RAW,
            "difference": -0.2009,
            "interval": [-0.2523, -0.1494],
            "p_value": 0.000884,
            "decision": "a_better",
            "method": "paired over 48 documents",
            "next_step": None,
        }
    ],
    "signal_noise": [
        {"yardstick": "decided-on", "seed_sd": {"a": 0.02}},
        {"yardstick": "bpb:docs_eval", "seed_sd": {"a": 0.0115, "b": 0.0262}},
        {"yardstick": "accuracy:docs", "seed_sd": {"a": 0.01}},
    ],
}


def test_the_report_keeps_the_table_what_the_filter_removed_and_the_decision() -> None:
    kept = summary(VERDICT)
    assert kept["decided_on"] == ["docs_eval"] and kept["design"] == "fixed"
    filtered, raw = kept["variants"]
    assert filtered["docs"] == {"records_read": [773, 692], "filtered_out": [553, 473]}
    assert raw["docs"] == {"records_read": [123], "filtered_out": [0]}  # r1 recorded nothing
    assert kept["seed_sd"] == {"bpb:docs_eval": 0.0262}
    report = {
        "cpu": "AMD EPYC",
        "machine": "2 CPUs",
        "date": "2026-12-06",
        "command": "bash scripts/bench.sh --curation",
        "commit": "abc1234",
        "demo": {
            "wall_s": 301.6,
            "user_s": 295.1,
            "system_s": 11.7,
            "exit_status": 0,
            "other_load_percent": 40.0,
            **kept,
        },
    }
    md = to_markdown(report)
    assert "**302 s wall** (5.0 min)" in md and "other processes used 40%" in md
    assert "decided on docs_eval (fixed design)" in md
    assert f"| {FILTERED} | 2 | 1 | 3.0000 | 4.0000 | 3.4100 | 1 best | 773, 692 | 553, 473 |" in md
    assert "| -0.2009 | [-0.2523, -0.1494] | 0.000884 | a_better |" in md
    assert "bpb:docs_eval 0.0262" in md and "Next step" not in md


def test_a_refused_or_failed_demo_still_reports_its_time() -> None:
    report = {
        "cpu": "AMD EPYC",
        "machine": "2 CPUs",
        "date": "2026-12-06",
        "command": "bash scripts/bench.sh --curation",
        "commit": "abc1234",
        "demo": {
            "wall_s": 12.0,
            "user_s": 5.0,
            "system_s": 1.0,
            "exit_status": 1,
            "other_load_percent": None,
            **summary({"accepted": False, "refusals": [{"message": "contract_mismatch"}]}),
        },
    }
    md = to_markdown(report)
    assert "exit status 1" in md and "not measured" in md and "Refused: contract_mismatch" in md
    assert "| variant |" not in md
