"""Where a benchmark's results go: ``<stem>.json`` (everything) and ``<stem>.md`` (the tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def publish(results_dir: Path, stem: str, report: dict[str, Any], markdown: str) -> None:
    """Write ``report`` and its ``markdown`` to ``results_dir/<stem>.{json,md}``; print the tables."""
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (results_dir / f"{stem}.md").write_text(markdown)
    print(markdown)
