"""The builder's closed choices: taken by name from configs, refused otherwise naming the choices."""

from __future__ import annotations

import json

import pytest

from pipeline import ConfigError, Pipeline, WorkSource
from pipeline.runners import RunnerKind
from pipeline.stages.pack import PackingAlgorithm
from tests.support.pipelines import make_pipeline


def test_runner_and_packing_are_taken_by_name(source: WorkSource) -> None:
    pipeline = make_pipeline(source, runner="inline")
    assert pipeline.lane_options.runner is RunnerKind.INLINE
    assert pipeline.pack_config is not None
    assert pipeline.pack_config.algorithm is PackingAlgorithm.WRAP
    # The contract (and so its fingerprint) holds the plain names, as it always did.
    assert json.loads(json.dumps(pipeline.contract()))["packing"] == "wrap"


def test_unknown_runner_and_packing_are_refused_naming_the_choices(source: WorkSource) -> None:
    with pytest.raises(
        ConfigError,
        match=r"runner='gpu' is invalid; use one of \['inline', 'threads', 'processes'\]",
    ):
        Pipeline(source).options(runner="gpu")
    with pytest.raises(
        ConfigError, match=r"packing algorithm='greedy' is invalid; use one of \['wrap'\]"
    ):
        Pipeline(source).pack_flat(64, algorithm="greedy")
