"""``zephon serve``: start queued experiments when devices are free; lose no job on a crash.

Each attempt of a training job runs as its own process, on a lease from the device pool
or (``launcher=slurm``) as a Slurm job, its JSON result in
``<root>/jobs/<id>/attempt-<n>.json``, so the job does not depend on the scheduler: it
only starts, watches and records. At start it adopts running jobs whose process (or
Slurm job) still lives and records or preempts the others.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from orchestrator.errors import ErrorKind, ExperimentError, TransitionError
from orchestrator.experiment import DeviceKind, DeviceRequest, ExperimentConfig
from orchestrator.experiment.run_record import RunStatus
from orchestrator.machine.devices import discover
from orchestrator.run import api
from orchestrator.run.slurm import SETTLED_RECHECK_S, is_settled
from orchestrator.service import attempt, slurm_jobs
from orchestrator.service.admission import AdmittedJob, admit, admit_job
from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import PENDING, Job, JobKind, JobState
from orchestrator.service.pool import DevicePool, Lease, lease_sizes
from orchestrator.service.slurm_jobs import SlurmJobRequest, SlurmUnavailable
from orchestrator.service.slurm_settings import ServiceLauncher
from orchestrator.tracking.mlflow_names import (
    PARAM_MIX_PREFIX,
    TAG_CONTRACT,
    TAG_JOB_ID,
    TAG_SUBMITTER,
    TAG_VARIANT,
)
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.tracker import Tracker

log = logging.getLogger(__name__)

POLL_S = 0.5
CREATE_TIME_SLACK_S = 2.0
"""How much later than its attempt's start a job process's creation time may read: Linux
derives it from the boot time in whole seconds."""
SLURM_TIMEOUT_MARGIN_MIN = 10
"""Minutes a Slurm job's time limit adds to its spec's ``resources.timeout_s`` (start-up)."""


class Scheduler:
    """Runs the jobs of one service root (docs/design/orchestrator_service.md)."""

    def __init__(self, service: ServiceConfig, poll_s: float = POLL_S) -> None:
        self.service = service
        self.poll_s = poll_s
        self.queue = service.queue()
        self.rules = service.rules()
        self.pool = DevicePool(
            discover(service.device), service.capacity, extra_processes=service.extra_processes
        )
        self.plans = ThreadPoolExecutor(service.plan_workers, thread_name_prefix="plan")
        self.active: dict[str, Future[Any]] = {}
        self.stopping = threading.Event()
        self._slurm_polled_at = -float("inf")
        self._slurm_next_pass_at = -float("inf")
        self._slurm_settled_since: dict[str, float] = {}
        """Job id -> when its Slurm job was first seen ended (believed on a later poll)."""
        self._scancelled: set[str] = set()

    # -- the loop -------------------------------------------------------------------------

    def serve(self, *, until_idle: bool = False) -> None:
        """Recover, then start and watch jobs until :meth:`stop` (or, with ``until_idle``,
        until no job is pending or active)."""
        if self.service.launcher == ServiceLauncher.SLURM:
            slurm_jobs.check_commands()
        self.service.save()
        self.recover()
        while not self.stopping.is_set():
            self.tick()
            # the queue is read for idleness only when asked to stop at it
            if until_idle and not self.active and not self.queue.pending() and not self._in_slurm():
                break
            time.sleep(self.poll_s)
        self.plans.shutdown(wait=True)

    def stop(self) -> None:
        """Stop starting jobs; running job processes go on (the next scheduler adopts them)."""
        self.stopping.set()

    def tick(self) -> None:
        """One pass: forget finished work, read the Slurm jobs' states, hand out pending jobs."""
        for job_id, future in list(self.active.items()):
            if future.done():
                del self.active[job_id]
                if future.exception() is not None:
                    self._fail_job(job_id, f"scheduler error: {future.exception()}")
        self._poll_slurm()
        to_slurm = []
        for job in self.queue.pending():
            if job.id in self.active or self.stopping.is_set():
                continue
            if self.service.launcher == ServiceLauncher.SLURM and job.kind != JobKind.PLAN:
                to_slurm.append(job)
            else:
                self.active[job.id] = self._start_job(job)
        if to_slurm:
            self._hand_to_slurm(to_slurm)

    def _start_job(self, job: Job) -> Future[Any]:
        if job.kind == JobKind.PLAN:
            return self.plans.submit(self._run_plan_job, job)
        try:
            admitted = admit_job(job.kind, job.spec, self.rules)
        except ExperimentError as e:
            self._fail_job(job.id, str(e))
            done: Future[Any] = Future()
            done.set_result(None)
            return done
        return self.pool.submit(
            _list_lease_sizes(admitted), lambda lease: self._run_training_attempt(job, lease)
        )

    # -- plan jobs ------------------------------------------------------------------------

    def _run_plan_job(self, job: Job) -> None:
        try:
            self.queue.transition(job.id, JobState.RUNNING, expect=PENDING)
        except TransitionError:  # cancelled meanwhile
            return
        try:
            config = admit(job.spec, self.rules)
            plan = api.plan_summary(api.plan(config, run_name=job.id))
            run_id = _log_plan(self.rules.tracking_uri, config, plan, job)
        except Exception as e:  # a plan job fails with the reason, the scheduler goes on
            self._fail_job(job.id, str(e))
            return
        result = {
            k: plan[k]
            for k in (
                "contract_fingerprint",
                "variant",
                "mixture",
                "dp_size",
                "steps",
                "tokens",
                "lanes",
            )
        }
        self.queue.transition(job.id, JobState.SUCCEEDED, result=result, mlflow_run_id=run_id)

    # -- training jobs --------------------------------------------------------------------

    def _run_training_attempt(self, job: Job, lease: Lease) -> None:
        """Start an attempt of ``job`` on ``lease`` (its own process) and watch it to the end."""
        job_dir = self.service.job_dir(job.id)
        job_dir.mkdir(parents=True, exist_ok=True)
        number = job.attempts + 1
        with (
            (job_dir / f"attempt-{number}.json").open("wb") as out,
            (job_dir / f"attempt-{number}.log").open("wb") as err,
        ):
            process = _spawn_attempt(
                attempt.command(self.service, job.id, lease), self.service.path, out, err
            )
        if not self._mark_running(job, dp=lease.dp, devices=lease.size, pid=process.pid):
            _send_sigterm(process.pid)
            process.wait()
            return
        self._watch_process(job.id, process.pid, number, process.poll)

    def _mark_running(self, job: Job, *, dp: int, **fields: Any) -> bool:
        """Record that ``job``'s next attempt started on ``dp`` ranks (its run folder and
        ``fields`` with it); False if it was cancelled between the pick and the start."""
        folder = self.service.runs_root / job.id if job.kind == JobKind.RUN else None
        try:
            self.queue.transition(
                job.id, JobState.RUNNING, expect=PENDING, dp=dp, run_folder=folder, **fields
            )
        except TransitionError:
            return False
        return True

    def _watch_process(self, job_id: str, pid: int, attempt: int, exited: Any) -> None:
        """Wait for job ``job_id``'s process; pass on a cancel; record the outcome."""
        signalled = False
        while exited() is None:
            if not signalled and self.queue.get(job_id).cancel_requested:
                _send_sigterm(pid)
                signalled = True
            if self.stopping.is_set():
                return  # left running; the next scheduler adopts it
            time.sleep(self.poll_s)
        self._record_outcome(job_id, attempt)

    def _record_outcome(self, job_id: str, attempt: int) -> None:
        """Set the state of a job whose process ended, from its result file."""
        job = self.queue.get(job_id)
        result = _read_result(self.service.job_dir(job_id) / f"attempt-{attempt}.json")
        status = _derive_status(result)
        fields = {"result": result, "mlflow_run_id": (result or {}).get("mlflow_run_id")}
        if status == RunStatus.SUCCEEDED:
            self.queue.transition(job_id, JobState.SUCCEEDED, expect={JobState.RUNNING}, **fields)
        elif status == RunStatus.INTERRUPTED or result is None:
            if job.cancel_requested:
                self.queue.transition(
                    job_id, JobState.CANCELLED, expect={JobState.RUNNING}, **fields
                )
            elif result is None and job.attempts >= self.service.max_attempts:
                self._fail_job(job_id, f"its process died {job.attempts} times without a result")
            else:
                detail = "stopped" if result else "process died"
                self.queue.transition(
                    job_id, JobState.PREEMPTED, expect={JobState.RUNNING}, detail=detail, **fields
                )
        else:
            error = (result or {}).get("error") or (result or {}).get("messages")
            self.queue.transition(
                job_id,
                JobState.FAILED,
                expect={JobState.RUNNING},
                error=json.dumps(error)[:4000],
                **fields,
            )

    def _fail_job(self, job_id: str, error: str) -> None:
        job = self.queue.get(job_id)
        if job.state == JobState.RUNNING:
            self.queue.transition(job_id, JobState.FAILED, error=error[:4000])
        elif job.state in PENDING:  # never started: via running, as recorded
            self.queue.transition(job_id, JobState.RUNNING, detail="refused at start")
            self.queue.transition(job_id, JobState.FAILED, error=error[:4000])

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> None:
        """Adopt running jobs whose process lives; record or preempt the others."""
        for job in self.queue.list(states=[JobState.RUNNING]):
            if job.kind == JobKind.PLAN:  # in-process work: it died with the old scheduler
                self.queue.transition(job.id, JobState.PREEMPTED, detail="scheduler restarted")
                continue
            if job.slurm_job_id is not None:  # adopted: every tick polls its state
                log.info("adopting %s (Slurm job %s)", job.id, job.slurm_job_id)
                continue
            started = [e.at for e in self.queue.events(job.id) if e.state == JobState.RUNNING][-1]
            process = None if job.pid is None else job_process(job.pid, job.id, started)
            if process is None:
                self._record_outcome(job.id, job.attempts)
                continue
            size = job.dp_sizes[-1] if job.dp_sizes else 1
            log.info("adopting %s (pid %d, dp %d)", job.id, process.pid, size)
            self.active[job.id] = self.pool.submit(
                [size],
                lambda lease, j=job, p=process: self._watch_process(
                    j.id, p.pid, j.attempts, lambda: 0 if _has_ended(p) else None
                ),
            )

    # -- training jobs on Slurm ---------------------------------------------------------------

    def _in_slurm(self) -> list[Job]:
        """Running jobs whose attempt is a Slurm job."""
        return [j for j in self.queue.list(states=[JobState.RUNNING]) if j.slurm_job_id]

    def _hand_to_slurm(self, jobs: list[Job]) -> None:
        """Submit an attempt of each of ``jobs`` (pending) to Slurm, or adopt the Slurm job
        a stopped scheduler submitted for it before it could record it. Jobs over the
        service's device cap wait; they are looked at again on the next poll, not tick."""
        if time.monotonic() < self._slurm_next_pass_at:
            return
        held = sum(j.dp_sizes[-1] for j in self._in_slurm() if j.dp_sizes)
        starting: list[SlurmJobRequest] = []
        for job in jobs:
            try:
                request = self._slurm_request(job, admit_job(job.kind, job.spec, self.rules))
            except ExperimentError as e:
                self._fail_job(job.id, str(e))
                continue
            if self.service.capacity and held + request.dp > self.service.capacity:
                self._slurm_next_pass_at = time.monotonic() + self.service.slurm.poll_s
                continue
            held += request.dp
            starting.append(request)
        try:
            submitted = slurm_jobs.find_active([r.job.id for r in starting]) if starting else {}
            for request in starting:
                slurm_id = submitted.get(request.job.id) or slurm_jobs.submit(self.service, request)
                self._record_slurm_start(request, slurm_id)
        except SlurmUnavailable as e:
            log.warning("%s; trying again in %.0f s", e, 6 * self.service.slurm.poll_s)
            self._slurm_next_pass_at = time.monotonic() + 6 * self.service.slurm.poll_s

    def _slurm_request(self, job: Job, admitted: AdmittedJob) -> SlurmJobRequest:
        """The Slurm job of ``job``'s next attempt: its dp (the spec's, else the largest
        acceptable size up to ``slurm.job_devices``), device kind and time limit."""
        sizes = _list_lease_sizes(admitted)
        fitting = [k for k in sizes if k <= self.service.slurm.job_devices]
        dp = fitting[-1] if fitting and admitted.check is None else sizes[0]
        wanted = admitted.config.resources.device
        cuda = wanted == DeviceRequest.CUDA or (
            wanted == DeviceRequest.AUTO and self.service.device == DeviceRequest.CUDA
        )
        timeout_s = admitted.config.resources.timeout_s
        timeout_min = (
            self.service.slurm.timeout_min
            if timeout_s is None
            else -(-timeout_s // 60) + SLURM_TIMEOUT_MARGIN_MIN
        )
        kind = DeviceKind.CUDA if cuda else DeviceKind.CPU
        return SlurmJobRequest(job, dp, kind, timeout_min)

    def _record_slurm_start(self, request: SlurmJobRequest, slurm_id: str) -> None:
        started = self._mark_running(
            request.job,
            dp=request.dp,
            slurm_job_id=slurm_id,
            slurm_state="PENDING",
            detail=f"Slurm job {slurm_id}",
        )
        if not started:
            slurm_jobs.cancel(slurm_id)

    def _poll_slurm(self) -> None:
        """Read every Slurm job's state (one ``squeue``, at most every ``slurm.poll_s``);
        pass on cancels; record the jobs Slurm is done with."""
        now = time.monotonic()
        if now - self._slurm_polled_at < self.service.slurm.poll_s:
            return
        self._slurm_polled_at = now
        jobs = self._in_slurm()
        try:
            found = slurm_jobs.states([j.slurm_job_id for j in jobs])
            for job in jobs:
                self._follow_slurm_job(job, found.get(job.slurm_job_id), now)
        except SlurmUnavailable as e:
            log.warning("%s; the next poll tries again", e)

    def _follow_slurm_job(self, job: Job, state: str | None, now: float) -> None:
        settled = is_settled(state)
        if job.cancel_requested and not settled and job.id not in self._scancelled:
            slurm_jobs.cancel(job.slurm_job_id)
            self._scancelled.add(job.id)
        if state is not None and state != job.slurm_state:
            self.queue.update(job.id, slurm_state=state)
        if not settled:
            self._slurm_settled_since.pop(job.id, None)
            return
        # a requeue passes through an ended-looking state: believe it on a later poll
        if now - self._slurm_settled_since.setdefault(job.id, now) < SETTLED_RECHECK_S:
            return
        del self._slurm_settled_since[job.id]
        if (state or "").startswith("CANCELLED") and not job.cancel_requested:
            log.info("%s: Slurm job %s was cancelled in Slurm", job.id, job.slurm_job_id)
            self.queue.request_cancel(job.id)
        self._record_outcome(job.id, job.attempts)


def _list_lease_sizes(admitted: AdmittedJob) -> list[int]:
    """The lease sizes a job accepts. A run: its experiment's (:func:`lease_sizes`). A verify
    job: enough for its larger dp, or for its two first runs side by side."""
    check = admitted.check
    if check is None:
        return lease_sizes(admitted.config)
    least = max(check.first_dp, check.second_dp)
    return sorted({least, max(least, 2 * check.first_dp)})


def _spawn_attempt(argv: list[str], cwd: Path, out: Any, err: Any) -> Any:
    return subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, start_new_session=True)


def _send_sigterm(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def job_process(pid: int, job_id: str, started_at: float) -> psutil.Process | None:
    """The live process ``pid`` if it is the attempt of job ``job_id`` that went to running
    at ``started_at`` (the pid exists, is no zombie, its command line names the job, it was
    created by then: docs/design/orchestrator_service.md); None otherwise."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE or job_id not in process.cmdline():
            return None
        if process.create_time() > started_at + CREATE_TIME_SLACK_S:
            return None  # the pid was reused after the attempt started
    except psutil.Error:  # gone, or not ours to inspect
        return None
    return process


def _has_ended(process: psutil.Process) -> bool:
    """Whether an adopted job process has ended (``is_running`` also sees a reused pid)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _derive_status(result: dict[str, Any] | None) -> str | None:
    """succeeded, failed or interrupted from a job process's result; None without one.
    An attempt stopped before it trained prints an error of kind ``interrupted``."""
    if result is None:
        return None
    error = result.get("error")
    interrupted = isinstance(error, dict) and error.get("kind") == ErrorKind.INTERRUPTED
    if "status" not in result and interrupted:
        return RunStatus.INTERRUPTED
    return result.get("status")


def _read_result(path: Path) -> dict[str, Any] | None:
    """The JSON object a job process printed, or None (killed before it printed)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text:
        return None
    try:
        value = json.loads(text.splitlines()[-1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _log_plan(uri: str, config: ExperimentConfig, plan: dict[str, Any], job: Job) -> str:
    """An MLflow run for a dry-run job: its fingerprints and mixture, no metrics."""
    tracker = Tracker(uri, config.tracking.experiment)
    tags = {
        TAG_CONTRACT: plan["contract_fingerprint"],
        TAG_VARIANT: plan["variant"],
        TAG_JOB_ID: job.id,
        TAG_SUBMITTER: job.submitter,
    }
    params = {f"{PARAM_MIX_PREFIX}{k}": v for k, v in plan["mixture"].items()}
    run_id = tracker.new_run(job.id, kind=RunKind.PLAN, tags=tags, params=params)
    tracker.end_run(run_id, MlflowStatus.FINISHED)
    return run_id
