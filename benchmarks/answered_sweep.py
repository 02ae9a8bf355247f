"""How long a re-submitted, unchanged sweep takes to be answered from the runs it already has.

``python -m benchmarks.answered_sweep [--jobs 12] [--work-dir DIR]`` runs a sweep of ``--jobs``
mixtures (``zephon_mini``, 2 steps, dp 1, the zephon launcher, the local corpus), then the
same sweep again, and prints one JSON line: the seconds each took, how many run folders the
second one made (goal: 0) and how many of its jobs name the run that answered them (goal:
all). Goal for 12 jobs: the second sweep under 30 s.

Design: docs/design/orchestrator_run.md ("Answers from runs that already exist")
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT
from orchestrator.run.identity_index import INDEX_DIR
from sweeps.summary import SWEEP_FILE


def mixes(jobs: int) -> str:
    """``hydra.sweeper.mix.explicit`` of ``jobs`` distinct mixtures of the local corpus."""
    items = [f"{{code:{i + 1},docs:{jobs + 2 - i},unicode:1}}" for i in range(jobs)]
    return f"hydra.sweeper.mix.explicit=[{','.join(items)}]"


def sweep(work: Path, name: str, jobs: int) -> tuple[float, dict[str, Any]]:
    """Run the sweep ``name`` in ``work``; its wall seconds and its ``sweep.json``."""
    sweep_dir = work / "multirun" / name
    command = [
        *(sys.executable, "-m", "sweeps.app", "-m"),
        *("hydra/sweeper=zephon_mix", "hydra/launcher=zephon", "model=mini", "train=smoke"),
        *("train.steps=2", "eval.interval=2", "resources.dp=1", mixes(jobs)),
        f"hydra.sweep.dir={sweep_dir}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    start = time.monotonic()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise RuntimeError(f"sweep {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return seconds, json.loads((sweep_dir / SWEEP_FILE).read_text())


def run_folders(work: Path) -> set[str]:
    return {p.name for p in (work / "runs").glob("*") if p.is_dir() and p.name != INDEX_DIR}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=12)
    parser.add_argument("--work-dir", type=Path, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="answered-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    first_s, first = sweep(work, "first", args.jobs)
    trained = run_folders(work)
    again_s, again = sweep(work, "again", args.jobs)
    answered = [j for j in again["jobs"] if j.get("answered_from")]
    report = {
        "jobs": args.jobs,
        "first_sweep_s": round(first_s, 1),
        "resubmitted_sweep_s": round(again_s, 1),
        "run_folders_made_by_resubmission": len(run_folders(work) - trained),
        "jobs_answered": len(answered),
        "first_jobs_trained": sum(1 for j in first["jobs"] if not j.get("answered_from")),
        "work": str(work),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
