"""A ladder across model sizes (``hydra.sweeper.replicate_models``): every variant at every
size, each size compared on its own and the sizes lined up. Dry runs and the grouping of
verdicts (tests/sweeps/test_parent_run.py); nothing trained (a real ladder: docs/guide.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeps.summary import SWEEP_FILE
from tests.support.sweeps import datasets_override, multirun


@pytest.fixture(scope="module")
def common(corpus: dict[str, list[Path]], zephon_cache: Path) -> list[str]:
    return [
        "dry_run=true",
        "train=smoke",
        datasets_override(corpus),
        f"data.cache_dir={zephon_cache}",
        "hydra/launcher=zephon",
        "hydra.sweeper.mix.explicit=[{code:1,docs:1,unicode:1},{code:2,docs:1,unicode:1}]",
        "hydra.sweeper.replicate_seeds=[0,1]",
    ]


def test_every_variant_trains_at_every_size(tmp_path: Path, common: list[str]) -> None:
    process, sweep_dir = multirun(
        tmp_path, "ladder", *common, "hydra.sweeper.replicate_models=[mini,tiny]", timeout=300
    )
    assert process.returncode == 0, process.stderr[-5000:]
    jobs = json.loads((sweep_dir / SWEEP_FILE).read_text())["jobs"]
    assert len(jobs) == 2 * 2 * 2  # mixtures x seeds x sizes
    # the jobs plan in parallel threads; each prints its plan as one JSON line of its own
    plans = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    assert sorted(p["variant"] for p in plans) == sorted(j["variant"] for j in jobs)
    sizes = [next(o for o in j["overrides"] if o.startswith("model=")) for j in jobs]
    assert sorted(set(sizes)) == ["model=mini", "model=tiny"] and sizes.count("model=tiny") == 4
    assert all(f"model={j['other'][-1].removeprefix('model=')}" in j["other"] for j in jobs)
    # one data contract at every size: a mixture under a seed is one variant at both
    variant = {}
    for job in jobs:
        variant.setdefault((json.dumps(job["mixture"], sort_keys=True), job["seed"]), set()).add(
            job["variant"]
        )
    assert len(variant) == 4 and all(len(ids) == 1 for ids in variant.values())


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (("hydra.sweeper.replicate_models=[mini,tiny]", "model=tiny"), "sets the model itself"),
        (("hydra.sweeper.replicate_models=[mini,mini]",), "list each model preset once"),
    ],
)
def test_a_ladder_that_cannot_be_made_is_refused_before_launch(
    tmp_path: Path, common: list[str], arguments: tuple[str, ...], expected: str
) -> None:
    process, sweep_dir = multirun(tmp_path, "refused", *common, *arguments, timeout=300)
    assert process.returncode == 2 and expected in process.stderr, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert not (sweep_dir / SWEEP_FILE).exists()
