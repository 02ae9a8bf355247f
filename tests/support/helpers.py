"""Run every data-parallel rank of a pipeline in one process and assemble the global batches."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Dataset, WorkSource, global_batch_digest
from tests.support.pipelines import make_pipeline


@dataclass
class GlobalRun:
    """Per step: global batch tokens [G, T+1] in lane order, and the global digest."""

    tokens: list[np.ndarray]
    digests: list[str]
    states: list[dict[str, Any]]
    """Each rank's ``state_dict()`` after the last step."""


def run_ranks(
    source: WorkSource,
    dp_size: int,
    steps: int,
    state: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> GlobalRun:
    """Iterate ``steps`` steps on every rank of ``dp_size`` and concatenate ranks in rank order."""
    per_rank_tokens: list[list[np.ndarray]] = []
    per_rank_digests: list[list[dict[int, bytes]]] = []
    states = []
    for rank in range(dp_size):
        pipeline = make_pipeline(source, dp_rank=rank, dp_size=dp_size, **kwargs)
        if state is not None:
            pipeline.load_state_dict(state)
        batches = iter(pipeline)
        tokens, digests = [], []
        for _ in range(steps):
            micro = [next(batches)]
            while not micro[-1].is_last:
                micro.append(next(batches))
            assert len({mb.step for mb in micro}) == 1
            tokens.append(np.concatenate([mb.tokens() for mb in micro]))
            digests.append(micro[0].lane_digests)
        states.append(pipeline.state_dict())
        batches.close()
        per_rank_tokens.append(tokens)
        per_rank_digests.append(digests)
    return GlobalRun(
        tokens=[np.concatenate([r[s] for r in per_rank_tokens]) for s in range(steps)],
        digests=[
            global_batch_digest({k: v for r in per_rank_digests for k, v in r[s].items()})
            for s in range(steps)
        ],
        states=states,
    )


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def two_datasets(tmp_path: Path, exhausted: str) -> list[Dataset]:
    """37 prose-like and 11 code-like records."""
    a = write_jsonl(tmp_path / "a.jsonl", [f"alpha document {i} " * (1 + i % 5) for i in range(37)])
    b = write_jsonl(
        tmp_path / "b.jsonl", [f"def f{i}(x):\n    return x * {i}\n" for i in range(11)]
    )
    cache = tmp_path / "cache"
    return [
        Dataset("a", [str(a)], cache_dir=cache, exhausted=exhausted),
        Dataset("b", [str(b)], cache_dir=cache, exhausted=exhausted),
    ]
