"""The job service for agents: admission, 20 concurrent submitters, a scheduler and a job
killed with SIGKILL mid-run, and a real MCP client session.

Real parts: SQLite (WAL) queue, `zephon serve` as a process, `torchrun` training
(``zephon_mini``, a 6.6 M-parameter llama3, CPU), the embedded MLflow store, the
`mcp` stdio transport.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.errors import ExperimentError, QueueFull
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.service import client as service
from orchestrator.service.scheduler import Scheduler
from tests.support import REPO
from tests.support.agents import retrying_submitter, spec
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1200)

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return {n: [str(p) for p in ps] for n, ps in corpus(tmp_path_factory.getbasetemp()).items()}


@pytest.fixture(scope="module")
def data_root(data: dict[str, list[str]]) -> str:
    return str(Path(next(iter(data.values()))[0]).parents[1])


def make_service(root: Path, data_root: str, **kw: Any) -> service.ServiceConfig:
    svc = service.ServiceConfig(root=str(root), data_roots=(data_root,), **kw)
    svc.save()
    return svc


# -- bad requests ------------------------------------------------------------------------------


def test_bad_requests_are_refused_with_reasons_and_change_nothing(
    tmp_path: Path, data: dict[str, list[str]], data_root: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root, max_queued_per_submitter=2)
    good = spec(data)
    outside = {**good, "data": {**good["data"], "datasets": {"etc": ["/etc/passwd"]}}}
    traversal = {"data": {"datasets": {"x": [f"{data_root}/../../../../etc/passwd"]}}}
    cases = {
        "outside the data roots": outside,
        "outside the data roots ": traversal,
        "absolute path": {"data": {"datasets": {"x": ["relative/*.jsonl"]}}},
        "colour": {**good, "colour": "blue"},
        "train.steps=1000000000 is above the limit": spec(data, steps=10**9),
        "model.module='os' is not allowed": {**good, "model": {"module": "os"}},
        "model.args": {**good, "model": {"args": ["--dump-folder", "/"]}},
        "interpolations": {**good, "name": "${oc.env:HOME}"},
        "runs_root is chosen by the job service": {**good, "runs_root": "/tmp/elsewhere"},
        "a spec is a JSON object": ["not", "an", "object"],
    }
    for expected, bad in cases.items():
        with pytest.raises(ExperimentError, match=expected.strip().replace("(", r"\(")):
            service.submit(svc, bad, key=f"k-{expected}", submitter="agent")
    # Malformed JSON and a missing key through the CLI: exit 2, a message, nothing queued.
    for args in (["--spec", "{not json", "--key", "a"], ["--spec", "{}"]):
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator.cli",
                "submit",
                "--root",
                str(svc.path),
                *args,
                "--json",
            ],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=120,
        )
        assert cli.returncode == 2, cli.stdout + cli.stderr
        if cli.stdout:
            assert json.loads(cli.stdout)["error"]["kind"] == "invalid"
    assert sum(svc.queue().counts().values()) == 0
    # Limits: a third pending job of one submitter is refused, another submitter's is not.
    for i in range(2):
        service.submit(svc, spec(data, seed=i), key=f"ok-{i}", submitter="agent")
    with pytest.raises(QueueFull, match="limit"):
        service.submit(svc, spec(data, seed=9), key="ok-9", submitter="agent")
    service.submit(svc, spec(data, seed=9), key="other-9", submitter="other")
    assert sum(svc.queue().counts().values()) == 3


# -- many submitters -------------------------------------------------------------------------


def test_twenty_submitters_two_hundred_jobs_none_lost_none_twice(
    tmp_path: Path, data: dict[str, list[str]], data_root: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root)
    with multiprocessing.get_context("spawn").Pool(20) as pool:
        results = pool.starmap(retrying_submitter, [(str(svc.path), w, data) for w in range(20)])
    submitted = [r for worker in results for r in worker]
    ids_per_key: dict[str, set[str]] = {}
    for key, job_id, _ in submitted:
        ids_per_key.setdefault(key, set()).add(job_id)
    assert len(ids_per_key) == 200 and all(len(ids) == 1 for ids in ids_per_key.values())
    assert sum(created for _, _, created in submitted) == 200

    Scheduler(svc, poll_s=0.2).serve(until_idle=True)
    jobs = svc.queue().list(limit=1000)
    assert len(jobs) == 200 and {j.key for j in jobs} == set(ids_per_key)
    assert {j.state for j in jobs} == {"succeeded"}, [(j.key, j.error) for j in jobs if j.error]
    client = MlflowClient(tracking_uri=svc.rules().tracking_uri)
    for job in jobs:
        run = client.get_run(job.mlflow_run_id)
        assert run.info.status == "FINISHED"
    trained = [j for j in jobs if j.kind == "run"]
    assert len(trained) == 2 and all(j.result["steps"] == 2 for j in trained)


# -- a scheduler and its job killed mid-run -----------------------------------------------------


def serve(svc: service.ServiceConfig, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "serve",
            "--root",
            str(svc.path),
            "--data-root",
            svc.data_roots[0],
            *extra,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_of_scheduler_and_job_then_restart_finishes_with_the_same_digests(
    tmp_path: Path, data: dict[str, list[str]], data_root: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root)
    body = spec(data, steps=4, checkpoint_interval=2)
    victim = service.submit(svc, body, key="victim", submitter="agent")["job"]["id"]
    scheduler = serve(svc)
    folder = RunFolder(svc.runs_root / victim)
    deadline = time.monotonic() + 600
    while max(folder.steps(), default=0) < 3 and time.monotonic() < deadline:
        assert scheduler.poll() is None, scheduler.communicate()
        time.sleep(0.5)
    assert folder.last_checkpoint_step() == 2
    job = svc.queue().get(victim)
    assert job.state == "running" and job.pid
    scheduler.send_signal(signal.SIGKILL)
    os.kill(job.pid, signal.SIGKILL)
    scheduler.wait()

    # the victim resumes on both cores; then these two run side by side, a core each
    reference = service.submit(
        svc, spec(data, steps=4, dp=1) | {"name": "reference"}, key="reference", submitter="agent"
    )["job"]["id"]
    doomed = service.submit(
        svc, spec(data, steps=500, dp=1) | {"name": "doomed"}, key="doomed", submitter="agent"
    )["job"]["id"]
    restarted = serve(svc, "--until-idle")
    while not RunFolder(svc.runs_root / doomed).steps() and restarted.poll() is None:
        time.sleep(0.5)  # cancelled mid-training
    assert service.cancel(svc, doomed)["job"]["cancel_requested"]
    out, err = restarted.communicate(timeout=900)
    assert restarted.returncode == 0, out + err
    cancelled = svc.queue().get(doomed)
    assert cancelled.state == "cancelled" and cancelled.result["status"] == "interrupted"
    done = svc.queue().get(victim)
    assert done.state == "succeeded" and done.attempts == 2, done
    states = [e.state for e in svc.queue().events(victim)]
    assert states == ["queued", "running", "preempted", "running", "succeeded"]
    digests = RunFolder(svc.runs_root / victim).digests()
    assert len(digests) == 4
    assert digests == RunFolder(svc.runs_root / reference).digests()  # 2 dp sizes vs dp 1


# -- MCP ---------------------------------------------------------------------------------------


async def _mcp_session(root: str, body: dict) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "orchestrator.cli", "mcp", "--root", root], env=ENV
    )
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        out["init"] = await session.initialize()
        out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        calls = {}
        for key in ("a", "b"):
            result = await session.call_tool(
                "submit",
                {"spec": body | {"name": key}, "key": key, "submitter": "llm", "kind": "plan"},
            )
            calls[key] = json.loads(result.content[0].text)
        out["submitted"] = calls
        out["bad"] = await session.call_tool(
            "submit",
            {
                "spec": {"data": {"datasets": {"x": ["/etc/passwd"]}}},
                "key": "bad",
                "submitter": "llm",
            },
        )
        # the scheduler runs the two dry runs in this process meanwhile
        await asyncio.to_thread(
            Scheduler(service.load_service(root), poll_s=0.2).serve, until_idle=True
        )
        status = await session.call_tool("status", {"job_id": calls["a"]["job"]["id"]})
        out["status"] = json.loads(status.content[0].text)
        run_ids = [out["status"]["job"]["mlflow_run_id"]]
        b = await session.call_tool("status", {"job_id": calls["b"]["job"]["id"]})
        run_ids.append(json.loads(b.content[0].text)["job"]["mlflow_run_id"])
        compared = await session.call_tool("compare", {"run_ids": run_ids})
        out["compare"] = json.loads(compared.content[0].text)
    return out


def test_mcp_client_session_submits_reads_status_and_compares(
    tmp_path: Path, data: dict[str, list[str]], data_root: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root)
    out = asyncio.run(_mcp_session(str(svc.path), spec(data)))
    assert out["init"].serverInfo.name == "zephon"
    expected = {"submit", "status", "wait", "cancel", "list_jobs", "compare", "verify_elastic"}
    assert expected <= set(out["tools"])
    schema = out["tools"]["submit"].inputSchema
    assert {"spec", "key", "submitter"} <= set(schema["required"])
    assert all(c["created"] for c in out["submitted"].values())
    assert out["bad"].isError and "outside the data roots" in out["bad"].content[0].text
    assert out["status"]["job"]["state"] == "succeeded"
    assert [e["state"] for e in out["status"]["events"]] == ["queued", "running", "succeeded"]
    verdict = out["compare"]
    assert not verdict["accepted"]  # dry runs trained nothing: the guard says so
    assert "no_data" in {r["code"] for r in verdict["refusals"]}
