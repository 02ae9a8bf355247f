"""A sweep's summary: ``sweep.json`` in its folder, and the report printed at its end.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweeps.mixes import mix_label

SWEEP_FILE = "sweep.json"


def write_summary(summary: dict[str, Any], sweep_dir: Path) -> None:
    """Write ``summary`` as the sweep folder's ``sweep.json``."""
    (sweep_dir / SWEEP_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")


def sweep_report(summary: dict[str, Any], sweep_dir: Path, decimals: int) -> str:
    """What the user reads at the end of a sweep: the table (or why not) and where to look."""
    verdict = summary["comparison"] or {}
    lines = [
        f"== {summary['sweep']}: {len(summary['jobs'])} jobs, summary in {sweep_dir / SWEEP_FILE}"
    ]
    lines += [
        f"  job {o['job']}: {o['status']:9} {mix_label(o['mixture'], decimals)} "
        + "".join(f"{o_} " for o_ in [*(o.get("varied") or []), *(o.get("other") or [])])
        + f"{_seed_label(o.get('seed'))}"
        f"dp={o.get('dp_sizes')} {o.get('run_name') or ''}"
        for o in summary["jobs"]
    ]
    if verdict.get("markdown"):
        lines += ["", verdict["markdown"]]
    elif verdict.get("error"):
        lines += ["", verdict["error"]]
    uri = summary["tracking_uri"] or ""
    if uri.startswith("sqlite:"):
        lines.append(
            f"Look at it: mlflow ui --backend-store-uri {uri}  (parent run "
            f"{summary['parent_run_id']})"
        )
    elif uri:
        lines.append(f"Look at it: {uri} (parent run {summary['parent_run_id']})")
    return "\n".join(lines)


def _seed_label(seed: int | None) -> str:
    return "" if seed is None else f"seed={seed} "
