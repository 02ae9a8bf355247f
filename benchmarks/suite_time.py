"""How long the test suite takes: ``bash scripts/test.sh`` (what CI runs), timed once.

``python -m benchmarks.suite_time [PYTEST ARGS]`` (``bash scripts/bench.sh --test-suite``)
runs the script, reads pytest's own summary line (its counts and its time) and adds the run
to ``benchmarks/results/suite_time.{json,md}`` with the command, commit, CPU and date; the
file keeps every run. There is no baseline to divide by: the figure is held against CI's
limit (20 minutes for the tests on 2 cores), not against another way of testing. It takes
the suite's time (about 20 minutes on 2 cores); run it on a quiet machine.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, provenance
from benchmarks.publish import RESULTS, publish

STEM = "suite_time"
CI_LIMIT_S = 20 * 60
"""What CI allows the tests on 2 cores of the slowest machine."""
SUMMARY = re.compile(r"^=* ?(?P<counts>\d+ \w+.*?) in (?P<seconds>[\d.]+)s(?: \(.*\))? ?=*$")


@dataclass(frozen=True)
class SuiteRun:
    """One run of the suite: pytest's summary and the script's wall time."""

    counts: str
    """pytest's counts, e.g. ``1085 passed, 3 skipped, 24 warnings``."""
    pytest_s: float
    """pytest's own time for the tests."""
    script_s: float
    """The whole script: set-up check, lint, format check and the tests."""
    exit_code: int


def summary_of(output: str) -> tuple[str, float] | None:
    """pytest's counts and seconds from its last summary line in ``output``; None if absent."""
    for line in reversed(output.splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            return found["counts"], float(found["seconds"])
    return None


def to_markdown(report: dict[str, Any]) -> str:
    """Every recorded run as a table."""
    lines = [
        "# The test suite's time",
        "",
        f"`bash scripts/test.sh`, timed by `benchmarks/suite_time.py`; CI allows the tests "
        f"{CI_LIMIT_S // 60} minutes on 2 cores.",
        "",
        "| date | commit | CPU | pytest | whole script | counts | exit |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        minutes, seconds = divmod(round(run["pytest_s"]), 60)
        lines.append(
            f"| {run['date']} | {run['commit']} | {run['cpu']} | {minutes} min {seconds} s "
            f"| {run['script_s']:.0f} s | {run['counts']} | {run['exit_code']} |"
        )
    return "\n".join(lines) + "\n"


def record(run: SuiteRun, made: dict[str, str], results_dir: Path) -> dict[str, Any]:
    """Add ``run`` (made as ``made`` says: command, commit, CPU, date) to the results files."""
    path = results_dir / f"{STEM}.json"
    report = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    report["runs"].append({**made, **asdict(run)})
    report.update(made)  # the latest run's, at the top
    publish(results_dir, STEM, report, to_markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the suite once and record it; the suite's exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = ["bash", "scripts/test.sh", *arguments]
    made = provenance(shlex.join(["bash", "scripts/bench.sh", "--test-suite", *arguments]), ())
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    script_s = time.perf_counter() - started
    sys.stdout.write(done.stdout[-5000:])
    summary = summary_of(done.stdout)
    if summary is None:
        print(f"suite_time: no pytest summary in the output:\n{done.stderr[-3000:]}")
        return done.returncode or 1
    counts, pytest_s = summary
    record(SuiteRun(counts, pytest_s, round(script_s, 1), done.returncode), made, RESULTS)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
