"""The ``zephon`` command line: where overrides may stand, and files that do not parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import cli


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
    with pytest.raises(SystemExit) as exit_:
        cli.parse_arguments(argv)
    assert exit_.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


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
