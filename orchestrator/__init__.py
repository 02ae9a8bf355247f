"""Zephon's orchestrator: experiments in, trustworthy comparisons out.

One folder per job, layered: a part imports only what is below or beside it (cli/, mcp/ and
service/ over run/, titan/, search/, guard/ and tracking/, over evaluation/, experiment/,
errors.py and pipeline/). The public Python API is re-exported here and imported on first
use (``import orchestrator.titan`` stays light):

    plan, run, resume       orchestrator.run.api
    verify_elastic          orchestrator.run.elastic_check
    compare                 orchestrator.guard.tracked_comparison.compare_tracked
    sync                    orchestrator.run.api

Design: docs/design/orchestrator_layout.md
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "plan": ("orchestrator.run.api", "plan"),
    "run": ("orchestrator.run.api", "run"),
    "resume": ("orchestrator.run.api", "resume"),
    "verify_elastic": ("orchestrator.run.elastic_check", "verify_elastic"),
    "compare": ("orchestrator.guard.tracked_comparison", "compare_tracked"),
    "sync": ("orchestrator.run.api", "sync"),
}
"""Public name -> (module, attribute)."""
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    return getattr(importlib.import_module(module), attribute)
