"""Runs made by the previous release (``tests/data/runs_v0``, made by its ``make.py``) resume
and compare with this one: their ``experiment.json`` and ``run.json`` read through the typed
records, the interrupted one trains to its end from its checkpoint (past a torn one, as a
kill while writing leaves it), and both are tracked and compared. Their files moved with their data (paths rewritten, as after a copy of the tree)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.run import api
from orchestrator.run.lifecycle import Run
from tests.support import REPO
from tests.support.titan_run import corpus, corpus_tokenizer

pytestmark = pytest.mark.timeout(900)

FIXTURE = REPO / "tests" / "data" / "runs_v0" / "runs"
MADE_AT = "/tmp/zephon-runs-v0"
"""Where ``make.py`` made the runs and their data."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's runs root, moved here with its corpus and store."""
    base = tmp_path_factory.getbasetemp()
    corpus_tokenizer(corpus(base))  # the shared corpus and its tokenizer, as make.py made them
    root = tmp_path_factory.mktemp("v0")
    shutil.copytree(FIXTURE, root / "runs")
    moves = {
        f"sqlite:///{MADE_AT}/mlflow.db": f"sqlite:///{root}/mlflow.db",
        f"{MADE_AT}/runs": str(root / "runs"),
        MADE_AT: str(base),
    }
    for path in (root / "runs").rglob("*.json"):
        text = path.read_text()
        for old, new in moves.items():
            text = text.replace(old, new)
        path.write_text(text)
    return root / "runs"


def test_their_records_read_and_their_fingerprints_are_the_ones_recorded(runs: Path) -> None:
    for name in ("mix-a", "mix-b"):
        record = RunFolder(runs / name).experiment()
        assert record.identity and record.answer_identity() == record.identity
        assert record.recorded_init is not None and record.precision in ("float32", "bfloat16")
        # and this release fingerprints the same experiment's data as that one did
        again = api.plan(record.experiment_config(), dp=1).fingerprints
        assert (again.contract_fingerprint, again.variant) == (
            record.contract_fingerprint,
            record.variant,
        )
    state = RunFolder(runs / "mix-b").state()
    assert state.status == "interrupted" and state.dp_sizes == [1]
    assert state.segments[0].end_step == 2 and state.tracking.metrics_step == 2


def test_an_interrupted_run_of_the_previous_release_resumes_and_both_compare(runs: Path) -> None:
    stopped = RunFolder(runs / "mix-b")
    experiment_before = (stopped.path / "experiment.json").read_text()
    digests_before = stopped.digests()
    # killed while writing its step-4 checkpoint: shards, no .metadata (DCP writes it last)
    torn = stopped.checkpoint_dir / "step-4"
    torn.mkdir()
    (torn / "__0_0.distcp").write_bytes(b"\0" * 4096)
    assert stopped.last_checkpoint_step() == 2
    result = api.resume(stopped, dp=1)
    assert result.status == "succeeded", result.messages
    assert result.steps == 6 and result.dp_sizes == [1, 1]
    assert (stopped.path / "experiment.json").read_text() == experiment_before  # as it was
    assert {s: d for s, d in stopped.digests().items() if s <= 2} == digests_before
    state = stopped.state()
    assert [s.start_step for s in state.segments] == [0, 2] and state.segments[0].returncode == -2
    assert (torn / ".metadata").is_file()  # written whole this time, over the torn one

    finished = RunFolder(runs / "mix-a")
    sent = Run.open(finished).sync()  # a store that never had it: the run is made there, all sent
    assert sent["steps"] == len(finished.metrics()) and sent["evals"] == len(finished.evals())
    verdict = compare_tracked(experiment="runs-v0", tracking_uri=state.tracking_uri)
    assert verdict["accepted"], verdict.get("refusals")
    assert sorted(name for row in verdict["rows"] for name in row["runs"]) == ["mix-a", "mix-b"]
    assert len(verdict["pairs"]) == 1
