"""``zephon-run``'s task function (sweeps/task.py) and the warm server ``zephon-run``
(sweeps/app.py) starts before it knows a launch follows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from orchestrator.run import warm_start
from orchestrator.run.cpu_env import cpu_start_env
from sweeps import app, task
from tests.support.sweeps import datasets_override
from tests.support.warm_start import fake_servers


def test_a_dry_run_ends_the_speculative_warm_server_and_plans(
    corpus: dict[str, list[Path]],
    zephon_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_servers(monkeypatch)
    conf_module = app.CONFIG_PATH.removeprefix("pkg://")
    overrides = [datasets_override(corpus), f"data.cache_dir={zephon_cache}", "dry_run=true"]
    with initialize_config_module(config_module=conf_module, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "model=mini", "train=smoke"])
    warm_start.speculate(cpu_start_env())  # as zephon-run's main does before Hydra composes
    speculative = warm_start.starter(cpu_start_env())

    plan = task.run_job(cfg)

    assert speculative.closed and plan["steps"] == 4
    (line,) = capsys.readouterr().out.splitlines()  # one line: parallel jobs print a line each
    assert json.loads(line) == json.loads(json.dumps(plan))
