"""Generated mistakes given to ``zephon-run`` in process: unknown keys, values of a wrong type,
overrides that do not parse, presets that do not exist, and experiments the plan refuses.
Each is exit 2 with a ``zephon-run: `` line naming the key or value, no traceback, and
nothing written where the command ran (Hydra's output folder of a refused job included).

``pytest -s`` prints how many inputs were tried."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sweeps import app
from sweeps.console import reported_errors
from tests.support.mistakes import FEW, LEAVES, TRIED, assert_names, nothing_written

FACE = "zephon-run"
TYPED = [(key, kind) for key, kind in LEAVES if kind in ("integer", "number", "boolean")]
NOT_A_NUMBER = ["abc", "1.5x", "[1,2]", "{x:1}", "yess"]
GRAMMAR = ["train.steps=[1,", "train.steps={", "=3", "train..steps=3", "train.steps='a"]
PRESETS = ["model=nope", "mix=everything", "train=longest", "resources=tpu"]
PLANNED = [
    ("resources.dp=0", "dp"),
    ("train.steps=-4", "steps"),
    ("data.mixture={stdlib_code:-1}", "mixture"),
    ("train.checkpoint_interval=0", "checkpoint_interval"),
]
"""Overrides Hydra composes and the experiment's plan refuses (each plans: ~2 s)."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the commands run (no warm server: nothing may start)."""
    yield tmp_path_factory.mktemp("zephon-run")
    print(f"\nmistakes tried by zephon-run: {TRIED[FACE]}")


@pytest.fixture(autouse=True)
def no_warm_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEPHON_WARM_START", "0")


def zephon_run(folder: Path, *overrides: str) -> tuple[int | str | None, str]:
    """``zephon-run OVERRIDES dry_run=true`` in ``folder``, in this process, as its console
    script runs it (its command-line check, then Hydra with Zephon's error report): the
    exit code and stderr."""
    arguments = [*overrides, "dry_run=true"]
    err = io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as exited,
    ):
        patch.chdir(folder)
        patch.setattr(sys, "argv", ["zephon-run", *arguments])
        app._check_command_line(arguments)
        with reported_errors():
            app.hydra_main()
    return exited.value.code, err.getvalue()


def refused(folder: Path, override: str, names: str | tuple[str, ...]) -> None:
    """``override`` is refused the documented way."""
    TRIED[FACE] += 1
    with nothing_written(folder):
        code, err = zephon_run(folder, override)
    assert code == 2, (override, err)
    assert "Traceback" not in err and "zephon-run: " in err, (override, err)
    assert_names(err, names)


@FEW
@given(
    section=st.sampled_from(["", "train.", "data.", "model.", "eval.", "resources."]),
    name=st.from_regex(r"x_[a-z]{2,8}", fullmatch=True),
)
def test_an_unknown_key(folder: Path, section: str, name: str) -> None:
    refused(folder, f"{section}{name}=1", f"{section}{name}")


@settings(FEW, max_examples=10)  # Hydra composes the whole config before it refuses: ~1 s
@given(leaf=st.sampled_from(TYPED), value=st.sampled_from(NOT_A_NUMBER))
def test_a_value_of_another_type(folder: Path, leaf: tuple[str, str], value: str) -> None:
    key, _ = leaf
    refused(folder, f"{key}={value}", key)


@pytest.mark.parametrize("override", GRAMMAR)
def test_an_override_that_does_not_parse(folder: Path, override: str) -> None:
    refused(folder, override, ())


@pytest.mark.parametrize("override", PRESETS)
def test_a_preset_that_does_not_exist(folder: Path, override: str) -> None:
    refused(folder, override, override.split("=")[1])


@pytest.mark.parametrize(("override", "names"), PLANNED)
def test_an_experiment_the_plan_refuses(folder: Path, override: str, names: str) -> None:
    refused(folder, override, names)
