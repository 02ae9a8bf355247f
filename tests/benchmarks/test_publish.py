"""Every results file says how it was made (``benchmarks/publish.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.publish import publish
from tests.support import REPO


def test_a_report_without_its_commit_gets_the_command_commit_cpu_and_date(tmp_path: Path) -> None:
    publish(tmp_path, "x", {"ratio": 0.5}, "# X\n\n| a |\n")
    report = json.loads((tmp_path / "x.json").read_text())
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    assert report["ratio"] == 0.5 and report["made"]["commit"] == head
    assert report["made"]["command"].startswith("python ") and report["made"]["cpu"]
    last = (tmp_path / "x.md").read_text().splitlines()[-1]
    assert last.startswith("Made by `python ") and f"at commit {head} on " in last


def test_a_report_recording_its_commit_is_written_as_it_is(tmp_path: Path) -> None:
    report = {"command": "bash scripts/bench.sh --process", "commit": "abc1234", "ratio": 1}
    publish(tmp_path, "y", report, "# Y\n")
    assert json.loads((tmp_path / "y.json").read_text()) == report
    assert (tmp_path / "y.md").read_text() == "# Y\n"
