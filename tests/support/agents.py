"""Agents of the job-service tests: a tiny spec, and a submitter that retries.

Kept apart from the test module so that the server the 20 submitter processes fork from
(``tests.support.processes``) imports only the service client, not MLflow and TorchTitan.
"""

from __future__ import annotations

import random
import time
from typing import Any

from orchestrator.service import client as service
from orchestrator.service.config import load_service


def spec(
    data: dict[str, list[str]],
    *,
    steps: int = 2,
    seed: int = 0,
    dp: int | None = None,
    tokenizer: str = "gpt2",
    **train: Any,
) -> dict:
    """A tiny experiment over the test corpus (``dp``: pinned, else the scheduler's choice)."""
    return {
        "model": {"config": "zephon_mini"},
        "data": {"datasets": data, "seed": seed, "holdout_bytes": 2048, "tokenizer": tokenizer},
        "train": {"steps": steps, **train},
        "eval": {"enable": False},
        "resources": {"timeout_s": 600, "dp": dp},
    }


def retrying_submitter(
    root: str, worker: int, data: dict[str, list[str]], tokenizer: str
) -> list[tuple[str, str, bool]]:
    """One agent process (all of them the same submitter, the OS user): 10 experiments,
    each submitted 3 times (retries), in a random order;
    (key, job id, created) per submission. Worker 0 and 1's first experiment trains
    (2 steps at dp 1: both at once on 2 cores), the rest are dry runs."""
    svc = load_service(root)
    rng = random.Random(worker)
    keys = [f"w{worker}-e{i}" for i in range(10)] * 3
    rng.shuffle(keys)
    out = []
    for key in keys:
        i = int(key.rsplit("e", 1)[1])
        real = worker < 2 and i == 0
        # the two trainings run side by side, a core each
        body = spec(data, seed=worker * 10 + i, dp=1 if real else None, tokenizer=tokenizer)
        got = service.submit(svc, body, key=key, kind="run" if real else "plan")
        out.append((key, got["job"]["id"], got["created"]))
        time.sleep(rng.random() * 0.01)
    return out
