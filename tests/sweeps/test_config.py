"""``zephon-run``'s one schema (sweeps/config.py: ``RunConfig`` registered with Hydra): every
leaf field of ``ExperimentConfig`` can be set from the command line and reaches the experiment,
a wrong type or an unknown key is refused naming the key before anything starts, and
``conf/`` restates no default of the schema. The leaves and their values are derived from
the dataclasses, never listed here."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from orchestrator.experiment import ExperimentConfig, load_experiment
from sweeps.config import command_line_problems, split
from tests.support import REPO
from tests.support.sweeps import datasets_override

ZEPHON_RUN = [sys.executable, "-c", "from sweeps.app import main; main()"]


def zephon_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``zephon-run`` with ``args`` in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*ZEPHON_RUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def leaves(schema: type, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (type, default) of every leaf field of the dataclass ``schema``."""
    found = {}
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        key, hint = f"{prefix}{field.name}", hints[field.name]
        if dataclasses.is_dataclass(hint):
            found.update(leaves(hint, f"{key}."))
        else:
            default = (
                field.default_factory() if field.default is dataclasses.MISSING else field.default
            )  # type: ignore[misc]
            found[key] = (hint, default)
    return found


def another_value(key: str, hint: Any, default: Any) -> Any:
    """A value of type ``hint`` that is not ``default`` (what the override sets)."""
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = [a for a in typing.get_args(hint) if a is not type(None)] if optional else [hint]
    kind = typing.get_origin(options[0]) or options[0]
    if kind is bool:
        return not default
    if kind is int:
        return (default or 0) + 3
    if kind is float:
        return (default or 0.0) + 0.25
    if kind is str:
        return f"{key.replace('.', '_')}_set"
    if kind is list:
        item = typing.get_args(options[0])[0]
        if dataclasses.is_dataclass(item):  # data.phases: a staged mixture
            return [
                {"mixture": {"one": 1.0}, "until_step": 3, "until_tokens": None},
                {"mixture": {"two": 1.0}, "until_step": None, "until_tokens": None},
            ]
        return [7, 8] if item is int else ["--flag-a", "b"]
    if kind is dict:
        value = typing.get_args(options[0])[1]
        if value is float:
            return {"one": 0.25, "two": 0.75}
        if typing.get_origin(value) is list:
            return {"one": ["/data/one/a.jsonl"], "two": ["/data/two/b.jsonl"]}
        if dataclasses.is_dataclass(value):  # data.pretokenized: a section per dataset
            return {"one": {"tokenizer": "gpt2", "dtype": "uint32"}}
        return {"partition": "gpu", "timeout_min": 30}
    raise AssertionError(f"{key}: no test value for type {hint}")


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar (strings quoted, dict keys bare)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, list):
        return f"[{','.join(hydra_value(item) for item in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def override(key: str, value: Any) -> str:
    """``key=value`` in Hydra's override grammar."""
    return f"{key}={hydra_value(value)}"


def test_every_leaf_of_the_experiment_is_set_from_zephon_run(tmp_path: Path) -> None:
    wanted = {key: another_value(key, *spec) for key, spec in leaves(ExperimentConfig).items()}
    assert len(wanted) > 40 and "train.precision" in wanted and "resources.slurm" in wanted
    done = zephon_run(
        "--cfg", "job", "--resolve", *(override(k, v) for k, v in wanted.items()), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    experiment_part, options = split(OmegaConf.create(yaml.safe_load(done.stdout)))
    experiment = load_experiment(experiment_part).to_dict()
    for key, value in wanted.items():
        section, _, leaf = key.rpartition(".")
        got = experiment[section][leaf] if section else experiment[leaf]
        assert got == value, key
    assert options.dry_run is False and options.run_name is None


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("train.steps=many", "train.steps"),
        ("data.lanes=1.5", "data.lanes"),
        ("eval.enable=perhaps", "eval.enable"),
        ("train.stepz=3", "train.stepz"),
        ("nosuch=1", "nosuch"),
    ],
)
def test_a_wrong_type_or_an_unknown_key_is_refused_naming_it(
    setting: str, named: str, tmp_path: Path
) -> None:
    done = zephon_run("dry_run=true", setting, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"full_key: {named}" in done.stderr or f"'{named}'" in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_unknown_keys_are_answered_by_zephon_run_with_exit_2(tmp_path: Path) -> None:
    """Every unknown key, one line each with the keys there are, before Hydra composes: a
    mistake (exit 2), not a failed run (Hydra's exit 1)."""
    done = zephon_run("dry_run=true", "train.stepz=3", "nosuch=1", "model=tiny", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("zephon-run: train.stepz=3: 'train.stepz' is no key")
    assert "steps" in lines[0] and lines[1].startswith("zephon-run: nosuch=1: 'nosuch'")
    assert len(lines) == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argument",
    [
        "model=tiny",  # a preset group
        "data.datasets={web:[/d/web/*.jsonl]}",  # a map of the user's own keys, whole
        "data.io_options.web={}",  # a key in a map of the user's own keys
        "data.mixture.code=0.1,0.5",  # a sweep's values
        "hydra.sweeper.replicate_seeds=2",
        "+extra=1",
        "-m",
        "resources.slurm.qos=high",
        "sweep.name=s",
    ],
)
def test_what_zephon_run_takes(argument: str) -> None:
    groups = {"model", "mix", "train", "data", "eval", "tracking", "resources"}
    assert command_line_problems([argument], groups) == []


@pytest.mark.parametrize(
    "arguments",
    [
        ["data.datasets.a=[/d/a/*.jsonl]"],
        ["data=stdlib", "data.datasets.a.x=1"],
    ],
)
def test_a_key_inside_what_the_preset_computes_is_refused_saying_how_to_set_it(
    arguments: list[str],
) -> None:
    """conf/data/stdlib.yaml computes data.datasets (the local corpus): Hydra cannot set a
    key inside an interpolation (it fails with an assertion, exit 1)."""
    groups = {"model", "mix", "train", "data", "eval", "tracking", "resources"}
    [problem] = command_line_problems(arguments, groups)
    assert "the preset data/stdlib computes data.datasets (${zephon_local_corpus:3})" in problem
    assert "'data.datasets={web:[/data/web/*.jsonl]}'" in problem


def test_a_dry_run_plans_what_the_readme_says_can_be_forced(
    tmp_path: Path, corpus: dict[str, list[Path]], zephon_cache: Path
) -> None:
    done = zephon_run(
        "dry_run=true",
        "model=mini",
        "train=smoke",
        "train.precision=float32",
        datasets_override(corpus),
        f"data.cache_dir={zephon_cache}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["precision"] == "float32" and plan["config"]["train"]["steps"] == 4


def test_no_preset_restates_a_default_of_the_schema() -> None:
    defaults = {key: default for key, (_, default) in leaves(ExperimentConfig).items()}
    conf = REPO / "conf"
    for path in sorted(conf.glob("*/*.yaml")):
        loaded = yaml.safe_load(path.read_text()) or {}
        package = f"{path.parent.name}."
        if path.read_text().startswith("# @package data.mixture"):
            continue  # a mixture is data, not a schema field
        for leaf, value in loaded.items():
            key = f"{package}{leaf}"
            assert key in defaults, f"{path}: {key} is not a field of the schema"
            assert value != defaults[key], f"{path}: {key}: {value!r} is the schema's default"
