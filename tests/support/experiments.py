"""Experiments (``orchestrator.experiment`` dicts) for the tests' real trainings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.titan_run import corpus_tokenizer


def data_only_experiment(
    domains: dict[str, list[Path]], steps: int, **resources: Any
) -> dict[str, Any]:
    """``zephon_mini`` over the shared test corpus (equal token shares, its own small
    tokenizer), checkpointed every 2 steps, no held-out text: for tests of where and how it
    trains, whose evidence is the digests; ``resources`` add to a 900 s time limit."""
    return {
        "model": {"config": "zephon_mini"},
        "data": {
            "datasets": {n: [str(p) for p in paths] for n, paths in domains.items()},
            "mixture": dict.fromkeys(domains, 1.0),
            "holdout_bytes": 0,
            "tokenizer": corpus_tokenizer(domains),
        },
        "train": {"steps": steps, "checkpoint_interval": 2},
        "eval": {"enable": False},
        "resources": {"timeout_s": 900, **resources},
    }


def scored_experiment(
    domains: dict[str, list[Path]], mixture: dict[str, float], *, steps: int = 4, **data: Any
) -> dict[str, Any]:
    """``zephon_mini`` over the shared test corpus with ``mixture`` (naming each domain),
    held-out text scored every 2 steps and checkpoints every 2: for tests whose evidence is
    the scores and the guard; ``data`` adds to the data section."""
    assert set(mixture) == set(domains), (sorted(mixture), sorted(domains))
    return {
        "model": {"config": "zephon_mini"},
        "data": {
            "datasets": {n: [str(p) for p in paths] for n, paths in domains.items()},
            "mixture": dict(mixture),
            "holdout_bytes": 4096,
            "tokenizer": corpus_tokenizer(domains),
            **data,
        },
        "train": {"steps": steps, "checkpoint_interval": 2},
        "eval": {"interval": 2},
        "resources": {"timeout_s": 600},
    }
