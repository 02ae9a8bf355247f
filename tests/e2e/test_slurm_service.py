"""The job service on the real two-node Slurm cluster (:class:`tests.support.slurm.LocalSlurm`):
``zephon serve --launcher slurm`` as its own process, real TorchTitan training (``zephon_mini``,
CPU), Slurm deciding where and when each attempt runs.

Twenty submissions from seven submitters: three experiments (data seeds 0-2) submitted by
six of them, a seventh submitter repeating one, and a fourth experiment that dave
cancels. Slurm requeues
one experiment mid-run (``scontrol requeue`` after its step-2 checkpoint, as preemption
with requeue does), and the service is killed (SIGKILL) mid-sweep and started again.
Nothing may be lost or trained twice, and every result must match a local run of the
same spec. The submitters are OS users in production; the test, one OS user, gives the
queue each submitter's name directly, after the same admission the client applies.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run.identity_index import INDEX_DIR
from orchestrator.service import client as service
from orchestrator.service.admission import admit_job
from orchestrator.service.config import ServiceConfig
from orchestrator.service.job import FINAL, JobKind, JobState
from orchestrator.service.scheduler import Scheduler
from tests.support.experiments import data_only_experiment
from tests.support.slurm import LocalSlurm
from tests.support.titan_run import corpus_tokenizer

pytestmark = pytest.mark.timeout(1500)

STEPS = 6
ZEPHON = [sys.executable, "-m", "orchestrator.cli"]
SUBMITTERS = ("alice", "bob", "carol", "dave", "erin", "frank")
SUBMISSIONS = (
    *((who, seed) for who in SUBMITTERS for seed in range(3)),
    ("grace", 0),
    ("dave", 3),  # cancelled
)
REQUEUED_SEED = 0
CANCELLED_SEED = 3


@pytest.fixture(scope="module")
def data_roots(domains: dict[str, list[Path]]) -> list[str]:
    """The corpus's folder and its tokenizer's, as a service's data roots."""
    shards = Path(min(p for paths in domains.values() for p in paths))
    return [str(shards.parents[1]), corpus_tokenizer(domains)]


def new_service(root: Path, data_roots: list[str], **settings: Any) -> ServiceConfig:
    """A service root at ``root`` admitting the corpus, saved."""
    svc = ServiceConfig(root=str(root), data_roots=tuple(data_roots), **settings)
    svc.save()
    return svc


def experiment(domains: dict[str, list[Path]], seed: int) -> dict[str, Any]:
    spec = data_only_experiment(domains, STEPS, dp=1)
    spec["data"]["seed"] = seed
    return spec


def submit_as(svc: ServiceConfig, submitter: str, spec: dict[str, Any], key: str) -> str:
    """What ``service.submit`` does for the OS user ``submitter``: admit, then queue."""
    admit_job(JobKind.RUN, spec, svc.rules())
    job, created = svc.queue().submit(spec, key=key, submitter=submitter)
    assert created
    return job.id


def start_service(svc: ServiceConfig, data_roots: list[str], log: Path) -> Any:
    roots = [arg for root in data_roots for arg in ("--data-root", root)]
    argv = [*ZEPHON, "serve", "--root", str(svc.path), "--launcher", "slurm", *roots]
    argv += ["--slurm-poll-s", "1", "--until-idle"]
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def wait_for(condition: Any, what: str, svc: ServiceConfig, *, limit_s: float = 600) -> None:
    """Wait until ``condition()``; past ``limit_s``, fail with every job's state and the
    service's log."""
    end = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > end:
            jobs = [
                (j.submitter, j.state, j.slurm_job_id, j.slurm_state, j.error)
                for j in svc.queue().list()
            ]
            log = (svc.path.parent / "serve.log").read_text()[-3000:]
            raise AssertionError(f"waited {limit_s} s for {what}; jobs: {jobs}\n{log}")
        time.sleep(0.2)


def test_twenty_jobs_on_slurm_survive_requeue_cancel_and_a_killed_service(
    cluster: LocalSlurm,
    domains: dict[str, list[Path]],
    data_roots: list[str],
    tmp_path: Path,
) -> None:
    svc = new_service(tmp_path / "svc", data_roots)
    ids = {
        (who, seed): submit_as(svc, who, experiment(domains, seed), key=f"{who}-{seed}")
        for who, seed in SUBMISSIONS
    }
    assert len(ids) == len(SUBMISSIONS) == 20
    queue = svc.queue()
    log = tmp_path / "serve.log"
    serving = start_service(svc, data_roots, log)
    try:
        # dave's last job is cancelled once the service has handed it to Slurm
        cancelled_id = ids["dave", CANCELLED_SEED]
        wait_for(lambda: queue.get(cancelled_id).slurm_job_id, "dave's job in Slurm", svc)
        queue.request_cancel(cancelled_id)
        # preemption with requeue: Slurm kills the attempt training seed 0 (whichever of its
        # submitters took the experiment's lock first) after its step-2 checkpoint
        seed_zero = [RunFolder(svc.runs_root / i) for (_, s), i in ids.items() if s == 0]
        wait_for(
            lambda: any(3 in f.steps() for f in seed_zero if f.exists()),
            "the step-2 checkpoint of the run training seed 0",
            svc,
        )
        requeued = next(f for f in seed_zero if f.exists() and 3 in f.steps())
        requeued_slurm_id = queue.get(requeued.path.name).slurm_job_id
        cluster.run("scontrol", "requeue", requeued_slurm_id)
        # the service dies mid-sweep and a new one adopts its Slurm jobs
        wait_for(
            lambda: sum(queue.get(i).state in FINAL for i in ids.values()) >= 4,
            "four jobs final",
            svc,
        )
        running_then = [i for i in ids.values() if queue.get(i).state == JobState.RUNNING]
        serving.send_signal(signal.SIGKILL)
        serving.wait()
        assert running_then, "the service was killed after the sweep ended: nothing to adopt"
        time.sleep(2)
        serving = start_service(svc, data_roots, log)
        assert serving.wait(timeout=900) == 0, log.read_text()[-4000:]
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()

    jobs = {key: queue.get(job_id) for key, job_id in ids.items()}
    ended = [queue.events(job.id)[-1].at for job in jobs.values()]
    print(f"\nthe sweep took {max(ended) - min(j.created_at for j in jobs.values()):.0f} s")
    states = Counter(job.state for job in jobs.values())
    print(f"20 submissions: {dict(states)}; adopted after the kill: {len(running_then)}")
    assert states == {JobState.SUCCEEDED: 19, JobState.CANCELLED: 1}, {
        key: (job.state, job.error) for key, job in jobs.items()
    }
    cancelled = jobs["dave", CANCELLED_SEED]
    assert cancelled.state == JobState.CANCELLED
    # nothing trained twice: one run folder per experiment, every other job answered from it
    trained = sorted(p.name for p in svc.runs_root.iterdir() if p.is_dir() and p.name != INDEX_DIR)
    owners = {  # the run folder that trained each experiment
        seed: job.result["answered_from"] or job.id
        for (_, seed), job in jobs.items()
        if seed != CANCELLED_SEED
    }
    assert sorted(set(owners.values())) == sorted(n for n in trained if n != cancelled.id)
    for (who, seed), job in jobs.items():
        # one attempt, one Slurm job each: the requeue and the restart started nothing twice
        assert job.attempts == 1, (who, seed, queue.events(job.id))
        if seed == CANCELLED_SEED:
            continue
        assert job.slurm_state == "COMPLETED" and job.slurm_job_id, (who, seed, job)
        assert job.result["run_name"] == owners[seed], (who, seed, job.result)
    print(f"trained: {len(trained)} run folders for {len(owners)} experiments")
    for folder in trained:
        steps = RunFolder(svc.runs_root / folder).steps()
        assert folder == cancelled.id or sorted(steps) == list(range(1, STEPS + 1))
    # the requeued run: the same Slurm job ran twice, and resumed from its checkpoint
    assert owners[REQUEUED_SEED] == requeued.path.name
    restarts = cluster.run("scontrol", "show", "job", "--oneliner", requeued_slurm_id)
    assert "Restarts=1" in restarts, restarts
    segments = RunFolder(svc.runs_root / owners[REQUEUED_SEED]).state().segments
    assert [s.dp_size for s in segments] == [1, 1], segments

    # every result matches a local run of the same spec (the local launcher, its own root)
    local = new_service(tmp_path / "local", data_roots)
    local_ids = {
        seed: submit_as(local, "alice", experiment(domains, seed), key=str(seed))
        for seed in sorted(owners)
    }
    Scheduler(local, poll_s=0.2).serve(until_idle=True)
    for seed, job_id in local_ids.items():
        reference = local.queue().get(job_id)
        assert reference.state == JobState.SUCCEEDED, reference.error
        on_slurm = RunFolder(svc.runs_root / owners[seed])
        assert on_slurm.digests() == RunFolder(reference.run_folder).digests(), seed
        assert (
            jobs["alice", seed].result["data_fingerprint"] == reference.result["data_fingerprint"]
        )
    print(f"local references: {len(local_ids)}, every digest equal")


def test_a_slurm_job_submitted_before_a_crash_is_adopted_not_submitted_again(
    cluster: LocalSlurm,
    domains: dict[str, list[Path]],
    data_roots: list[str],
    tmp_path: Path,
) -> None:
    """The scheduler died between ``sbatch`` and recording the Slurm job id: the next one
    finds the job by its Slurm name and records it, instead of submitting a second one."""
    svc = new_service(tmp_path / "svc", data_roots, launcher="slurm")
    job_id = submit_as(svc, "alice", experiment(domains, 0), key="k")
    # what the dead scheduler left: a Slurm job of that name, not in the queue
    orphan = cluster.run(
        "sbatch",
        "--parsable",
        f"--job-name=zephon-{job_id}",
        "--output=/dev/null",
        "--wrap=sleep 60",
    )
    scheduler = Scheduler(svc)
    scheduler.tick()
    job = svc.queue().get(job_id)
    assert (job.state, job.slurm_job_id) == (JobState.RUNNING, orphan.strip())
    listed = cluster.run("squeue", "--noheader", "--format=%i")
    assert listed.split() == [orphan.strip()]  # no second Slurm job
    service_status = service.status(svc, job_id)["job"]
    assert service_status["slurm_job_id"] == orphan.strip()
    cluster.run("scancel", orphan.strip())


def test_the_services_device_cap_keeps_jobs_in_its_queue(
    cluster: LocalSlurm,
    domains: dict[str, list[Path]],
    data_roots: list[str],
    tmp_path: Path,
) -> None:
    """``capacity`` caps the devices the service has in Slurm at once: the rest stay queued."""
    svc = new_service(tmp_path / "svc", data_roots, launcher="slurm", capacity=1)
    first, second = (submit_as(svc, "alice", experiment(domains, s), key=str(s)) for s in (0, 1))
    Scheduler(svc).tick()
    states = [(svc.queue().get(i).state, svc.queue().get(i).slurm_job_id) for i in (first, second)]
    in_slurm = cluster.run("squeue", "--noheader", "--format=%j").split()
    cluster.run("scancel", "--user=root")
    assert states[0][0] == JobState.RUNNING and states[0][1] is not None
    assert states[1] == (JobState.QUEUED, None)
    assert in_slurm == [f"zephon-{first}"]
