"""Make the run folders of ``tests/data/runs_v0/`` with the release checked out where it runs.

Two runs of one experiment, mixtures A and B, ``zephon_mini`` over the shared test corpus,
6 steps: ``mix-a`` trained to the end and tracked (then its checkpoints dropped: a
comparison reads no checkpoint); ``mix-b`` interrupted (SIGINT) after its first
checkpoint, so a later release has a run to resume. Everything lives under ``ROOT``,
which ``tests/orchestrator/run/test_runs_v0.py`` replaces by its own folder.

    cd <checkout of the release> && ZEPHON_HOME=/tmp/zephon-runs-v0/home \
        python tests/data/runs_v0/make.py <this folder>
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.experiments import scored_experiment
from tests.support.titan_run import corpus

ROOT = Path("/tmp/zephon-runs-v0")
STEPS = 6
MIXTURES = {
    "mix-a": {"code": 1.0, "docs": 1.0, "unicode": 1.0},
    "mix-b": {"code": 2.0, "docs": 1.0, "unicode": 1.0},
}


def experiment(mixture: dict[str, float]) -> dict:
    config = scored_experiment(corpus(ROOT), mixture, steps=STEPS)
    config["runs_root"] = str(ROOT / "runs")
    config["tracking"] = {"uri": f"sqlite:///{ROOT}/mlflow.db", "experiment": "runs-v0"}
    config["resources"]["max_procs"] = 1
    return config


def launch(name: str, *, interrupt: bool) -> None:
    spec = ROOT / f"{name}.json"
    spec.write_text(json.dumps(experiment(MIXTURES[name])))
    command = [sys.executable, "-m", "orchestrator.cli", "run", "-c", str(spec), "--dp", "1"]
    command += ["--name", name]
    process = subprocess.Popen(command, cwd=ROOT)
    checkpoint = ROOT / "runs" / name / "titan" / "checkpoint" / "step-2" / ".metadata"
    while interrupt and process.poll() is None and not checkpoint.exists():
        time.sleep(0.05)
    if interrupt:
        process.send_signal(signal.SIGINT)
    process.wait(timeout=900)


def main(out: Path) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    launch("mix-a", interrupt=False)
    launch("mix-b", interrupt=True)
    for name in MIXTURES:
        folder = ROOT / "runs" / name
        for noise in ("titan/comm_traces", "titan/structured_logs", ".tmp"):
            shutil.rmtree(folder / noise, ignore_errors=True)
        (folder / "launch.log").unlink()
    for lock in (ROOT / "runs" / ".identities").glob("*.lock"):
        lock.unlink()
    shutil.rmtree(ROOT / "runs" / "mix-a" / "titan" / "checkpoint", ignore_errors=True)
    shutil.rmtree(out / "runs", ignore_errors=True)
    shutil.copytree(ROOT / "runs", out / "runs")


if __name__ == "__main__":
    main(Path(sys.argv[1]).absolute())
