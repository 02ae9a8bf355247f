"""The ``zephon`` command line: where overrides may stand, and files that do not parse."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.cli import run_commands
from orchestrator.guard import DecisionPolicy
from orchestrator.guard.decisions import Design, Family
from pipeline import ConfigError


def test_resume_overrides_may_follow_its_options() -> None:
    args = cli.parse_arguments(
        ["resume", "runs/a", "--dp", "1", "resources.launcher=local", "resources.nodes=1"]
    )
    assert args.folder == "runs/a" and args.dp == 1
    assert args.overrides == ["resources.launcher=local", "resources.nodes=1"]
    args = cli.parse_arguments(["run", "-c", "x.yaml", "train.steps=4", "--dp", "2", "data.seed=3"])
    assert args.overrides == ["train.steps=4", "data.seed=3"]


@pytest.mark.parametrize(
    "argv",
    [
        ["resume", "runs/a", "--dp", "1", "--nodes", "1"],  # an unknown option
        ["resume", "runs/a", "--steps", "4", "runs/b"],  # not key=value
        ["sync", "runs/a", "resources.nodes=1"],  # sync takes no overrides
    ],
)
def test_anything_else_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unrecognized arguments"):
        cli.parse_arguments(argv)
    assert cli.main([*argv, "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "invalid" and "see `zephon --help`" in error["message"]


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-c", "bad.yaml"],
        ["run", "-c", "bad.yaml"],
        ["submit", "-c", "bad.yaml", "--key", "k", "--root", "service"],
        ["serve", "--budgets", "bad.yaml", "--root", "service"],
    ],
)
def test_a_yaml_file_that_does_not_parse_is_a_mistake_not_a_failure(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2 (``invalid``) naming the file, line and column, no traceback, nothing written:
    an agent must not read a typo as a failed training."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("data:\n  mixture: {code: 1\n")
    code = cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert code == 2 and error["kind"] == "invalid", out
    assert "'bad.yaml' is not valid YAML at line 3, column 1" in error["message"]
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)  # the client's own retries would take minutes
@pytest.mark.parametrize("command", ["compare", "fit", "propose"])
def test_reading_runs_from_a_store_that_is_not_there_is_answered_at_once(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A SQLite store that does not exist is exit 2, and none is created where the command
    runs; a server that does not answer is exit 4 within seconds (MLflow's client would
    retry for minutes)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main([command, "--experiment", "nope", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert "no tracking store at sqlite:///" in error["message"]
    dead = f"http://127.0.0.1:{closed_port()}"
    code = cli.main([command, "--experiment", "x", "--tracking-uri", dead, "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 4 and error["kind"] == "tracking_unavailable", error
    assert "--tracking-uri" in error["message"] and "offline_ok" not in error["message"]
    assert list(tmp_path.iterdir()) == []  # no mlflow.db, no lock, nothing


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--device", "tpu"], "--device='tpu' is invalid; use one of ['auto', 'cpu', 'cuda']"),
        (["--data-root", "/nonexistent/data"], "--data-root /nonexistent/data: no such folder"),
    ],
)
def test_a_service_that_could_not_serve_does_not_start(
    option: list[str],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["serve", "--root", "svc", *option, "--until-idle", "--json"]) == 2
    assert says in json.loads(capsys.readouterr().out)["error"]["message"]
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_shows_its_traceback_only_when_debugging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("train: {steps: -1}\n")
    assert cli.main(["plan", "-c", "bad.yaml", "--json"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("ZEPHON_DEBUG", "1")
    assert cli.main(["plan", "-c", "bad.yaml", "--json"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" in err and json.loads(out)["error"]["kind"] == "invalid"


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_a_bad_smooth_last_is_exit_2_saying_what_to_pass(
    value: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``compare --smooth-last K`` below 1 (or no integer) is refused before any run is read:
    exit 2, the message names the option, no traceback, nothing written."""
    monkeypatch.chdir(tmp_path)
    code = cli.main(["compare", "--experiment", "x", "--smooth-last", value, "--json"])
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert code == 2 and error["kind"] == "invalid", out
    assert "--smooth-last" in error["message"] and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_compare_s_flags_reach_the_guard_as_one_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], DecisionPolicy, dict]] = []
    monkeypatch.setattr(
        run_commands,
        "compare_tracked",
        lambda run_ids, policy, **kw: calls.append((run_ids, policy, kw)) or {"accepted": True},
    )
    flags = ["--threshold", "0.01", "--family", "bh", "--design", "fixed", "--max-seeds", "4"]
    flags += ["--smooth-last", "2", "--decide-on", "code,docs"]
    assert cli.main(["compare", "r1", "r2", *flags, "--json"]) == 0
    ((run_ids, policy, where),) = calls
    assert run_ids == ["r1", "r2"]
    assert where == {"experiment": None, "sweep": None, "tracking_uri": None}
    assert policy == DecisionPolicy(
        threshold=0.01,
        family=Family.BH,
        design=Design.FIXED,
        max_seeds=4,
        smooth_last=2,
        decide_on=("code", "docs"),
    )
    assert cli.main(["compare", "r1", "--json"]) == 0
    assert calls[-1][1] == DecisionPolicy()  # the flags' defaults are the guard's
