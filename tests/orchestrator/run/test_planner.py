"""A run's plan: the pure parts (plans of real experiments are made in tests/orchestrator/experiment)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.experiment import load_experiment
from orchestrator.run import planner as plan_module


def test_the_nodes_of_a_multinode_run_derive_one_name() -> None:
    base = {
        "data": {"datasets": {"a": ["a.jsonl"]}},
        "resources": {"launcher": "multinode", "nodes": 2, "dp": 2, "rdzv_endpoint": "h:1"},
    }
    variant = "v" * 64

    def name(*overrides: str) -> str:
        return plan_module._default_run_name(load_experiment(base, list(overrides)), variant)

    node0 = name("resources.node_rank=0", "resources.max_procs=1")
    assert node0 == name("resources.node_rank=1", "resources.max_procs=4")  # its own cores
    assert node0 != name("resources.node_rank=1", "resources.rdzv_endpoint=h:2")
    assert node0 != name("resources.node_rank=1", "train.steps=7")
    one_machine = "resources.launcher=local"
    assert name(one_machine) != name(one_machine)  # a new name every time


def test_the_tokenizers_of_a_run_and_its_token_files_are_named_by_absolute_path(
    monkeypatch,
) -> None:
    """The trainer starts in another folder: a tokenizer named relative to where the run was
    submitted, the run's or a token file's declared one, must still be found there."""
    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    relative = "tests/data/tokenizers/gpt-neox"
    config = load_experiment(
        {
            "data": {
                "datasets": {"a": ["a.bin"]},
                "tokenizer": relative,
                "pretokenized": {"a": {"tokenizer": relative}},
            }
        },
        [],
    )
    absolute = plan_module.with_absolute_paths(config)
    assert Path(absolute.data.tokenizer).is_absolute()
    assert absolute.data.pretokenized["a"].tokenizer == absolute.data.tokenizer
