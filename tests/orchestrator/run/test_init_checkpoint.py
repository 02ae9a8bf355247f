"""One initial checkpoint per recipe (orchestrator.run.init_checkpoint): made once under a
lock, however many jobs ask at once; found again by its key; hashed by content. Making a
real one (TorchTitan, one CPU process) is in tests/e2e/test_orchestrator_e2e.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.experiment import load_experiment
from orchestrator.experiment.run_record import InitCheckpoint
from orchestrator.run import init_checkpoint
from orchestrator.run.run_plan import Recipe


def fake_recipe(key: str = "k" * 64) -> Recipe:
    return Recipe({"debug": {"seed": 1}}, "f" * 64, {"debug": {"seed": 1}}, key)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(init_checkpoint, "zephon_home", lambda: tmp_path)
    return tmp_path


def counting_create(calls: list[int], content: bytes = b"weights"):
    def create(config: object, build: Path) -> Path:
        calls.append(1)
        time.sleep(0.3)  # long enough for every other job to be waiting on the lock
        checkpoint = build / "checkpoint" / "step-0"
        checkpoint.mkdir(parents=True)
        (checkpoint / "__0_0.distcp").write_bytes(content)
        (checkpoint / ".metadata").write_bytes(b"meta")
        return checkpoint

    return create


def test_concurrent_jobs_make_one_checkpoint(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(init_checkpoint, "_create_seed_checkpoint", counting_create(calls))
    config, recipe = load_experiment({}), fake_recipe()
    results: list[InitCheckpoint] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(init_checkpoint.ensure_init_checkpoint(config, recipe))
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 4 and len(set(results)) == 1
    made = results[0]
    assert Path(made.path) == init_checkpoint.init_checkpoint_path(config, recipe)
    assert (Path(made.path) / "__0_0.distcp").read_bytes() == b"weights"
    assert [p.name for p in (home / "init").iterdir() if p.is_dir()] == [recipe.init_key]


def test_checkpoint_is_found_again_and_hashed_by_content(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(init_checkpoint, "_create_seed_checkpoint", counting_create(calls))
    config = load_experiment({})
    first = init_checkpoint.ensure_init_checkpoint(config, fake_recipe("a" * 64))
    again = init_checkpoint.ensure_init_checkpoint(config, fake_recipe("a" * 64))
    assert again == first and len(calls) == 1
    monkeypatch.setattr(
        init_checkpoint, "_create_seed_checkpoint", counting_create(calls, b"other weights")
    )
    other = init_checkpoint.ensure_init_checkpoint(config, fake_recipe("b" * 64))
    assert len(calls) == 2 and other.sha256 != first.sha256
