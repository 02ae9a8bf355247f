"""A launch's progress lines, read from the run folder as training writes it, and the
leftover launch a resume stops."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.experiment.runfolder import RUN_SUBDIR, STEPS_FILE, RunFolder
from orchestrator.run import launch


def write_step(folder: RunFolder, step: int, tokens: int) -> None:
    path = folder.titan_dir / RUN_SUBDIR / STEPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"step": step, "tokens": tokens}) + "\n")


def test_tokens_per_second_only_once_an_interval_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(launch.time, "monotonic", lambda: clock[0])
    folder = RunFolder(tmp_path)
    stream = io.StringIO()
    progress = launch.Progress(4, stream, label="run ")

    progress.update(folder)  # nothing trained yet: nothing to say
    write_step(folder, 1, 1000)
    clock[0] += 5
    progress.update(folder)
    write_step(folder, 2, 1000)
    clock[0] += 2
    progress.update(folder)  # within 10 s of the last line: quiet
    write_step(folder, 3, 1000)
    write_step(folder, 4, 1000)
    clock[0] += 2
    progress.update(folder)  # the last step is always shown

    lines = stream.getvalue().splitlines()
    assert lines == ["run step 1/4, 5 s", "run step 4/4, 750 tokens/s, 9 s"]


def test_a_dead_zephons_leftover_launch_is_stopped_and_nothing_else(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    leftover = subprocess.Popen([*sleep, str(folder.path.absolute())], start_new_session=True)
    stranger = subprocess.Popen([*sleep, "elsewhere"], start_new_session=True)
    try:
        folder.update_state(launch_process_groups=[leftover.pid, stranger.pid, 2**22 + 1])

        assert launch.stop_leftover_launch(folder) == [leftover.pid]

        assert leftover.wait(timeout=10) == -signal.SIGKILL
        assert stranger.poll() is None  # its group id was recorded, but it is not this run's
    finally:
        for process in (leftover, stranger):
            process.kill()
            process.wait()
