"""orchestrator.service.queue on real SQLite files: the state machine, idempotency, limits,
persistence, and many processes and threads writing at once."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import QueueError, QueueFull, TransitionError
from orchestrator.service.job import JobKind, JobState
from orchestrator.service.queue import JobQueue
from tests.support.processes import forked_process_context

SPEC = {"data": {"mixture": {"code": 0.5, "docs": 0.5}}, "train": {"steps": 20}}


@pytest.fixture
def queue(tmp_path: Path) -> JobQueue:
    return JobQueue(tmp_path / "queue" / "jobs.db")


def spec_of(i: int) -> dict[str, Any]:
    return {**SPEC, "train": {"steps": 20 + i}}


def test_import_stays_light() -> None:
    code = "import sys, orchestrator.service.queue; print(sorted({'torch', 'mlflow', 'hydra', 'omegaconf'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_submit_get_find_list_and_pending_order(queue: JobQueue) -> None:
    a, created = queue.submit(spec_of(0), key="a", submitter="alice")
    assert created
    assert a.id.startswith("j-") and len(a.id) == 14 and set(a.id[2:]) <= set("0123456789abcdef")
    assert (a.state, a.kind, a.attempts, a.dp_sizes, a.cancel_requested) == (
        JobState.QUEUED,
        JobKind.RUN,
        0,
        [],
        False,
    )
    assert a.spec == spec_of(0) and len(a.spec_hash) == 64
    b, _ = queue.submit(spec_of(1), key="b", submitter="bob", kind=JobKind.PLAN)
    c, _ = queue.submit(spec_of(2), key="c", submitter="alice")

    assert queue.get(a.id) == a
    assert queue.find("b") == b
    assert queue.find("nope") is None
    assert [j.id for j in queue.list()] == [a.id, b.id, c.id]
    assert [j.id for j in queue.list(submitter="alice")] == [a.id, c.id]
    assert [j.id for j in queue.list(kind=JobKind.PLAN)] == [b.id]
    assert [j.id for j in queue.list(limit=1, offset=1)] == [b.id]
    assert queue.list(states=[JobState.RUNNING]) == []

    queue.transition(a.id, JobState.RUNNING, dp=2)
    queue.transition(a.id, JobState.PREEMPTED)
    queue.transition(b.id, JobState.RUNNING)
    assert [j.id for j in queue.list(states=[JobState.RUNNING])] == [b.id]
    assert [
        j.id for j in queue.list(states=(JobState.QUEUED, JobState.PREEMPTED), submitter="alice")
    ] == [
        a.id,
        c.id,
    ]
    # The scheduler's to-do list: queued and preempted, oldest first.
    assert [j.id for j in queue.pending()] == [a.id, c.id]
    assert queue.counts() == {
        s: {JobState.QUEUED: 1, JobState.RUNNING: 1, JobState.PREEMPTED: 1}.get(s, 0)
        for s in JobState
    }
    assert queue.get(a.id).to_dict()["dp_sizes"] == [2]


def test_attempts_dp_sizes_and_events_across_preemption(queue: JobQueue) -> None:
    job, _ = queue.submit(SPEC, key="k", submitter="alice")
    queue.transition(
        job.id, JobState.RUNNING, dp=4, pid=111, run_folder=Path("/runs/k"), detail="start"
    )
    queue.update(job.id, mlflow_run_id="mlf-1")
    queue.transition(job.id, JobState.PREEMPTED, detail="node lost")
    queue.transition(job.id, JobState.RUNNING, dp=2, pid=222, expect=[JobState.PREEMPTED])
    done = queue.transition(
        job.id, JobState.SUCCEEDED, expect={JobState.RUNNING}, result={"bpb": 1.25}, detail="done"
    )

    assert done.state == JobState.SUCCEEDED
    assert done.attempts == 2
    assert done.dp_sizes == [4, 2]
    assert (done.pid, done.run_folder, done.mlflow_run_id) == (222, "/runs/k", "mlf-1")
    assert done.result == {"bpb": 1.25}
    assert done.updated_at >= done.created_at
    events = queue.events(job.id)
    assert [(e.state, e.detail) for e in events] == [
        (JobState.QUEUED, ""),
        (JobState.RUNNING, "start"),
        (JobState.PREEMPTED, "node lost"),
        (JobState.RUNNING, ""),
        (JobState.SUCCEEDED, "done"),
    ]
    assert all(e.job_id == job.id for e in events)
    assert [e.at for e in events] == sorted(e.at for e in events)


def test_update_sets_fields_without_event(queue: JobQueue) -> None:
    job, _ = queue.submit(SPEC, key="k", submitter="alice")
    queue.transition(job.id, JobState.RUNNING)
    updated = queue.update(job.id, pid=42, mlflow_run_id="abc")
    assert (updated.state, updated.pid, updated.mlflow_run_id) == (JobState.RUNNING, 42, "abc")
    assert [e.state for e in queue.events(job.id)] == [JobState.QUEUED, JobState.RUNNING]
    assert queue.update(job.id, pid=None).pid is None
    with pytest.raises(QueueError, match=r"unknown job field.*dp"):
        queue.update(job.id, dp=2)
    with pytest.raises(QueueError, match="pid must be an integer or None, not str"):
        queue.update(job.id, pid="42")


def test_idempotent_submit(queue: JobQueue) -> None:
    first, created = queue.submit({"b": 1, "a": [1, 2]}, key="k", submitter="alice")
    assert created
    # Same spec (key order does not matter), even from another process after a timeout.
    again, created = queue.submit({"a": [1, 2], "b": 1}, key="k", submitter="alice")
    assert (again, created) == (first, False)
    queue.transition(first.id, JobState.RUNNING)
    again, created = queue.submit({"a": [1, 2], "b": 1}, key="k", submitter="alice")
    assert (again.id, again.state, created) == (first.id, JobState.RUNNING, False)

    with pytest.raises(
        QueueError, match=rf"key 'k' was already used for a different spec \(job {first.id}"
    ):
        queue.submit({"a": [1, 3], "b": 1}, key="k", submitter="alice")
    with pytest.raises(QueueError, match="key 'k' was already used"):
        queue.submit({"a": [1, 2], "b": 1}, key="k", submitter="alice", kind=JobKind.PLAN)
    assert len(queue.list()) == 1
    assert [e.state for e in queue.events(first.id)] == [JobState.QUEUED, JobState.RUNNING]


def test_illegal_transitions_change_nothing(queue: JobQueue) -> None:
    job, _ = queue.submit(SPEC, key="k", submitter="alice")

    def unchanged() -> None:
        assert queue.get(job.id) == job
        assert [e.state for e in queue.events(job.id)] == [JobState.QUEUED]

    for to in (JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.QUEUED):
        with pytest.raises(TransitionError, match=f"job {job.id} is queued; cannot go to {to}"):
            queue.transition(job.id, to, pid=7, error="x")
        unchanged()
    with pytest.raises(TransitionError, match=f"job {job.id} is queued, not running as expected"):
        queue.transition(job.id, JobState.CANCELLED, expect=[JobState.RUNNING], error="x")
    unchanged()
    with pytest.raises(QueueError, match="unknown state 'done'"):
        queue.transition(job.id, "done")
    with pytest.raises(QueueError, match="dp is the size of a new attempt"):
        queue.transition(job.id, JobState.CANCELLED, dp=2)
    unchanged()

    queue.transition(job.id, JobState.RUNNING)
    final = queue.transition(job.id, JobState.FAILED, error="OOM")
    for to in JobState:
        with pytest.raises(TransitionError, match=r"is failed; cannot go to .*none, it is final"):
            queue.transition(job.id, to)
    assert queue.get(job.id) == final
    assert [e.state for e in queue.events(job.id)] == [
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.FAILED,
    ]


def test_compare_and_set_lets_one_of_two_schedulers_win(queue: JobQueue) -> None:
    job, _ = queue.submit(SPEC, key="k", submitter="alice")
    queue.transition(job.id, JobState.RUNNING, expect=[JobState.QUEUED], pid=1)
    with pytest.raises(TransitionError, match="is running, not queued as expected"):
        queue.transition(job.id, JobState.RUNNING, expect=[JobState.QUEUED], pid=2)
    assert queue.get(job.id).pid == 1
    assert queue.get(job.id).attempts == 1


def test_request_cancel(queue: JobQueue) -> None:
    queued, _ = queue.submit(SPEC, key="q", submitter="alice")
    cancelled = queue.request_cancel(queued.id)
    assert cancelled.state == JobState.CANCELLED
    assert [(e.state, e.detail) for e in queue.events(queued.id)] == [
        (JobState.QUEUED, ""),
        (JobState.CANCELLED, "cancel requested"),
    ]
    assert queue.request_cancel(queued.id) == cancelled  # final: unchanged

    preempted, _ = queue.submit(SPEC, key="p", submitter="alice")
    queue.transition(preempted.id, JobState.RUNNING)
    queue.transition(preempted.id, JobState.PREEMPTED)
    assert queue.request_cancel(preempted.id).state == JobState.CANCELLED

    running, _ = queue.submit(SPEC, key="r", submitter="alice")
    queue.transition(running.id, JobState.RUNNING, pid=99)
    flagged = queue.request_cancel(running.id)
    assert (flagged.state, flagged.cancel_requested, flagged.pid) == (JobState.RUNNING, True, 99)
    assert [e.state for e in queue.events(running.id)] == [JobState.QUEUED, JobState.RUNNING]
    assert queue.request_cancel(running.id) == flagged
    # A cancel-requested job must not come back through preemption; the scheduler cancels it.
    with pytest.raises(TransitionError, match="has a cancel request; cannot go to preempted"):
        queue.transition(running.id, JobState.PREEMPTED)
    done = queue.transition(
        running.id, JobState.CANCELLED, expect=[JobState.RUNNING], detail="killed"
    )
    assert done.state == JobState.CANCELLED
    assert queue.request_cancel(running.id) == done
    assert queue.pending() == []


def test_submitter_limit(tmp_path: Path) -> None:
    queue = JobQueue(tmp_path / "jobs.db", max_queued_per_submitter=3)
    jobs = [queue.submit(spec_of(i), key=f"a{i}", submitter="alice")[0] for i in range(3)]
    queue.transition(jobs[0].id, JobState.RUNNING)
    queue.transition(jobs[0].id, JobState.PREEMPTED)  # still pending
    with pytest.raises(QueueFull, match=r"submitter 'alice' has 3 jobs .* the limit is 3"):
        queue.submit(spec_of(3), key="a3", submitter="alice")
    assert queue.find("a3") is None
    # A retry of an existing key is not a new job: the limit does not apply.
    assert queue.submit(spec_of(1), key="a1", submitter="alice") == (jobs[1], False)
    assert queue.submit(spec_of(0), key="b0", submitter="bob")[1]

    queue.transition(jobs[1].id, JobState.RUNNING)
    queue.transition(jobs[1].id, JobState.SUCCEEDED)
    job, created = queue.submit(spec_of(3), key="a3", submitter="alice")
    assert created and job.state == JobState.QUEUED
    with pytest.raises(QueueFull):
        queue.submit(spec_of(4), key="a4", submitter="alice")
    with pytest.raises(QueueError, match="at least 1"):
        JobQueue(tmp_path / "jobs.db", max_queued_per_submitter=0)


def test_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    first = JobQueue(path)
    job, _ = first.submit(SPEC, key="k", submitter="alice")
    first.transition(job.id, JobState.RUNNING, dp=2, pid=5)
    first.update(job.id, mlflow_run_id="m")
    first.close()

    second = JobQueue(path)  # as after a restart of the scheduler
    assert second.get(job.id) == first.get(job.id)
    assert [e.state for e in second.events(job.id)] == [JobState.QUEUED, JobState.RUNNING]
    assert second.submit(SPEC, key="k", submitter="alice") == (second.get(job.id), False)
    assert second.counts()[JobState.RUNNING] == 1


def test_bad_input(queue: JobQueue) -> None:
    cases = [
        (dict(spec=SPEC, key="", submitter="a"), "key must be a non-empty string"),
        (dict(spec=SPEC, key="k", submitter=""), "submitter must be a non-empty string"),
        (
            dict(spec=SPEC, key="x" * 201, submitter="a"),
            "key is 201 characters long; use at most 200",
        ),
        (dict(spec=SPEC, key="a\nb", submitter="a"), "unprintable"),
        (dict(spec=[1, 2], key="k", submitter="a"), "spec must be a dict .*, not list"),
        (dict(spec={"x": {1, 2}}, key="k", submitter="a"), "spec is not JSON-serialisable"),
        (dict(spec={"x": float("nan")}, key="k", submitter="a"), "spec is not JSON-serialisable"),
        (
            dict(spec=SPEC, key="k", submitter="a", kind="train"),
            "unknown job kind 'train'; use one of run, plan, verify",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(QueueError, match=message):
            queue.submit(**kwargs)
    assert queue.list() == []
    for call in (queue.get, queue.events, queue.request_cancel, queue.update):
        with pytest.raises(QueueError, match="no job 'j-000000000000' in the queue"):
            call("j-000000000000")
    with pytest.raises(QueueError, match="no job 'j-000000000000'"):
        queue.transition("j-000000000000", JobState.RUNNING)
    with pytest.raises(QueueError, match=r"unknown state\(s\) \['done'\] in states"):
        queue.list(states=["done"])
    job, _ = queue.submit(SPEC, key="k", submitter="a")
    with pytest.raises(QueueError, match="result is not JSON-serialisable"):
        queue.update(job.id, result={"x": object()})
    with pytest.raises(QueueError, match="dp must be a positive integer"):
        queue.transition(job.id, JobState.RUNNING, dp=0)
    assert queue.get(job.id) == job


# -- many processes and threads at once ----------------------------------------------------------

WORKERS = 20
KEYS_PER_WORKER = 10
CALLS_PER_KEY = 4  # the submission and 3 retries


def _submit_worker(path: str, worker: int, barrier: Any, results: Any) -> None:
    """Submit this worker's keys, each CALLS_PER_KEY times, in shuffled order."""
    rng = random.Random(worker)
    queue = JobQueue(path)
    calls = [i for i in range(KEYS_PER_WORKER) for _ in range(CALLS_PER_KEY)]
    rng.shuffle(calls)
    barrier.wait(timeout=120)
    out = []
    for i in calls:
        key = f"w{worker}-k{i}"
        spec = {"worker": worker, "index": i, "mixture": {"code": 0.25, "docs": 0.75}}
        job, created = queue.submit(spec, key=key, submitter=f"agent-{worker}")
        out.append((key, job.id, created))
        time.sleep(rng.uniform(0, 0.003))
    results.put((worker, out))


def test_concurrent_processes_and_schedulers(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    queue = JobQueue(path)  # shared by the scheduler threads: one connection per thread
    total = WORKERS * KEYS_PER_WORKER
    submitting = threading.Event()
    submitting.set()
    moved: dict[str, list[str]] = {"s0": [], "s1": []}
    lost: dict[str, list[str]] = {"s0": [], "s1": []}
    failures: list[BaseException] = []

    def scheduler(name: str) -> None:
        try:
            while True:
                waiting = submitting.is_set()
                todo = queue.list(states=[JobState.QUEUED])
                if not todo and not waiting:
                    return
                for job in todo:
                    try:
                        queue.transition(
                            job.id, JobState.RUNNING, expect=[JobState.QUEUED], dp=1, detail=name
                        )
                    except TransitionError:
                        lost[name].append(job.id)  # the other scheduler took it first
                        continue
                    queue.transition(
                        job.id, JobState.SUCCEEDED, expect=[JobState.RUNNING], detail=name
                    )
                    moved[name].append(job.id)
                time.sleep(0.005)
        except BaseException as e:  # reported by the test thread below
            failures.append(e)

    ctx = forked_process_context(__name__)
    barrier = ctx.Barrier(WORKERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_submit_worker, args=(path, w, barrier, results)) for w in range(WORKERS)
    ]
    threads = [threading.Thread(target=scheduler, args=(name,)) for name in moved]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    try:
        outputs = dict(results.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
        submitting.clear()
        for t in threads:
            t.join(timeout=60)
    assert not failures
    assert all(p.exitcode == 0 for p in procs)
    assert sorted(outputs) == list(range(WORKERS))

    calls = [call for out in outputs.values() for call in out]
    assert len(calls) == total * CALLS_PER_KEY
    ids_by_key: dict[str, set[str]] = {}
    for key, job_id, _ in calls:
        ids_by_key.setdefault(key, set()).add(job_id)
    assert len(ids_by_key) == total
    assert all(len(ids) == 1 for ids in ids_by_key.values())  # every retry: the same job
    assert sum(created for _, _, created in calls) == total

    jobs = queue.list(limit=10_000)
    assert len(jobs) == total
    assert {j.key: {j.id} for j in jobs} == ids_by_key
    # Each job was started by exactly one scheduler; the loser's compare-and-set failed.
    assert not set(moved["s0"]) & set(moved["s1"])
    assert sorted(moved["s0"] + moved["s1"]) == sorted(j.id for j in jobs)
    assert set(lost["s0"]) <= set(moved["s1"]) and set(lost["s1"]) <= set(moved["s0"])
    for job in jobs:
        assert (job.state, job.attempts, job.dp_sizes) == (JobState.SUCCEEDED, 1, [1])
        events = queue.events(job.id)
        assert [e.state for e in events] == [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED]
        owner = "s0" if job.id in moved["s0"] else "s1"
        assert [e.detail for e in events[1:]] == [owner, owner]
    assert queue.counts() == {s: total if s == JobState.SUCCEEDED else 0 for s in JobState}
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
