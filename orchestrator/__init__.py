"""Zephon's orchestrator: experiments in, trustworthy comparisons out.

One folder per job, layered: a part imports only what is below or beside it (cli.py and
service/ over run/, titan/, search/, guard/ and tracking/, over experiment/, errors.py
and pipeline/). The public Python API is :mod:`orchestrator.run.api`, re-exported here
and imported on first use (``import orchestrator.titan`` stays light).

Design: docs/design/orchestrator_layout.md
"""

from __future__ import annotations

from typing import Any

__all__ = ["compare", "plan", "resume", "run", "sync", "verify_elastic"]


def __getattr__(name: str) -> Any:
    if name == "verify_elastic":
        from orchestrator.run.elastic_check import verify_elastic

        return verify_elastic
    if name in __all__:
        from orchestrator.run import api

        return getattr(api, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
