"""Overrides that give a section, a mapping or a list one plain value
(orchestrator/experiment/overrides.py) are refused in the experiment's words, saying what to
write: a ``zephon-run`` preset name given to ``zephon`` gets the keys that preset sets."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from orchestrator.errors import EXIT_INVALID, ExperimentError
from orchestrator.experiment import ExperimentConfig, load_experiment
from tests.support.cli import zephon_in_process

SECTIONS = {
    f.name: typing.get_type_hints(ExperimentConfig)[f.name]
    for f in dataclasses.fields(ExperimentConfig)
    if dataclasses.is_dataclass(typing.get_type_hints(ExperimentConfig)[f.name])
}


def refusal(override: str) -> str:
    """The one problem ``load_experiment`` finds in ``override``."""
    with pytest.raises(ExperimentError) as caught:
        load_experiment(None, [override])
    (problem,) = caught.value.problems
    return problem


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_a_section_given_a_value_is_refused_naming_its_keys(section: str) -> None:
    problem = refusal(f"{section}=anything")
    assert problem.startswith(f"{section}=anything: {section} is a section of the experiment")
    keys = [f"{section}.{f.name}" for f in dataclasses.fields(SECTIONS[section])]
    assert f"set its keys ({', '.join(keys)})" in problem
    assert "Merge error" not in problem and "subclass" not in problem


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("model=mini", {"model": {"config": "zephon_mini"}}),
        ("train=smoke", {"train": {"steps": 4, "checkpoint_interval": 2}}),
        ("eval=off", {"eval": {"enable": False}}),
    ],
)
def test_a_zephon_run_preset_name_is_answered_with_the_keys_it_sets(
    preset: str, expected: dict
) -> None:
    """What the refusal says to write loads, and sets what the preset sets."""
    section, name = preset.split("=")
    problem = refusal(preset)
    assert f"zephon-run's preset {preset} (conf/{section}/{name}.yaml)" in problem
    written = re.search(r" write (.*) \(or use zephon-run\)\.$", problem)
    assert written, problem
    loaded = load_experiment(None, written.group(1).split(" ")).to_dict()
    assert {section: {k: loaded[section][k] for k in expected[section]}} == expected


def test_a_preset_with_nothing_of_its_own_and_an_unknown_name_say_so() -> None:
    assert "sets nothing beyond the defaults: leave it out" in refusal("train=short")
    assert refusal("model=nope").endswith("Presets chosen by name (model=NAME) are zephon-run's.")


def test_a_mapping_or_a_list_given_a_value_is_refused_with_what_to_write() -> None:
    assert refusal("data.mixture=3") == (
        "data.mixture=3: data.mixture is a mapping, not one value; write data.mixture.NAME=VALUE "
        "for one entry or data.mixture={NAME: VALUE, ...} for all"
    )
    assert refusal("model.args=--foo") == (
        "model.args=--foo: model.args is a list, not one value; write model.args=[--foo]"
    )


def test_zephon_plan_answers_a_preset_name_in_its_own_words(tmp_path: Path) -> None:
    done = zephon_in_process(tmp_path, "plan", "--json", "model=mini")
    assert done.returncode == EXIT_INVALID, done
    message = json.loads(done.stdout)["error"]["message"]
    assert "model is a section of the experiment" in message
    assert "write model.config=zephon_mini (or use zephon-run)" in message


def test_values_are_read_as_zephon_run_reads_them() -> None:
    """Hydra's override grammar, whose mappings need no space after the colon."""
    loaded = load_experiment(
        None,
        [
            "data.datasets={a:[/d/a/*.jsonl],b:[/d/b/*.jsonl]}",
            "data.phases=[{until_step:4,mixture:{a:1,b:0}},{mixture:{a:1,b:1}}]",
            "tracking.uri=http://127.0.0.1:5000",
            "model.args=['--optimizer.lr=1e-3']",
            "data.text_field='body,text'",
        ],
    )
    assert loaded.data.phases[0].until_step == 4
    assert loaded.data.phases[0].mixture == {"a": 1.0, "b": 0.0}
    assert loaded.data.datasets["b"] == ["/d/b/*.jsonl"]
    assert loaded.tracking.uri == "http://127.0.0.1:5000"
    assert loaded.model.args == ["--optimizer.lr=1e-3"]
    assert loaded.data.text_field == "body,text"


def test_a_sweep_or_an_unreadable_value_is_refused_saying_what_to_write() -> None:
    assert "several values, a sweep; zephon runs one experiment" in refusal("train.steps=2,4")
    assert "quote a value holding '='" in refusal("model.args=[--training.steps=30]")
    assert "'+' and '~' are zephon-run's" in refusal("+train.steps=2")
