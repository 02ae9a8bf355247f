"""SIGINT/SIGTERM handling (orchestrator/run/interrupts.py) and what run_local does with it, on
real processes: the signal sets STOP instead of raising, a launch kills its whole process
tree within seconds, the device pool starts nothing more, and the report names every
unfinished run with the command that continues it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices
from orchestrator.run import interrupts
from orchestrator.run.launch import Launch, run_local
from orchestrator.service.pool import DevicePool
from tests.support import REPO

# A stand-in for torchrun: a process group of a parent and a child that ignore nothing,
# both naming the marker given as their argument (other tests' trees name others).
TREE = textwrap.dedent(
    """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
    print("started", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    interrupts.reset()
    yield
    interrupts.reset()


def naming(text: str) -> list[psutil.Process]:
    """Live processes whose command line contains ``text``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if text in " ".join(process.info["cmdline"] or []) and process.pid != os.getpid():
            found.append(process)
    return found


def test_a_signal_in_handling_sets_stop_and_is_restored_after() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with interrupts.handling():
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not interrupts.requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert interrupts.requested()
        assert interrupts.signal_received() == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


def test_run_local_kills_the_whole_process_tree_on_a_signal(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    marker = str(tmp_path / "marker")  # names every process of the tree
    command = [sys.executable, "-c", TREE, marker]
    threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    code = run_local(Launch([command], dict(os.environ), folder))
    assert code == -signal.SIGINT
    assert time.monotonic() - start < 3.0 + 15  # TERM, then KILL after 10 s at most
    assert "started" in folder.log_path.read_text()
    time.sleep(0.5)
    assert not naming(marker)  # the parent and its child: the whole group


def test_a_launch_started_after_the_signal_starts_nothing(tmp_path: Path) -> None:
    interrupts.request(signal.SIGTERM)
    marker = str(tmp_path / "never")
    launch = Launch([[sys.executable, "-c", TREE, marker]], dict(os.environ), RunFolder(tmp_path))
    code = run_local(launch)
    assert code == -signal.SIGTERM
    assert not naming(marker)


def test_a_closed_pool_fails_its_waiting_runs_and_finishes_the_running_one() -> None:
    pool = DevicePool(Devices("cpu", 1, "cpu"))
    release = threading.Event()
    running = pool.submit([1], lambda lease: release.wait(10) and lease.size)
    waiting = pool.submit([1], lambda lease: lease.size)
    assert pool.close(interrupts.Interrupted()) == 1
    release.set()
    assert running.result(timeout=10) == 1
    assert isinstance(waiting.exception(timeout=10), interrupts.Interrupted)


def test_the_report_lists_runs_noted_in_child_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info, interrupts.entry_point("prog"):
        child = (
            "from orchestrator.run import interrupts; interrupts.note_unfinished('run-b: stopped')"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-c", child], check=True, env=env)
        interrupts.note_unfinished("run-a: stopped")
        interrupts.request()
        raise RuntimeError("what an interrupted job raises")  # reported, not shown
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    assert "stopped by SIGINT" in err and "Traceback" not in err and "RuntimeError" not in err
    assert "run-a: stopped" in err and "run-b: stopped" in err
    assert interrupts.UNFINISHED_ENV not in os.environ


def test_without_a_signal_errors_pass_through_the_entry_point() -> None:
    with pytest.raises(RuntimeError, match="plain failure"), interrupts.entry_point("prog"):
        raise RuntimeError("plain failure")


def test_exit_without_teardown_keeps_the_code_the_output_atexit_and_threads(tmp_path: Path) -> None:
    marker = tmp_path / "thread-finished"
    script = textwrap.dedent(
        f"""
        import atexit, concurrent.futures, sys, threading, time
        from pathlib import Path
        from orchestrator.run import interrupts

        def slow_writer():
            time.sleep(0.3)
            Path({str(marker)!r}).write_text("done")

        threading.Thread(target=slow_writer).start()  # not a daemon: joined first
        # an idle pool's workers are not daemons either: they are told to stop, not waited on
        pool = concurrent.futures.ThreadPoolExecutor(2)
        pool.submit(print, "pool ran", file=sys.stderr).result()
        atexit.register(lambda: print("atexit ran", file=sys.stderr))
        print("buffered output", end="")  # no newline: only a flush writes it
        interrupts.exit_without_teardown(3)
        print("never printed")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered output"
    assert "atexit ran" in done.stderr and "pool ran" in done.stderr
    assert marker.read_text() == "done"
