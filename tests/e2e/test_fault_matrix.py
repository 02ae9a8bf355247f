"""A run SIGKILLed at four points of its training, resumed after each, against an
uninterrupted run of the same experiment (``benchmarks/fault_matrix.py``'s harness; its full
matrix, every point of an 8-step run, is ``python -m benchmarks.fault_matrix``).

``zephon_mini`` on the shared corpus, 4 steps, checkpoints and evals every 2 steps:

1. ``zephon run`` killed while step 2's checkpoint is written (shards, no ``.metadata``);
2. ``zephon resume`` passes over the torn checkpoint, trains again from the start, and is
   killed in step 2's eval, after its checkpoint;
3. ``zephon resume`` from step 2 scores the eval the kill stopped, and is killed once step
   3's digest is logged;
4. the step-2 checkpoint's bytes are damaged; ``zephon resume`` sets it aside, trains from
   the start to the end, and is killed once MLflow accepted the last batch of metrics but
   before the run recorded it;
5. a last ``zephon resume`` finds the run succeeded and sends what MLflow lacks, once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks.fault_matrix import (
    KillPoint,
    fallbacks,
    findings,
    run_chain,
    zephon,
)
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.failpoints import Failpoint
from orchestrator.run.checkpoint_recovery import DAMAGED_DIR
from tests.support import REPO
from tests.support.experiments import scored_experiment

pytestmark = pytest.mark.timeout(1800)

POINTS = (
    KillPoint(Failpoint.CHECKPOINT_WRITTEN, 2),
    KillPoint(Failpoint.EVAL, 2),
    KillPoint(Failpoint.STEP_LOGGED, 3),
    KillPoint(Failpoint.TRACKING_SENT, 4, damage=True),
)


def test_a_run_killed_at_every_kind_of_point_ends_as_if_never_killed(
    domains: dict[str, list[Path]], tmp_path: Path
) -> None:
    mixture = {"code": 0.5, "docs": 0.3, "unicode": 0.2}
    config = tmp_path / "experiment.json"
    config.write_text(json.dumps(scored_experiment(domains, mixture, steps=4)))  # JSON is YAML
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    reference = zephon("run", "-c", str(config), "--name", "reference", "--json")
    done = subprocess.run(reference, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert json.loads(done.stdout)["status"] == "succeeded", done.stderr
    folder = RunFolder(tmp_path / "runs" / "faulted")
    start = zephon("run", "-c", str(config), "--name", "faulted", "--fresh", "--json")

    launches, result = run_chain(start, folder, POINTS, cwd=tmp_path, env=env)

    assert [launch.held for launch in launches[:-1]] == [True] * len(POINTS), launches
    assert result["status"] == "succeeded", result
    found = findings(folder, RunFolder(tmp_path / "runs" / "reference"))
    assert found.steps == 4 and found.failures() == {}, found
    assert fallbacks(launches) == 1
    set_aside = [line for launch in launches for line in launch.messages if "is damaged" in line]
    assert "checkpoint step-2 is damaged" in set_aside[0] and "other bytes" in set_aside[0]
    assert (folder.titan_dir / DAMAGED_DIR / "step-2" / ".metadata").exists()
    assert folder.evals().keys() == RunFolder(tmp_path / "runs" / "reference").evals().keys()
