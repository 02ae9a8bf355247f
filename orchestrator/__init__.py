"""Zephon's orchestrator: experiments in, trustworthy comparisons out.

One folder per job; arrows are imports (a part imports only what is below or beside it)::

    cli.py (``zephon``)                       sweeps/ (Hydra: mixes, launcher, app)
        │                                         │
        ├── service/   the job service for agents: client -> admission -> queue (SQLite)
        │              scheduler (``zephon serve``) leases devices (pool), MCP server
        ▼
    run/        plan -> torchrun -> result: api, launch, devices, precision, recipe,
        │       init_checkpoint, interrupts
        │   └─> titan/     the TorchTitan integration (trainer, data loader, evaluator,
        │                  the recipe as TorchTitan resolves it)
        ├── search/     mix search: fit mixture -> score models, propose the next mixtures
        │               (reads runs through guard/, so only accepted sets are fitted)
        ├── guard/      the comparison guard: rules, plot, reading runs, logging a verdict
        ├── tracking/   the only code that talks to MLflow (names, URIs, Tracker)
        ▼
    experiment/ what an experiment is: schema, validation, data fingerprints, run folder
        ▼                (no torch, no MLflow, no subprocess)
    errors.py   every error, each carrying the CLI's exit code
    filelock.py an exclusive lock between processes (flock)
        ▼
    pipeline/   the lane pipeline (knows nothing of this package)

The public Python API is :mod:`orchestrator.run.api`, re-exported here:
``plan``, ``run``, ``resume``, ``sync``, ``compare``, and ``verify_elastic``
(:mod:`orchestrator.run.elastic_check`)
(imported on first use, so ``import orchestrator.titan`` in a trainer stays light); the
mix search's is :mod:`orchestrator.search` (``fit``, ``propose``, ``read_tables``).
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
