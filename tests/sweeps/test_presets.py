"""Every preset of ``conf/`` plans on the local corpus: each option of each config group
and each primary config (found by listing the config tree ``zephon-run`` reads, never
written down here), composed with Hydra's compose API from that tree, then planned as a dry run
(nothing trains): validation passes, the plan carries the composed experiment, weighs
every domain and sets each domain's held-out documents aside in full."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from orchestrator.experiment import load_experiment
from orchestrator.experiment.config import TrackingSection
from orchestrator.experiment.fingerprints import build_pipeline
from orchestrator.run import api
from sweeps.app import CONFIG_PATH
from sweeps.config import split
from tests.support.sweeps import datasets_override

CONF_MODULE = CONFIG_PATH.removeprefix("pkg://")
"""The package holding ``zephon-run``'s config tree (``conf/``, installed as ``zephon_conf``)."""
CONF_DIR = Path(importlib.import_module(CONF_MODULE).__file__).parent
GROUP_OPTIONS = [
    f"{group.name}={option.stem}"
    for group in sorted(CONF_DIR.iterdir())
    if group.is_dir()
    for option in sorted(group.glob("*.yaml"))
]
"""``group=option`` for every yaml file of every config group."""
PRIMARY_CONFIGS = sorted(path.stem for path in CONF_DIR.glob("*.yaml"))
"""``config`` (``zephon-run``'s) and ``main`` (the main job's)."""
SERVER_URI = "http://127.0.0.1:5999"
"""``tracking=server`` reads ``MLFLOW_TRACKING_URI``; a plan contacts no server."""


def test_the_presets_are_found() -> None:
    groups = {option.split("=")[0] for option in GROUP_OPTIONS}
    assert {"data", "eval", "mix", "model", "resources", "tracking", "train"} <= groups
    assert "mix=code_heavy" in GROUP_OPTIONS and {"config", "main"} <= set(PRIMARY_CONFIGS)


@pytest.mark.parametrize(
    ("config_name", "presets"),
    [("config", [option]) for option in GROUP_OPTIONS] + [(name, []) for name in PRIMARY_CONFIGS],
    ids=[*GROUP_OPTIONS, *PRIMARY_CONFIGS],
)
def test_every_preset_plans_on_the_local_corpus(
    config_name: str,
    presets: list[str],
    corpus: dict[str, list[Path]],
    zephon_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", SERVER_URI)
    overrides = [datasets_override(corpus), f"data.cache_dir={zephon_cache}"]
    with initialize_config_module(config_module=CONF_MODULE, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=[*overrides, *presets])
    experiment = load_experiment(split(cfg)[0])

    planned = api.plan(experiment, run_name="preset")

    # The plan is the composed experiment; it only resolves the precision.
    resolved = replace(experiment.train, precision=planned.config.train.precision)
    assert planned.config == replace(experiment, train=resolved)
    assert sorted(planned.mixture) == sorted(corpus)
    assert sum(float(share) for share in planned.mixture.values()) == pytest.approx(1.0, abs=1e-3)
    data = planned.config.data
    pipeline = build_pipeline(
        data, dp_size=planned.dp, dp_rank=0, microbatch_size=planned.config.train.microbatch_size
    )
    try:
        for index, dataset in enumerate(pipeline.source.datasets):
            held_out = len(pipeline.source.heldout_records(index))
            assert held_out == (data.holdout_docs if data.holdout_bytes else 0), dataset.name
    finally:
        pipeline.close()


def test_the_team_preset_points_at_the_team_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tracking=team``: the server ``ZEPHON_TEAM_TRACKING_URI`` names, else the one that
    ``scripts/tracking_server.sh`` starts on this machine; runs train while it is down."""
    with initialize_config_module(config_module=CONF_MODULE, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["tracking=team"])
    monkeypatch.delenv("ZEPHON_TEAM_TRACKING_URI", raising=False)
    assert load_experiment(split(cfg)[0]).tracking == TrackingSection(
        uri="http://127.0.0.1:5000", offline_ok=True
    )
    monkeypatch.setenv("ZEPHON_TEAM_TRACKING_URI", "http://mlflow.internal:5000")
    assert load_experiment(split(cfg)[0]).tracking.uri == "http://mlflow.internal:5000"
