"""orchestrator.service.scheduler without training: which processes a restarted scheduler
takes for a job's (real processes, checked through psutil), adoption and recording.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import JobState
from orchestrator.service.scheduler import Scheduler, job_process


def sleeper(*argv: str) -> subprocess.Popen[bytes]:
    """A process whose command line carries ``argv`` (as a job's carries its id)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *argv])


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def test_a_job_process_is_alive_named_and_not_younger_than_its_attempt(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    before = time.time()
    job = sleeper("j-0123456789ab")
    processes.append(job)
    time.sleep(0.3)  # its command line is set once the interpreter has started
    found = job_process(job.pid, "j-0123456789ab", time.time())
    assert found is not None and found.pid == job.pid
    assert job_process(job.pid, "j-ffffffffffff", time.time()) is None  # another job's pid
    assert job_process(job.pid, "j-0123", time.time()) is None  # a whole argument, not a part
    # an attempt that went to running well before this process existed: a reused pid
    assert job_process(job.pid, "j-0123456789ab", before - 60) is None
    job.kill()
    time.sleep(0.3)
    assert job_process(job.pid, "j-0123456789ab", time.time()) is None  # a zombie has ended
    job.wait()
    assert job_process(job.pid, "j-0123456789ab", time.time()) is None  # gone


def test_recovery_adopts_a_live_job_and_records_it_when_it_ends(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    svc = ServiceConfig(root=str(tmp_path / "svc"), device="cpu")
    queue = svc.queue()
    live, _ = queue.submit({"n": 1}, key="live", submitter="alice")
    dead, _ = queue.submit({"n": 2}, key="dead", submitter="alice")
    live_process, dead_process = sleeper(live.id), sleeper(dead.id)
    processes.extend([live_process, dead_process])
    queue.transition(live.id, JobState.RUNNING, dp=1, pid=live_process.pid)
    queue.transition(dead.id, JobState.RUNNING, dp=1, pid=dead_process.pid)
    dead_process.kill()
    dead_process.wait()
    time.sleep(0.3)

    scheduler = Scheduler(svc, poll_s=0.1)
    scheduler.recover()
    assert set(scheduler.active) == {live.id}  # adopted: still running, on a lease
    idle = scheduler.pool.capacity + scheduler.pool.extra_processes  # free slots with no run
    assert queue.get(live.id).state == JobState.RUNNING and scheduler.pool.free == idle - 1
    assert queue.get(dead.id).state == JobState.PREEMPTED  # no result file: its process died
    live_process.kill()
    scheduler.active[live.id].result(timeout=10)
    assert queue.get(live.id).state == JobState.PREEMPTED
    assert [e.detail for e in queue.events(live.id)][-1] == "process died"
