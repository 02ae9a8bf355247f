"""The job service for agents: admission and identity, 20 concurrent agent processes, a
scheduler and a job killed with SIGKILL mid-run that resumes on a larger lease, and a real
MCP client session whose elasticity check is a queued job.

Real parts: SQLite (WAL) queue, `zephon serve` as a process, `torchrun` training
(``zephon_mini``, a 6.6 M-parameter llama3, CPU), the embedded MLflow store, the
`mcp` stdio transport.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.errors import ExperimentError, QueueError, QueueFull
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.service import client as service
from orchestrator.service.admission import verify_request
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.scheduler import Scheduler
from tests.support import REPO
from tests.support.agents import retrying_submitter, spec
from tests.support.processes import forked_process_context
from tests.support.titan_run import corpus, corpus_tokenizer

pytestmark = pytest.mark.timeout(1200)

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return {n: [str(p) for p in ps] for n, ps in corpus(tmp_path_factory.getbasetemp()).items()}


@pytest.fixture(scope="module")
def data_root(data: dict[str, list[str]]) -> str:
    return str(Path(next(iter(data.values()))[0]).parents[1])


@pytest.fixture(scope="module")
def tokenizer(data: dict[str, list[str]]) -> str:
    """The corpus's small tokenizer (a folder, itself a data root of the services here)."""
    return corpus_tokenizer({n: [Path(p) for p in ps] for n, ps in data.items()})


def make_service(root: Path, data_root: str, tokenizer: str, **kw: Any) -> ServiceConfig:
    svc = ServiceConfig(root=str(root), data_roots=(data_root, tokenizer), **kw)
    svc.save()
    return svc


# -- bad requests ------------------------------------------------------------------------------


def test_bad_requests_are_refused_with_reasons_and_change_nothing(
    tmp_path: Path, data: dict[str, list[str]], data_root: str, tokenizer: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root, tokenizer, max_queued_per_submitter=2)
    good = spec(data, tokenizer=tokenizer)
    outside = {**good, "data": {**good["data"], "datasets": {"etc": ["/etc/passwd"]}}}
    traversal = {"data": {"datasets": {"x": [f"{data_root}/../../../../etc/passwd"]}}}
    cases = {
        "outside the data roots": outside,
        "outside the data roots ": traversal,
        "absolute path": {"data": {"datasets": {"x": ["relative/*.jsonl"]}}},
        "data.tokenizer: '/etc' is outside the data roots": {
            **good,
            "data": {**good["data"], "tokenizer": "/etc;eos=x"},
        },
        "data.tokenizer: 'tokenizer.json': give an absolute path": {
            **good,
            "data": {**good["data"], "tokenizer": "tokenizer.json"},
        },
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
            service.submit(svc, bad, key=f"k-{expected}")
    checks = {
        "second_dp=3: dp=3 does not divide data.lanes=4": verify_request(good, 1, 3),
        "split_step must be in": verify_request(good, 1, 2, split_step=2),
        "a verify job's spec is a JSON object with the keys": {"experiment": good, "dp": 1},
        "first_dp must be an integer": verify_request(good, True, 1),
        "outside the data roots": verify_request(outside, 1, 2),
    }
    for expected, bad in checks.items():
        with pytest.raises(ExperimentError, match=expected):
            service.submit(svc, bad, key=f"v-{expected}", kind="verify")
    # Malformed JSON, a missing key, another submitter named through the CLI: exit 2, a
    # message, nothing queued.
    for args in (
        ["--spec", "{not json", "--key", "a"],
        ["--spec", "{}"],
        ["--spec", json.dumps(good), "--key", "b", "--submitter", "someone-else"],
    ):
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
    # Identity and limits: jobs are the calling OS user's; a third pending one is refused,
    # whatever its kind; another user's job (written to the queue as that user) is not
    # counted, and cannot be cancelled by this one.
    for i in range(2):
        job = service.submit(svc, spec(data, seed=i), key=f"ok-{i}")["job"]
        assert job["submitter"] == service.caller() != "someone-else"
    for kind, body in (("run", spec(data, seed=9)), ("verify", verify_request(good, 2, 1))):
        with pytest.raises(QueueFull, match="limit"):
            service.submit(svc, body, key=f"full-{kind}", kind=kind)
    theirs, _ = svc.queue().submit(spec(data, seed=9), key="other-9", submitter="someone-else")
    with pytest.raises(QueueError, match="only they can cancel it"):
        service.cancel(svc, theirs.id)
    assert svc.queue().get(theirs.id).state == "queued"
    assert sum(svc.queue().counts().values()) == 3


# -- many submitters -------------------------------------------------------------------------


def test_twenty_agents_two_hundred_jobs_none_lost_none_twice(
    tmp_path: Path, data: dict[str, list[str]], data_root: str, tokenizer: str
) -> None:
    # 20 agent processes of one OS user: one submitter, allowed 200 pending jobs here
    svc = make_service(tmp_path / "svc", data_root, tokenizer, max_queued_per_submitter=200)
    with forked_process_context("tests.support.agents").Pool(20) as pool:
        results = pool.starmap(
            retrying_submitter, [(str(svc.path), w, data, tokenizer) for w in range(20)]
        )
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


def serve(svc: ServiceConfig, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "serve",
            "--root",
            str(svc.path),
            *(f"--data-root={root}" for root in svc.data_roots),
            *extra,
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkill_of_scheduler_and_job_then_restart_on_a_larger_lease_same_digests(
    tmp_path: Path, data: dict[str, list[str]], data_root: str, tokenizer: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root, tokenizer)
    # 6 steps, a checkpoint every 2: killed after step 3, whichever of the checkpoints at 2
    # and 4 it reached (a step of this model takes ~0.5 s, about what a poll of the queue
    # can take on a loaded machine), it has steps left to resume
    body = spec(data, steps=6, checkpoint_interval=2, tokenizer=tokenizer)
    victim = service.submit(svc, body, key="victim")["job"]["id"]
    scheduler = serve(svc, "--capacity", "1")  # the first attempt gets a 1-core lease
    folder = RunFolder(svc.runs_root / victim)
    deadline = time.monotonic() + 600
    while max(folder.steps(), default=0) < 3 and time.monotonic() < deadline:
        assert scheduler.poll() is None, scheduler.communicate()
        attempt = svc.queue().get(victim)
        assert attempt.state in ("queued", "running"), (attempt.state, attempt.error)
        time.sleep(0.05)
    assert folder.last_checkpoint_step() in (2, 4)
    job = svc.queue().get(victim)
    assert job.state == "running" and job.pid
    scheduler.send_signal(signal.SIGKILL)
    os.kill(job.pid, signal.SIGKILL)
    scheduler.wait()

    # the victim resumes on a 2-core lease, at dp 2; then these two run side by side, a core each
    # another eval interval (evaluation is off): an identity of its own, so it trains
    # instead of being answered from the victim (orchestrator.run.identity_index)
    uninterrupted = spec(data, steps=6, dp=1, tokenizer=tokenizer)
    uninterrupted |= {"name": "reference", "eval": {"enable": False, "interval": 3}}
    reference = service.submit(svc, uninterrupted, key="reference")["job"]["id"]
    doomed = service.submit(
        svc, spec(data, steps=500, dp=1, tokenizer=tokenizer) | {"name": "doomed"}, key="doomed"
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
    assert done.dp_sizes == [1, 2] and done.result["dp_sizes"] == [1, 2]  # each on its lease
    states = [e.state for e in svc.queue().events(victim)]
    assert states == ["queued", "running", "preempted", "running", "succeeded"]
    digests = RunFolder(svc.runs_root / victim).digests()
    assert len(digests) == 6
    assert digests == RunFolder(svc.runs_root / reference).digests()  # dp 1 then 2 vs dp 1


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
            # "submitter" is no tool argument: a request naming someone is ignored
            result = await session.call_tool(
                "submit",
                {"spec": body | {"name": key}, "key": key, "submitter": "llm", "kind": "plan"},
            )
            calls[key] = json.loads(result.content[0].text)
        out["submitted"] = calls
        out["bad"] = await session.call_tool(
            "submit", {"spec": {"data": {"datasets": {"x": ["/etc/passwd"]}}}, "key": "bad"}
        )
        check = {"spec": body | {"name": "elastic"}, "dp": 1, "resume_dp": 2, "key": "check"}
        verify = await session.call_tool("verify_elastic", check)
        out["verify_queued"] = json.loads(verify.content[0].text)
        # the scheduler runs the two dry runs and the check meanwhile (the MCP server trains
        # nothing itself)
        await asyncio.to_thread(Scheduler(load_service(root), poll_s=0.2).serve, until_idle=True)
        waited = await session.call_tool("verify_elastic", check | {"wait_s": 60})
        out["verify_done"] = json.loads(waited.content[0].text)
        status = await session.call_tool("status", {"job_id": calls["a"]["job"]["id"]})
        out["status"] = json.loads(status.content[0].text)
        run_ids = [out["status"]["job"]["mlflow_run_id"]]
        b = await session.call_tool("status", {"job_id": calls["b"]["job"]["id"]})
        run_ids.append(json.loads(b.content[0].text)["job"]["mlflow_run_id"])
        compared = await session.call_tool("compare", {"run_ids": run_ids})
        out["compare"] = json.loads(compared.content[0].text)
    return out


def test_mcp_client_session_submits_reads_status_and_compares(
    tmp_path: Path, data: dict[str, list[str]], data_root: str, tokenizer: str
) -> None:
    svc = make_service(tmp_path / "svc", data_root, tokenizer)
    out = asyncio.run(_mcp_session(str(svc.path), spec(data, tokenizer=tokenizer)))
    assert out["init"].serverInfo.name == "zephon"
    expected = {"submit", "status", "wait", "cancel", "list_jobs", "compare", "verify_elastic"}
    assert expected <= set(out["tools"])
    schema = out["tools"]["submit"].inputSchema
    assert {"spec", "key"} <= set(schema["required"]) and "submitter" not in schema["properties"]
    assert all(c["created"] for c in out["submitted"].values())
    assert {c["job"]["submitter"] for c in out["submitted"].values()} == {service.caller()}
    queued = out["verify_queued"]["job"]
    assert queued["kind"] == "verify" and queued["state"] == "queued"
    assert queued["submitter"] == service.caller()
    done = out["verify_done"]
    assert not done["timed_out"] and done["job"]["id"] == queued["id"]
    assert done["job"]["state"] == "succeeded", done["job"]["error"]
    assert done["job"]["dp_sizes"] == [2]  # leased enough cores for its larger dp
    result = done["job"]["result"]
    assert result["ok"] and result["matched_steps"] == 2 and result["first_mismatch"] is None
    assert (result["first_dp"], result["second_dp"]) == (1, 2)
    assert out["bad"].isError and "outside the data roots" in out["bad"].content[0].text
    assert out["status"]["job"]["state"] == "succeeded"
    assert [e["state"] for e in out["status"]["events"]] == ["queued", "running", "succeeded"]
    verdict = out["compare"]
    assert not verdict["accepted"]  # dry runs trained nothing: the guard says so
    assert "no_data" in {r["code"] for r in verdict["refusals"]}
