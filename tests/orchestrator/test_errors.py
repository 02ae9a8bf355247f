"""The error hierarchy: every error is a ZephonError whose class carries the CLI's exit code,
and ``zephon ... --json`` prints exactly one JSON object whatever goes wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import orchestrator.errors as errors
from orchestrator import cli
from orchestrator.cli import dispatch
from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.experiment.runfolder import RunFolder
from pipeline import ConfigError, DataError, StageError, StateError, TokenizerError, ZephonError
from sweeps.mixes import MixError

EXPECTED = {
    ConfigError: (2, "invalid"),
    DataError: (2, "invalid"),
    TokenizerError: (2, "invalid"),
    StateError: (2, "invalid"),
    errors.ExperimentError: (2, "invalid"),
    MixError: (2, "invalid"),
    errors.SearchError: (2, "invalid"),
    errors.QueueError: (2, "invalid"),
    errors.QueueFull: (5, "queue_full"),
    errors.OverBudget: (5, "over_budget"),
    errors.TransitionError: (2, "invalid"),
    errors.NoFit: (2, "invalid"),
    errors.LaunchError: (1, "launch_failed"),
    errors.DiskFull: (1, "disk_full"),
    errors.TrackingError: (4, "tracking_error"),
    errors.TrackingUnavailable: (4, "tracking_unavailable"),
    errors.NotTracked: (2, "invalid"),
    errors.SweepFailed: (1, "failed"),
    errors.ComparisonRefused: (3, "refused"),
    errors.RunFailed: (1, "failed"),
}


@pytest.mark.parametrize("error_class", list(EXPECTED), ids=lambda c: c.__name__)
def test_every_error_carries_its_exit_code(error_class: type[ZephonError]) -> None:
    assert issubclass(error_class, ZephonError)
    error = error_class(["a reason"]) if issubclass(error_class, errors.ProblemsError) else None
    error = error or error_class.__new__(error_class)
    assert (error.exit_code, error.kind) == EXPECTED[error_class]


def test_the_orchestrator_raises_only_classes_of_the_table() -> None:
    """Every class the errors module defines is in the table above (none forgotten)."""
    defined = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, ZephonError)
    }
    assert defined - {ConfigError, ZephonError, errors.ProblemsError} <= set(EXPECTED)
    assert not issubclass(StageError, ValueError) and StageError.exit_code == 1


def test_sync_of_an_untracked_folder_prints_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = RunFolder(tmp_path / "offline")
    folder.write_experiment(
        ExperimentRecord.new(config={})
    )  # trained without tracking: no tracking_uri
    for path, says in ((folder.path, "never tracked"), (tmp_path / "absent", "not a run folder")):
        code = cli.main(["sync", str(path), "--json"])
        out, err = capsys.readouterr()
        payload = json.loads(out)  # one object, nothing else on stdout
        assert code == 2 and payload["error"]["kind"] == "invalid"
        assert says in payload["error"]["message"] and "Traceback" not in err


def test_an_unexpected_error_still_prints_one_json_object(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setitem(dispatch.COMMANDS, "sync", broken)
    code = cli.main(["sync", "anywhere", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["error"] == {
        "kind": "internal",
        "message": "a bug",
        "problems": ["a bug"],
    }
    assert "RuntimeError: a bug" in err  # the traceback, for the bug report
