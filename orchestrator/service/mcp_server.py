"""``zephon mcp``: Zephon's tools for LLM agents over the Model Context Protocol (stdio).

The tools are the job service's functions (:mod:`orchestrator.service.client`) and the
guard; their JSON schemas come from the type hints below. A refused request
(invalid spec, unknown job, full queue, a key reused for another spec) is a
tool error whose text says what is wrong; nothing is queued or changed then.

    submit(spec, key, submitter, kind)    queue an experiment, idempotent per key
    status(job_id) / wait(job_id, timeout_s) / cancel(job_id) / list_jobs(...)
    compare(run_ids | sweep | experiment) the guard's verdict (table, or refusal)
    verify_elastic(spec, dp, resume_dp)   train, resume on another dp, check digests
"""

from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP

from orchestrator.service import client as service
from orchestrator.service.admission import admit


def build_server(root: str) -> FastMCP:
    """An MCP server over the job service rooted at ``root``."""
    mcp = FastMCP("zephon", instructions=__doc__)

    def svc() -> service.ServiceConfig:
        return service.load_service(root)

    @mcp.tool()
    def submit(spec: dict[str, Any], key: str, submitter: str, kind: str = "run") -> dict[str, Any]:
        """Queue an experiment (a Zephon experiment as a JSON object: data, train, eval, ...).
        A retry with the same key returns the same job; kind "plan" only plans it."""
        return service.submit(svc(), spec, key=key, submitter=submitter, kind=kind)

    @mcp.tool()
    def status(job_id: str) -> dict[str, Any]:
        """A job's state (queued, running, succeeded, failed, cancelled, preempted), its
        history and, when finished, its result: fingerprints, eval scores, MLflow run id."""
        return service.status(svc(), job_id)

    @mcp.tool()
    def wait(job_id: str, timeout_s: float = 600) -> dict[str, Any]:
        """Wait until the job is final or timeout_s passes; then its status."""
        return service.wait(svc(), job_id, timeout_s=timeout_s)

    @mcp.tool()
    def cancel(job_id: str) -> dict[str, Any]:
        """Cancel a queued job now, or stop a running one."""
        return service.cancel(svc(), job_id)

    @mcp.tool()
    def list_jobs(
        states: list[str] | None = None,
        submitter: str | None = None,
        kind: str | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """Jobs, oldest first, filtered by states, submitter and kind; counts per state."""
        return service.list_jobs(svc(), states=states, submitter=submitter, kind=kind, limit=limit)

    @mcp.tool()
    def compare(
        run_ids: list[str] | None = None,
        sweep: str | None = None,
        experiment: str | None = None,
        threshold: float = 0.0,
        decide_on: list[str] | None = None,
    ) -> dict[str, Any]:
        """The comparison guard over MLflow runs: a table of held-out scores per variant and a
        decision per pair (a_better / b_better / cannot_tell, with its interval; ``threshold``:
        the smallest difference in bits per byte that matters; ``decide_on``: held-out domains
        to rank and decide on, default all), or a refusal naming the
        diverging step or the differing contract fields."""
        from orchestrator.run import api

        if not run_ids and not sweep and not experiment:
            raise ValueError("name the runs: run_ids, sweep or experiment")
        return api.compare(
            run_ids,
            sweep=sweep,
            experiment=experiment,
            tracking_uri=svc().rules().tracking_uri,
            threshold=threshold,
            decide_on=decide_on,
        )

    @mcp.tool()
    def verify_elastic(spec: dict[str, Any], dp: int, resume_dp: int) -> dict[str, Any]:
        """Train the experiment on dp ranks, checkpoint half-way, resume on resume_dp ranks,
        and report whether every step's global batch digest matches an uninterrupted run."""
        from orchestrator.run import api

        return api.verify_elastic(admit(spec, svc().rules()), first_dp=dp, second_dp=resume_dp)

    return mcp


def serve_stdio(root: str) -> None:
    """Serve :func:`build_server` on stdin/stdout until the client closes it."""
    build_server(root).run(transport="stdio")
