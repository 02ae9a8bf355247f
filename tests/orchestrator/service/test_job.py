"""orchestrator.service.job: states and kinds taken by name at the boundary, refused with the
valid names, and a job's record as plain JSON data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import QueueError
from orchestrator.service.job import FINAL, TRANSITIONS, JobKind, JobState, to_kind, to_state
from orchestrator.service.queue import JobQueue


def test_names_convert_and_unknown_ones_are_refused_with_the_valid_names() -> None:
    assert to_state("preempted") is JobState.PREEMPTED
    assert to_kind(JobKind.VERIFY) is JobKind.VERIFY
    with pytest.raises(QueueError, match="unknown state 'done'; states are queued, running, "):
        to_state("done")
    with pytest.raises(QueueError, match="unknown job kind 'train'; use one of run, plan, verify"):
        to_kind("train")


def test_final_states_have_no_way_out_and_the_others_have_one() -> None:
    assert all(state not in TRANSITIONS for state in FINAL)
    assert set(TRANSITIONS) == set(JobState) - FINAL


def test_a_job_and_its_events_are_plain_json_data(tmp_path: Path) -> None:
    queue = JobQueue(tmp_path / "jobs.db")
    job, _ = queue.submit({"n": 1}, key="k", submitter="alice", kind="plan")
    data = queue.get(job.id).to_dict()
    assert (type(data["kind"]), type(data["state"])) == (str, str)
    assert json.loads(json.dumps(data))["state"] == "queued"
    (event,) = queue.events(job.id)
    assert event.to_dict() == {"job_id": job.id, "at": event.at, "state": "queued", "detail": ""}
    assert type(event.to_dict()["state"]) is str
