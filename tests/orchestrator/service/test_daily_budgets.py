"""Budgets per submitter and UTC day, on a real SQLite queue with an injected clock: a used-up
budget refuses with what was used, what is left and when it renews; other submitters and
plan jobs are unaffected; a new day renews it; device-hours come from the attempts; the
usage query is indexed; MCP and CLI show the usage."""

from __future__ import annotations

import asyncio
import datetime
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import dispatch
from orchestrator.errors import OverBudget, QueueError
from orchestrator.mcp.server import build_server
from orchestrator.service import client as service
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.daily_budgets import (
    DEVICE_HOURS_SQL,
    RUNS_SQL,
    Budget,
    Budgets,
    day_window,
)
from orchestrator.service.job import JobState
from orchestrator.service.queue import JobQueue

NOON = datetime.datetime(2026, 12, 4, 12, tzinfo=datetime.UTC).timestamp()
HOUR = 3600.0
SPEC = {"train": {"steps": 10}}


class Clock:
    """A settable ``time.time``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOON)


def make_queue(path: Path, clock: Clock, budgets: Budgets) -> JobQueue:
    return JobQueue(path / "queue.db", budgets=budgets, clock=clock)


def submit(queue: JobQueue, key: str, submitter: str, kind: str = "run") -> str:
    return queue.submit({**SPEC, "key": key}, key=key, submitter=submitter, kind=kind)[0].id


def test_a_used_up_run_budget_refuses_with_used_left_and_renewal(
    tmp_path: Path, clock: Clock
) -> None:
    budgets = Budgets(
        default=Budget(runs_per_day=2),
        users={"carol": Budget(), "dave": Budget(runs_per_day=0)},
    )
    queue = make_queue(tmp_path, clock, budgets)
    submit(queue, "a1", "alice")
    submit(queue, "a2", "alice", kind="verify")  # verify jobs train: they count
    for i in range(3):  # dry runs are free
        submit(queue, f"a-plan-{i}", "alice", kind="plan")
    with pytest.raises(OverBudget) as refused:
        submit(queue, "a3", "alice")
    message = str(refused.value)
    assert "submitter 'alice'" in message
    assert "runs today 2 of 2 (0 left)" in message
    assert "renews at 2026-12-05T00:00:00Z" in message
    assert refused.value.exit_code == 5 and refused.value.kind == "over_budget"
    assert queue.find("a3") is None
    # a retry of an admitted key still returns its job; plans are still accepted
    assert queue.submit({**SPEC, "key": "a1"}, key="a1", submitter="alice")[1] is False
    submit(queue, "a-plan-late", "alice", kind="plan")
    # other submitters: their own budget (default), none (carol) or zero (dave)
    submit(queue, "b1", "bob")
    for i in range(5):
        submit(queue, f"c{i}", "carol")
    with pytest.raises(OverBudget, match=r"runs today 0 of 0 \(0 left\)"):
        submit(queue, "d1", "dave")
    usage = {u.submitter: u.to_dict() for u in queue.usage()}
    assert usage["alice"]["runs"] == {"used": 2, "limit": 2, "left": 0}
    assert usage["bob"]["runs"] == {"used": 1, "limit": 2, "left": 1}
    assert usage["carol"]["runs"] == {"used": 5, "limit": None, "left": None}
    assert usage["dave"]["runs"] == {"used": 0, "limit": 0, "left": 0}  # has its own budget
    assert {u["renews_at"] for u in usage.values()} == {"2026-12-05T00:00:00Z"}


def test_a_new_utc_day_renews_the_budget(tmp_path: Path, clock: Clock) -> None:
    queue = make_queue(tmp_path, clock, Budgets(default=Budget(runs_per_day=1)))
    clock.now = NOON + 11.9 * HOUR  # 23:54 UTC
    submit(queue, "late", "alice")
    with pytest.raises(OverBudget):
        submit(queue, "later", "alice")
    clock.now = NOON + 12 * HOUR  # 00:00 UTC: a new day
    submit(queue, "next-day", "alice")
    (usage,) = queue.usage("alice")
    assert usage.runs == 1 and usage.to_dict()["renews_at"] == "2026-12-06T00:00:00Z"
    assert day_window(clock.now) == (NOON + 12 * HOUR, NOON + 36 * HOUR)


def run_attempt(queue: JobQueue, clock: Clock, job_id: str, *, devices: int, hours: float) -> None:
    queue.transition(job_id, JobState.RUNNING, dp=1, devices=devices)
    clock.now += hours * HOUR


def test_device_hours_come_from_the_attempts(tmp_path: Path, clock: Clock) -> None:
    budgets = Budgets(default=Budget(device_hours_per_day=8))
    queue = make_queue(tmp_path, clock, budgets)
    # yesterday 22:00 to today 01:00 on 2 devices: only today's hour counts (2 device-hours)
    clock.now = NOON - 14 * HOUR
    first = submit(queue, "first", "alice")
    run_attempt(queue, clock, first, devices=2, hours=3)
    queue.transition(first, JobState.PREEMPTED)
    # a second attempt on 4 devices for 1 h (4), then one still running on 1 device (1.5)
    run_attempt(queue, clock, first, devices=4, hours=1)
    queue.transition(first, JobState.SUCCEEDED)
    second = submit(queue, "second", "alice")
    run_attempt(queue, clock, second, devices=1, hours=1.5)
    submit(queue, "bobs", "bob")
    run_attempt(queue, clock, queue.find("bobs").id, devices=1, hours=0)
    (usage,) = queue.usage("alice")
    assert usage.device_hours == pytest.approx(2 + 4 + 1.5)
    assert usage.runs == 1  # "first" was admitted yesterday
    assert usage.to_dict()["device_hours"] == {"used": 7.5, "limit": 8, "left": 0.5}
    submit(queue, "third", "alice")  # 0.5 device-hours left: accepted
    clock.now += 0.5 * HOUR  # the running attempt uses them up
    with pytest.raises(OverBudget) as refused:
        submit(queue, "fourth", "alice")
    assert "device-hours today 8.00 of 8 (0.00 left)" in str(refused.value)
    submit(queue, "bobs-second", "bob")  # bob's attempt started just now: unaffected


def test_the_usage_query_is_indexed(tmp_path: Path, clock: Clock) -> None:
    queue = make_queue(tmp_path, clock, Budgets(default=Budget(runs_per_day=100)))
    submit(queue, "a", "alice")
    db = sqlite3.connect(queue.path)
    params = {"start": NOON, "end": NOON + HOUR, "now": NOON, "submitter": "alice"}
    for sql in (RUNS_SQL, DEVICE_HOURS_SQL):
        for only in ("", "AND submitter = :submitter"):
            plan = " ".join(
                row[3]
                for row in db.execute("EXPLAIN QUERY PLAN " + sql.format(submitter=only), params)
            )
            # an index searched by time: only the day's rows are read, not every job
            assert "SCAN" not in plan and ("created_at>" in plan or "ended_at>" in plan), plan


def test_budgets_read_from_their_dict_and_refuse_bad_values() -> None:
    budgets = Budgets.from_dict(
        {"default": {"runs_per_day": 50, "device_hours_per_day": 8}, "users": {"alice": {}}}
    )
    assert budgets.of("bob") == Budget(runs_per_day=50, device_hours_per_day=8)
    assert budgets.of("alice") == Budget()
    assert Budgets.from_dict(budgets.to_dict()) == budgets
    with pytest.raises(QueueError, match="unknown keys \\['runs'\\]"):
        Budgets.from_dict({"default": {"runs": 5}})
    with pytest.raises(QueueError, match="runs_per_day must be an integer >= 0"):
        Budget(runs_per_day=-1)


# -- the service: MCP and CLI -------------------------------------------------------------------


@pytest.fixture
def svc(tmp_path: Path) -> ServiceConfig:
    data = tmp_path / "data"
    (data / "web").mkdir(parents=True)
    (data / "web" / "part-0.jsonl").write_text('{"text": "hello"}\n')
    config = ServiceConfig(
        root=str(tmp_path / "svc"),
        data_roots=(str(data),),
        budgets=Budgets(default=Budget(runs_per_day=1, device_hours_per_day=2.5)),
    )
    config.save()
    return config


def experiment(svc: ServiceConfig) -> dict[str, Any]:
    files = [str(Path(svc.data_roots[0]) / "web" / "part-0.jsonl")]
    return {"data": {"datasets": {"web": files}}, "eval": {"enable": False}}


def zephon(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = dispatch.main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_cli_and_mcp_show_usage_and_refuse_over_budget(
    svc: ServiceConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    root, me = str(svc.path), service.caller()
    spec = json.dumps(experiment(svc))
    code, submitted = zephon("submit", "--root", root, "--spec", spec, "--key", "k1", capsys=capsys)
    assert code == 0
    code, refused = zephon("submit", "--root", root, "--spec", spec, "--key", "k2", capsys=capsys)
    assert code == 5 and refused["error"]["kind"] == "over_budget"
    assert "runs today 1 of 1 (0 left)" in refused["error"]["message"]
    assert "device-hours today 0.00 of 2.5 (2.50 left)" in refused["error"]["message"]
    mine = {
        "submitter": me,
        "runs": {"used": 1, "limit": 1, "left": 0},
        "device_hours": {"used": 0.0, "limit": 2.5, "left": 2.5},
    }
    _, listed = zephon("jobs", "--root", root, capsys=capsys)
    (usage,) = listed["usage"]
    assert usage.items() >= mine.items() and usage["renews_at"].endswith("T00:00:00Z")
    job_id = submitted["job"]["id"]
    _, status = zephon("status", "--root", root, job_id, capsys=capsys)
    assert status["usage"] == listed["usage"]

    def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        content, _ = asyncio.run(build_server(root).call_tool(tool, arguments))
        return json.loads(content[0].text)

    assert call("list_jobs", {})["usage"] == listed["usage"]
    assert call("status", {"job_id": job_id})["usage"] == listed["usage"]


def test_serve_writes_the_budgets_of_its_flags_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budgets_file = tmp_path / "budgets.yaml"
    budgets_file.write_text(
        "default: {runs_per_day: 50, device_hours_per_day: 8}\nusers: {alice: {runs_per_day: 5}}\n"
    )
    root = str(tmp_path / "svc")
    code, _ = zephon(
        "serve",
        "--root",
        root,
        "--device",
        "cpu",
        "--until-idle",
        "--budgets",
        str(budgets_file),
        "--runs-per-day",
        "20",
        capsys=capsys,
    )
    assert code == 0
    budgets = load_service(root).budgets
    assert budgets.default == Budget(runs_per_day=20, device_hours_per_day=8)
    assert budgets.of("alice") == Budget(runs_per_day=5)
