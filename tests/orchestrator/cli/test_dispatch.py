"""The ``zephon`` command line: where overrides may stand."""

from __future__ import annotations

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
