"""The ``zephon mcp`` server: FastMCP over stdio, offering the tools of
:mod:`orchestrator.mcp.tools` with :data:`INSTRUCTIONS`.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

from orchestrator.mcp.tools import ServiceTools
from orchestrator.service.client import caller

INSTRUCTIONS = """``zephon mcp``: Zephon's tools for LLM agents over the Model Context Protocol (stdio).

The tools are the job service's functions (:mod:`orchestrator.service.client`) and the
guard; their JSON schemas come from the type hints below. A refused request
(invalid spec, unknown job, full queue, a used-up daily budget, a key reused for
another spec) is a tool error whose text says what is wrong; nothing is queued or
changed then. A budget refusal says what was used, what is left and when it renews
(00:00 UTC); plan jobs are free.

    submit(spec, key, kind)               queue an experiment, idempotent per key; its
                                          input schema holds the experiment's fields
    experiment_schema()                   the experiment's JSON Schema (fields, types,
                                          defaults, descriptions)
    list_datasets(max_files_per_dataset)  the data files under the service's data roots,
                                          per dataset, with their sizes
    status(job_id) / wait(job_id, timeout_s) / cancel(job_id) / list_jobs(...)
    compare(run_ids | sweep | experiment) the guard's verdict (table, or refusal)
    fit(targets, runs | run_ids | sweep | experiment, predict)
                                          mixture -> score models, k-fold figures per model
    propose(n, min, max, targets, runs | run_ids | sweep | experiment, seed)
                                          the next mixtures, the recommended one, stop or not
    verify_elastic(spec, dp, resume_dp, key, wait_s)
                                          queue a job that trains, resumes on another dp
                                          and checks the digests; optionally wait for it

Every tool that trains queues a job: nothing trains in this process, so the scheduler's
device pool and the per-submitter limit apply to all of it. The submitter of every job
is the OS user who started this server (fixed at its start); no tool argument names
another (an unknown argument such as ``submitter`` is ignored).
"""
"""The server's MCP instructions: its tools and how they behave (sent before the submitter)."""


def build_server(root: str) -> FastMCP:
    """An MCP server over the job service rooted at ``root``, submitting as :func:`caller`."""
    submitter = caller()
    mcp = FastMCP("zephon", instructions=f"{INSTRUCTIONS}\nThis server submits as {submitter!r}.")
    tools = ServiceTools(root)
    for tool in (
        tools.submit,
        tools.experiment_schema,
        tools.list_datasets,
        tools.status,
        tools.wait,
        tools.cancel,
        tools.list_jobs,
        tools.compare,
        tools.fit,
        tools.propose,
        tools.verify_elastic,
    ):
        mcp.add_tool(tool)
    return mcp


def serve_stdio(root: str) -> None:
    """Serve :func:`build_server` on stdin/stdout until the client closes it."""
    build_server(root).run(transport="stdio")
