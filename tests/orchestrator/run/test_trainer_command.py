"""The trainer's command line: the initial checkpoint's digest goes with the step-0 eval."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.run import api
from orchestrator.run.initial_weights import checkpoint_digest
from orchestrator.run.trainer_command import trainer_args

FLAG = "--validator.initial-digest"


@pytest.fixture(scope="module")
def planned(corpus: dict[str, list[Path]], zephon_cache: Path) -> api.RunPlan:
    config = {
        "data": {
            "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
            "mixture": dict.fromkeys(corpus, 1.0),
            "cache_dir": str(zephon_cache),
        },
        "eval": {"initial": True},
    }
    return api.plan(config, dp=1)


def test_the_trainer_gets_the_initial_checkpoints_digest_to_reuse_step_0(
    planned: api.RunPlan, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "step-0"
    checkpoint.mkdir()
    (checkpoint / "__0_0.distcp").write_bytes(b"weights")
    args = trainer_args(dataclasses.replace(planned, init_path=checkpoint))
    assert args[args.index(FLAG) + 1] == checkpoint_digest(checkpoint)
    # no initial checkpoint (a resume from its own) or none made yet (a dry run): no digest
    assert FLAG not in trainer_args(dataclasses.replace(planned, init_path=None))
    assert FLAG not in trainer_args(dataclasses.replace(planned, init_path=tmp_path / "none"))
    no_step_0 = dataclasses.replace(planned.config.eval, initial=False)
    config = dataclasses.replace(planned.config, eval=no_step_0)
    assert FLAG not in trainer_args(
        dataclasses.replace(planned, init_path=checkpoint, config=config)
    )
