"""The leftover launch a resume stops, and nothing else."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import launch


def test_a_dead_zephons_leftover_launch_is_stopped_and_nothing_else(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    leftover = subprocess.Popen([*sleep, str(folder.path.absolute())], start_new_session=True)
    stranger = subprocess.Popen([*sleep, "elsewhere"], start_new_session=True)
    try:
        groups = (leftover.pid, stranger.pid, 2**22 + 1)

        assert launch.stop_leftover_launch(folder, groups) == [leftover.pid]

        assert leftover.wait(timeout=10) == -signal.SIGKILL
        assert stranger.poll() is None  # its group id was recorded, but it is not this run's
    finally:
        for process in (leftover, stranger):
            process.kill()
            process.wait()
