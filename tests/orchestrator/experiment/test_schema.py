"""orchestrator.experiment.schema: the experiment's JSON Schema says what config.py says
(every field, its docstring, default and type), accepts real experiments and refuses what
load_experiment refuses."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from orchestrator.errors import ExperimentError
from orchestrator.experiment import config as config_module
from orchestrator.experiment.config import ExperimentConfig, load_experiment
from orchestrator.experiment.schema import experiment_json_schema, type_json_schema
from tests.support import REPO
from tests.support.agents import spec as agent_spec

SECTIONS = [
    f.name for f in dataclasses.fields(ExperimentConfig) if f.name not in ("name", "runs_root")
]


def docstrings_in_config_source() -> dict[tuple[str, str], str]:
    """(class name, field name) -> the string literal after the field, read from config.py
    here independently of the module under test."""
    tree = ast.parse(Path(inspect.getsourcefile(config_module)).read_text())
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for statement, following in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                found[(node.name, statement.target.id)] = following.value.value
    return found


def leaf_fields() -> list[tuple[str, type, dataclasses.Field[Any]]]:
    """(section or "", section class, field) of every field that is not itself a section."""
    top = [("", ExperimentConfig, f) for f in dataclasses.fields(ExperimentConfig)]
    leaves = [t for t in top if t[2].name not in SECTIONS]
    hints = typing.get_type_hints(ExperimentConfig)
    for section in SECTIONS:
        cls = hints[section]
        leaves += [(section, cls, f) for f in dataclasses.fields(cls)]
    return leaves


def property_of(schema: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    return (schema["properties"][section] if section else schema)["properties"][name]


def test_every_field_of_every_section_appears_with_its_docstring_and_default() -> None:
    schema = experiment_json_schema()
    docstrings = docstrings_in_config_source()
    defaults = ExperimentConfig().to_dict()
    assert set(schema["properties"]) == {f.name for f in dataclasses.fields(ExperimentConfig)}
    for section in SECTIONS:
        nested = schema["properties"][section]
        assert nested["type"] == "object" and nested["additionalProperties"] is False
        assert nested["description"]  # the section's class docstring
        assert set(nested["properties"]) == set(defaults[section])
    for section, cls, field in leaf_fields():
        prop = property_of(schema, section, field.name)
        where = f"{section}.{field.name}".lstrip(".")
        assert prop["description"] == " ".join(docstrings[(cls.__name__, field.name)].split()), (
            where
        )
        expected = defaults[section][field.name] if section else defaults[field.name]
        assert prop["default"] == expected, where
    assert property_of(schema, "data", "seq_len")["description"] == "Tokens per sequence."
    precision = property_of(schema, "train", "precision")["description"]
    assert precision.startswith("``auto``, ``float32`` or ``bfloat16`` (TorchTitan's")
    assert "\n" not in precision and "  " not in precision  # a multi-line docstring, one line


def test_schema_types_match_the_dataclass_types() -> None:
    schema = experiment_json_schema()
    expected = {
        ("", "name"): {"type": "string"},
        ("data", "seq_len"): {"type": "integer"},
        ("data", "datasets"): {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        ("data", "mixture"): {"type": "object", "additionalProperties": {"type": "number"}},
        ("data", "cache_dir"): {"type": ["string", "null"]},
        ("eval", "enable"): {"type": "boolean"},
        ("resources", "dp"): {"type": ["integer", "null"]},
        ("resources", "gpu_ids"): {"type": ["array", "null"], "items": {"type": "integer"}},
        ("resources", "slurm"): {"type": "object"},
        ("model", "args"): {"type": "array", "items": {"type": "string"}},
    }
    for (section, name), types in expected.items():
        prop = property_of(schema, section, name)
        assert {k: v for k, v in prop.items() if k not in ("description", "default")} == types
    # every field: the JSON type of its schema is the one of its Python type
    json_types = {str: "string", int: "integer", float: "number", bool: "boolean"}
    for section, cls, field in leaf_fields():
        python_type = typing.get_type_hints(cls)[field.name]
        if python_type in json_types:
            assert property_of(schema, section, field.name)["type"] == json_types[python_type]


def test_a_field_type_without_a_schema_is_an_error_not_a_guess() -> None:
    with pytest.raises(TypeError, match="no JSON Schema"):
        type_json_schema(tuple[int, ...])


def example_experiments() -> dict[str, dict[str, Any]]:
    """Real experiments: the job-service tests' spec, the Hydra tree's presets as one
    experiment (conf/, its local-corpus datasets given as paths), and the defaults."""
    conf = REPO / "conf"
    presets: dict[str, Any] = {
        section: OmegaConf.to_container(OmegaConf.load(conf / section / f"{preset}.yaml"))
        for section, preset in {
            "model": "mini",
            "data": "stdlib",
            "train": "short",
            "eval": "default",
            "resources": "auto",
            "tracking": "embedded",
        }.items()
    }
    presets["data"]["datasets"] = {
        "code": ["/data/code/*.jsonl.zst"],
        "docs": ["/data/docs.parquet"],
    }
    presets["data"]["mixture"] = {"code": 0.6, "docs": 0.4}
    return {
        "agent spec": agent_spec({"code": ["/data/code/a.jsonl"]}, steps=4, dp=2),
        "conf presets": {"name": "main", "runs_root": "runs", **presets},
        "defaults": ExperimentConfig().to_dict(),
    }


@pytest.mark.parametrize("name", list(example_experiments()))
def test_real_experiments_are_valid(name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    experiment = example_experiments()[name]
    jsonschema.Draft202012Validator.check_schema(experiment_json_schema())
    jsonschema.validate(experiment, experiment_json_schema(), cls=jsonschema.Draft202012Validator)
    load_experiment(experiment)  # and the loader agrees


BAD = {
    "unknown top-level key": {"colour": "blue"},
    "unknown section key": {"train": {"stepz": 3}},
    "string for an integer": {"data": {"seq_len": "long"}},
    "float for an integer": {"resources": {"dp": 1.5}},
    "list for a mapping": {"data": {"datasets": ["/data/a.jsonl"]}},
    "object for a section": {"eval": True},
}


@pytest.mark.parametrize("name", list(BAD))
def test_wrong_types_and_unknown_keys_are_refused_by_schema_and_loader(name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            BAD[name], experiment_json_schema(), cls=jsonschema.Draft202012Validator
        )
    with pytest.raises(ExperimentError):
        load_experiment(BAD[name])
