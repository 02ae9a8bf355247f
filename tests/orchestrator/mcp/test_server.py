"""The MCP server's tool list, in process (FastMCP's own tools/list and tools/call): the
experiment's schema is advertised in submit's input schema and as a tool, and the datasets
are a tool. The stdio session end to end is tests/e2e/test_service.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.fastmcp.exceptions import ToolError

from orchestrator.experiment.schema import experiment_json_schema
from orchestrator.guard import DecisionPolicy
from orchestrator.guard.decisions import Design, Family
from orchestrator.mcp import tools
from orchestrator.mcp.server import build_server
from orchestrator.service import client as service
from orchestrator.service.config import ServiceConfig, load_service
from orchestrator.service.job import JobKind, JobState


@pytest.fixture
def root(tmp_path: Path) -> str:
    data = tmp_path / "data"
    (data / "web").mkdir(parents=True)
    (data / "web" / "part-0.jsonl").write_text('{"text": "hello"}\n')
    svc = ServiceConfig(root=str(tmp_path / "svc"), data_roots=(str(data),))
    svc.save()
    return str(svc.path)


def call(root: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool's JSON result, as a client reads its text content."""
    content, _ = asyncio.run(build_server(root).call_tool(tool, arguments))
    return json.loads(content[0].text)


def test_tools_list_shows_the_experiment_schema_and_the_datasets(root: str) -> None:
    tools = {t.name: t for t in asyncio.run(build_server(root).list_tools())}
    assert {"submit", "verify_elastic", "experiment_schema", "list_datasets"} <= set(tools)
    submit = tools["submit"].inputSchema
    assert set(submit["required"]) == {"spec", "key"}
    spec = submit["properties"]["spec"]
    assert spec["type"] == "object" and spec["additionalProperties"] is False
    assert {"name", "runs_root", "model", "data", "train", "eval", "resources", "tracking"} == set(
        spec["properties"]
    )
    seq_len = spec["properties"]["data"]["properties"]["seq_len"]
    assert seq_len == {"type": "integer", "default": 128, "description": "Tokens per sequence."}
    assert tools["verify_elastic"].inputSchema["properties"]["spec"] == spec
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(submit)  # what a client may check


def test_experiment_schema_and_list_datasets_tools(root: str) -> None:
    assert call(root, "experiment_schema", {}) == experiment_json_schema()
    listed = call(root, "list_datasets", {})
    assert [(d["name"], d["file_count"]) for d in listed["datasets"]] == [("web", 1)]
    assert listed == service.list_datasets(load_service(root))


def test_a_wrong_spec_is_still_refused_by_admission_with_its_reasons(root: str) -> None:
    # the advertised schema does not replace admission: a wrong spec reaches it and is
    # refused with its reasons, and nothing is queued
    with pytest.raises(ToolError, match="colour"):
        asyncio.run(
            build_server(root).call_tool("submit", {"spec": {"colour": "blue"}, "key": "k"})
        )
    assert sum(load_service(root).queue().counts().values()) == 0


def test_list_jobs_advertises_the_states_and_kinds_and_filters_by_them(root: str) -> None:
    tools = {t.name: t for t in asyncio.run(build_server(root).list_tools())}
    schema = json.dumps(tools["list_jobs"].inputSchema)
    assert all(f'"{name}"' in schema for name in [*JobState, *JobKind])
    listed = call(root, "list_jobs", {"states": ["queued", "running"], "kind": "plan"})
    assert listed["jobs"] == [] and listed["counts"]["queued"] == 0
    with pytest.raises(ToolError, match="states"):
        asyncio.run(build_server(root).call_tool("list_jobs", {"states": ["done"]}))


def inline_runs(count: int) -> list[dict[str, Any]]:
    """An agent's table: a known law over two domains (b helps), as inline runs."""
    runs = []
    for i in range(count):
        b = i / (count - 1)
        runs.append({"id": f"r{i}", "mixture": {"a": 1 - b, "b": b}, "scores": {"loss": 3 - b}})
    return runs


def test_fit_and_propose_tools_work_on_an_inline_table(root: str) -> None:
    fitted = call(
        root,
        "fit",
        {"runs": inline_runs(8), "targets": ["loss"], "predict": [{"a": 1.0}, {"b": 1.0}]},
    )
    assert {m["name"] for m in fitted["models"]} == {"mixing_law", "gaussian_process", "lightgbm"}
    low_b, high_b = fitted["predictions"]
    assert high_b["score"] < low_b["score"]
    proposed = call(
        root,
        "propose",
        {"runs": inline_runs(8), "targets": ["loss"], "n": 2, "max": {"b": 0.9}, "seed": 1},
    )
    assert len(proposed["proposals"]) == 2
    assert all(p["mixture"]["b"] <= 0.9 for p in proposed["proposals"])
    assert proposed["recommended"]["mixture"]["b"] == pytest.approx(0.9)
    assert set(proposed["stop"]) == {"stop", "reason"}


def test_fit_takes_runs_of_two_sizes_and_predicts_at_one(root: str) -> None:
    """Inline runs with a params key: the larger size 0.5 lower; predicted at it."""
    small = inline_runs(8)
    for run in small:
        run["scores"]["params"] = 1e6
    large = [
        {
            **run,
            "id": f"{run['id']}-big",
            "scores": {"loss": run["scores"]["loss"] - 0.5, "params": 1e8},
        }
        for run in small
    ]
    arguments = {"runs": small + large, "targets": ["loss"], "predict": [{"a": 1.0}]}
    at_large = call(root, "fit", arguments)
    assert at_large["model"] == "scaled_mixing_law" and at_large["at_size"] == 1e8
    at_small = call(root, "fit", {**arguments, "at_size": 1e6})
    (large_a,), (small_a,) = at_large["predictions"], at_small["predictions"]
    assert small_a["score"] - large_a["score"] == pytest.approx(0.5, abs=0.1)


def test_a_malformed_inline_table_is_a_tool_error_that_says_why(root: str) -> None:
    with pytest.raises(ToolError, match="is not"):
        asyncio.run(build_server(root).call_tool("fit", {"runs": [{"id": 1}], "targets": ["x"]}))


def test_compare_s_arguments_reach_the_guard_as_one_policy(
    root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(
        tools, "compare_tracked", lambda run_ids, **kw: calls.append(kw) or {"accepted": True}
    )
    arguments = {"threshold": 0.01, "family": "none", "design": "fixed", "max_seeds": 3}
    arguments |= {"smooth_last": 2, "decide_on": ["code"]}
    assert call(root, "compare", {"run_ids": ["r1", "r2"], **arguments}) == {"accepted": True}
    assert calls[0]["policy"] == DecisionPolicy(
        threshold=0.01,
        family=Family.NONE,
        design=Design.FIXED,
        max_seeds=3,
        smooth_last=2,
        decide_on=("code",),
    )
    assert call(root, "compare", {"experiment": "x"}) == {"accepted": True}
    assert calls[1]["policy"] == DecisionPolicy()  # the tool's defaults are the guard's
    with pytest.raises(ToolError, match="family 'bonferroni': use one of holm, bh, none"):
        asyncio.run(build_server(root).call_tool("compare", {"sweep": "s", "family": "bonferroni"}))
