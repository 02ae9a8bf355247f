"""Where a benchmark's results go: ``<stem>.json`` (everything) and ``<stem>.md`` (the tables),
each saying how it was made: the command, the commit, the CPU and the date."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, provenance

RESULTS = REPO_ROOT / "benchmarks" / "results"
"""Where the benchmarks' results files live."""


def publish(results_dir: Path, stem: str, report: dict[str, Any], markdown: str) -> None:
    """Write ``report`` and its ``markdown`` to ``results_dir/<stem>.{json,md}``; print the tables.

    A report that does not record its commit gets :func:`~benchmarks.machine.provenance` of
    this process's command line (``made``), and its markdown a last line saying it."""
    if "commit" not in report:
        made = provenance(shlex.join(["python", *sys.orig_argv[1:]]), ())
        report = {**report, "made": made}
        markdown = (
            f"{markdown.rstrip()}\n\nMade by `{made['command']}` at commit {made['commit']} "
            f"on {made['cpu']}, {made['date']}.\n"
        )
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (results_dir / f"{stem}.md").write_text(markdown)
    print(markdown)
