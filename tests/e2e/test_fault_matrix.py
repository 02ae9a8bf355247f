"""Faults during a run, against an uninterrupted run of the same experiment
(``benchmarks/fault_matrix.py``'s harness; its full matrix, every point of an 8-step run, is
``python -m benchmarks.fault_matrix``). ``zephon_mini`` on the shared corpus, dp 1, 4 steps,
checkpoints and evals every 2 steps.

Killed at four points (SIGKILL of ``zephon``'s process group at a failpoint), resumed after each:

1. ``zephon run`` killed while step 2's checkpoint is written (shards, no ``.metadata``);
2. ``zephon resume`` passes over the torn checkpoint, trains again from the start, and is
   killed in step 2's eval, after its checkpoint;
3. ``zephon resume`` from step 2 scores the eval the kill stopped, and is killed once step
   3's digest is logged;
4. the step-2 checkpoint's bytes are damaged; ``zephon resume`` sets it aside, trains from
   the start to the end, and is killed once MLflow accepted the last batch of metrics but
   before the run recorded it;
5. a last ``zephon resume`` finds the run succeeded and sends what MLflow lacks, once.

A full disk: the run folder on a 5 MB file system, where step 4's checkpoint does not fit;
the run fails saying so, and resumes once there is room.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.fault_matrix import KillPoint, fallbacks, findings, run_chain, zephon
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
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, domains: dict[str, list[Path]]) -> Path:
    """A folder holding the experiment (``experiment.json``) and its uninterrupted run
    ``runs/reference``."""
    work = tmp_path_factory.mktemp("faults")
    mixture = {"code": 0.5, "docs": 0.3, "unicode": 0.2}
    config = scored_experiment(domains, mixture, steps=4)
    config["resources"]["dp"] = 1  # the digests are those of any dp size; one process is cheapest
    (work / "experiment.json").write_text(json.dumps(config))  # JSON is YAML
    command = zephon("run", "-c", "experiment.json", "--name", "reference", "--json")
    done = subprocess.run(command, cwd=work, env=ENV, capture_output=True, text=True)
    assert json.loads(done.stdout)["status"] == "succeeded", done.stderr
    return work


def test_a_run_killed_at_every_kind_of_point_ends_as_if_never_killed(work: Path) -> None:
    folder = RunFolder(work / "runs" / "faulted")
    start = zephon("run", "-c", "experiment.json", "--name", "faulted", "--fresh", "--json")

    launches, result = run_chain(start, folder, POINTS, cwd=work, env=ENV)

    assert [launch.held for launch in launches[:-1]] == [True] * len(POINTS), launches
    assert result["status"] == "succeeded", result
    found = findings(folder, RunFolder(work / "runs" / "reference"))
    assert found.steps == 4 and found.failures() == {}, found
    assert fallbacks(launches) == 1
    set_aside = [line for launch in launches for line in launch.messages if "is damaged" in line]
    assert "checkpoint step-2 is damaged" in set_aside[0] and "other bytes" in set_aside[0]
    assert (folder.titan_dir / DAMAGED_DIR / "step-2" / ".metadata").exists()


@pytest.fixture
def small_disk(work: Path) -> Iterator[Path]:
    """A 5 MB tmpfs mounted in ``work`` (skipped where mounting is not allowed)."""
    mount = work / "small-disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a small file system here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)
        mount.rmdir()


def test_a_full_disk_fails_the_run_saying_so_and_it_resumes_once_there_is_room(
    work: Path, small_disk: Path
) -> None:
    folder = RunFolder(small_disk / "full")
    command = zephon(
        "run", "-c", "experiment.json", "--name", "full", "--fresh", "--json",
        f"runs_root={small_disk}",
    )  # fmt: skip
    done = subprocess.run(command, cwd=work, env=ENV, capture_output=True, text=True)
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 1 and error["kind"] == "disk_full", error
    said = error["message"]
    assert f"the disk holding {folder.path} is full (No space left on device)" in said, said
    assert f"resume {folder.path.absolute()}" in said and "from checkpoint step-2" in said
    assert "Traceback" not in done.stderr
    before = folder.digests()
    assert sorted(before) == [1, 2, 3, 4]  # trained on, then its step-4 checkpoint failed

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    resumed = subprocess.run(
        zephon("resume", str(folder.path), "--json"),
        cwd=work,
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert json.loads(resumed.stdout)["status"] == "succeeded", resumed.stderr
    found = findings(folder, RunFolder(work / "runs" / "reference"))
    assert found.failures() == {}, found
    assert {s: d for s, d in folder.digests().items() if s in before} == before
