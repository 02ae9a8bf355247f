"""The job service answers a spec submitted under a new key from the run that already
trained it (real scheduler, attempt processes and ``zephon_mini`` training, 2 steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.run.identity_index import INDEX_DIR
from orchestrator.service import client as service
from orchestrator.service.config import ServiceConfig
from orchestrator.service.scheduler import Scheduler
from tests.support.agents import spec
from tests.support.titan_run import corpus, corpus_tokenizer

pytestmark = pytest.mark.timeout(900)


def test_a_new_key_with_a_trained_spec_is_answered_from_its_run(tmp_path: Path) -> None:
    built = corpus(tmp_path.parent)
    tokenizer = corpus_tokenizer(built)
    data = {n: [str(p) for p in ps] for n, ps in built.items()}
    data_root = str(Path(next(iter(data.values()))[0]).parents[1])
    svc = ServiceConfig(root=str(tmp_path / "svc"), data_roots=(data_root, tokenizer))
    svc.save()
    body = spec(data, dp=1, tokenizer=tokenizer)
    first = service.submit(svc, body, key="first")["job"]["id"]
    Scheduler(svc, poll_s=0.2).serve(until_idle=True)
    second = service.submit(svc, body, key="second")["job"]["id"]
    Scheduler(svc, poll_s=0.2).serve(until_idle=True)
    trained, answered = svc.queue().get(first), svc.queue().get(second)
    assert trained.state == answered.state == "succeeded", (trained.error, answered.error)
    assert trained.result["answered_from"] is None
    assert answered.result["answered_from"] == first == answered.result["run_name"]
    assert answered.result["data_fingerprint"] == trained.result["data_fingerprint"]
    folders = [p.name for p in svc.runs_root.iterdir() if p.is_dir() and p.name != INDEX_DIR]
    assert folders == [first]  # the second job trained nothing
