"""A sweep over one phase of a staged mixture (``hydra.sweeper.mix.phase=K``): the variants
set that phase's mixture and make it the runs' compared phase, the other phases stay as
configured; a staged experiment without the phase, or a phase it does not have, is refused
before anything launches. Dry runs: nothing trained (staged runs train in tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from orchestrator.experiment import fingerprints
from sweeps.config import experiment_from
from sweeps.summary import SWEEP_FILE
from tests.support.sweeps import datasets_override, multirun

PHASES = (
    "data.phases=[{until_step:8,mixture:{code:1,docs:1,unicode:1}},"
    "{mixture:{code:1,docs:1,unicode:1}}]"
)
MIXES = "hydra.sweeper.mix.explicit=[{code:1,docs:0,unicode:0},{code:0,docs:1,unicode:1}]"


@pytest.fixture(scope="module")
def common(corpus: dict[str, list[Path]], zephon_cache: Path) -> list[str]:
    return [
        "dry_run=true",
        "model=mini",
        "train=smoke",
        "train.steps=12",
        datasets_override(corpus),
        f"data.cache_dir={zephon_cache}",
        "hydra/launcher=zephon",
    ]


def test_a_phase_sweep_varies_that_phase_and_compares_on_it(
    tmp_path: Path, common: list[str]
) -> None:
    process, sweep_dir = multirun(
        tmp_path, "phase", *common, PHASES, MIXES, "hydra.sweeper.mix.phase=1", timeout=300
    )
    assert process.returncode == 0, process.stderr[-5000:]
    jobs = json.loads((sweep_dir / SWEEP_FILE).read_text())["jobs"]
    assert [j["status"] for j in jobs] == ["succeeded"] * 2
    assert len({j["variant"] for j in jobs}) == 2
    for job in jobs:
        assert "data.compared_phase=1" in job["overrides"]
        assert any(o.startswith("++data.phases.1.mixture.code=") for o in job["overrides"])
    prints = [
        fingerprints(
            experiment_from(OmegaConf.load(sweep_dir / str(j["job"]) / ".hydra/config.yaml"))
        )
        for j in jobs
    ]
    assert sorted(p.mixture["code"] for p in prints) == ["0.000000", "1.000000"]
    assert len({p.contract_fingerprint for p in prints}) == 1  # phase 0 is shared
    assert prints[0].contract["phases"][0]["mixture"]["docs"] == "0.333333"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ((PHASES, MIXES), "say which phase's mixture the sweep varies"),
        ((PHASES, MIXES, "hydra.sweeper.mix.phase=2"), "use an index in [0, 1]"),
        ((MIXES, "hydra.sweeper.mix.phase=0"), "needs a staged mixture (data.phases)"),
        (
            (PHASES, MIXES, "hydra.sweeper.mix.phase=1", "data.phases.1.mixture.code=2"),
            "the mix sweeper sets data.phases.1.mixture",
        ),
    ],
)
def test_a_phase_sweep_that_cannot_be_made_is_refused_before_launch(
    tmp_path: Path, common: list[str], arguments: tuple[str, ...], expected: str
) -> None:
    process, sweep_dir = multirun(tmp_path, "refused", *common, *arguments, timeout=300)
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert expected in process.stderr, process.stderr[-3000:]
    assert not (sweep_dir / SWEEP_FILE).exists()
