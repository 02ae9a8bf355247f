"""``benchmarks/suite_time.py`` reads pytest's summary and keeps every run it records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.suite_time import SuiteRun, record, summary_of


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "1081 passed, 3 skipped, 24 warnings in 1162.22s (0:19:22)",
            ("1081 passed, 3 skipped, 24 warnings", 1162.22),
        ),
        ("===== 2 failed, 10 passed in 3.50s =====", ("2 failed, 10 passed", 3.5)),
        (
            "13 failed, 1058 passed, 3 skipped, 24 warnings in 1111.35s (0:18:31)",
            ("13 failed, 1058 passed, 3 skipped, 24 warnings", 1111.35),
        ),
    ],
)
def test_the_summary_line_is_read(line: str, expected: tuple[str, float]) -> None:
    assert summary_of(f"....\n{line}\nrc=0\n") == expected


def test_output_without_a_summary_is_none() -> None:
    assert summary_of("ImportError: no module named x\n") is None


def test_every_run_is_kept_with_how_it_was_made(tmp_path: Path) -> None:
    made = {
        "command": "bash scripts/bench.sh --test-suite",
        "commit": "abc1234",
        "cpu": "AMD EPYC",
        "machine": "2 CPUs",
        "date": "2026-12-05T09:00:00+00:00",
    }
    record(SuiteRun("10 passed", 70.0, 80.0, 0), made, tmp_path)
    record(
        SuiteRun("9 passed, 1 failed", 1262.0, 1300.0, 1), {**made, "commit": "def5678"}, tmp_path
    )
    runs = json.loads((tmp_path / "suite_time.json").read_text())["runs"]
    assert [(r["commit"], r["pytest_s"], r["exit_code"]) for r in runs] == [
        ("abc1234", 70.0, 0),
        ("def5678", 1262.0, 1),
    ]
    table = (tmp_path / "suite_time.md").read_text()
    assert (
        "| 2026-12-05T09:00:00+00:00 | abc1234 | AMD EPYC | 1 min 10 s | 80 s | 10 passed | 0 |"
        in table
    )
    assert "21 min 2 s" in table
