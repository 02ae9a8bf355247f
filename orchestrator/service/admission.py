"""What the job service accepts from a submitter: checked before a job is queued, and
again before it starts (the queue file could be written by anyone who can write it).

A spec is an experiment validated as any other, plus the service's :class:`Rules`: size
limits, dataset and tokenizer files under the data roots, and no code or paths of the
submitter's choosing. Nothing here runs a shell.

Design: docs/design/orchestrator_service.md
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.experiment import (
    ExperimentConfig,
    Launcher,
    dp_problems,
    load_experiment,
    split_step_problems,
    validate,
)
from orchestrator.run.initial_weights import checkpoint_format
from orchestrator.service.job import JobKind
from pipeline.io import credentials_problem
from pipeline.tokenizer.loader import tokenizer_file_location


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Largest values a submitted experiment may ask for."""

    max_spec_bytes: int = 64_000
    """Size of the spec as JSON."""
    max_steps: int = 1_000_000
    max_seq_len: int = 131_072
    max_global_batch_size: int = 65_536
    max_lanes: int = 4_096
    max_holdout_bytes: int = 100_000_000
    max_holdout_docs: int = 100_000
    max_timeout_s: int = 7 * 24 * 3600


@dataclass(frozen=True)
class Rules:
    """The service's admission rules: docs/design/orchestrator_service.md, Admission."""

    data_roots: tuple[str, ...]
    """Folders dataset and tokenizer files must lie under."""
    runs_root: str
    """Where the service keeps run folders."""
    _: KW_ONLY
    tracking_uri: str
    """The service's MLflow tracking URI."""
    limits: Limits = field(default_factory=Limits)
    allowed_model_modules: tuple[str, ...] = ("orchestrator.titan.configs",)
    object_store_prefixes: tuple[str, ...] = ()
    """URL prefixes (``s3://bucket/prefix/``) dataset URLs may start with; none: no URLs."""


@dataclass(frozen=True)
class ElasticCheck:
    """What a ``verify`` job checks: train on ``first_dp`` ranks, checkpoint at
    ``split_step`` (None: half-way), resume on ``second_dp``, compare every digest."""

    first_dp: int
    second_dp: int
    split_step: int | None = None


@dataclass(frozen=True)
class AdmittedJob:
    """A job the service may run: its experiment (with the service's runs root, cache and
    tracking URI) and, for a ``verify`` job, the check."""

    config: ExperimentConfig
    check: ElasticCheck | None = None
    fresh: bool = False
    """A ``run`` job that trains even if a run of the same experiment exists (spec key
    ``fresh``), instead of being answered from it."""


FRESH_KEY = "fresh"
"""The key of a ``run`` job's spec, beside the experiment's sections, that asks for a new run."""


VERIFY_KEYS = ("experiment", "first_dp", "second_dp", "split_step")


def verify_request(
    experiment: Any, first_dp: int, second_dp: int, split_step: int | None = None
) -> dict[str, Any]:
    """The spec of a ``verify`` job (docs/design/orchestrator_service.md, Admission)."""
    return {
        "experiment": experiment,
        "first_dp": first_dp,
        "second_dp": second_dp,
        "split_step": split_step,
    }


def admit_job(kind: JobKind, spec: Any, rules: Rules) -> AdmittedJob:
    """:func:`admit` for a job of ``kind`` (``run``, ``plan`` or ``verify``); ExperimentError
    listing every reason if the service may not run it."""
    if kind != JobKind.VERIFY:
        fresh = False
        if isinstance(spec, dict) and FRESH_KEY in spec:
            fresh = spec[FRESH_KEY]
            spec = {key: value for key, value in spec.items() if key != FRESH_KEY}
        if not isinstance(fresh, bool) or (fresh and kind != JobKind.RUN):
            raise ExperimentError(
                [f"{FRESH_KEY} must be true or false, and only a run job trains: got {fresh!r}"]
            )
        return AdmittedJob(admit(spec, rules), fresh=fresh)
    if not isinstance(spec, dict) or set(spec) - set(VERIFY_KEYS) or "experiment" not in spec:
        raise ExperimentError(
            [f"a verify job's spec is a JSON object with the keys {list(VERIFY_KEYS)}"]
        )
    config = admit(spec["experiment"], rules)
    check = ElasticCheck(spec.get("first_dp"), spec.get("second_dp"), spec.get("split_step"))
    problems = []
    for name in ("first_dp", "second_dp"):
        value = getattr(check, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} must be an integer >= 1, got {value!r}")
        else:
            problems += [f"{name}={value}: {p}" for p in dp_problems(config, value)]
    problems += split_step_problems(config.train.steps, check.split_step)
    if problems:
        raise ExperimentError(problems)
    return AdmittedJob(config, check)


def admit(spec: Any, rules: Rules) -> ExperimentConfig:
    """The experiment of ``spec`` if the service may run it; ExperimentError listing
    every reason otherwise. The returned config carries the service's runs root,
    cache and tracking URI."""
    if not isinstance(spec, dict):
        raise ExperimentError(
            [f"a spec is a JSON object (an experiment), got {type(spec).__name__}"]
        )
    try:
        size = len(json.dumps(spec))
    except (TypeError, ValueError) as e:
        raise ExperimentError([f"the spec is not plain JSON data: {e}"]) from None
    if size > rules.limits.max_spec_bytes:
        raise ExperimentError(
            [f"the spec is {size} bytes of JSON; the limit is {rules.limits.max_spec_bytes}"]
        )
    problems = _service_keys(spec, rules)
    outside = _tokenizer_outside_roots(spec, rules)
    if outside:  # refused before loading, which would open the file
        raise ExperimentError([*problems, *outside])
    if not isinstance(spec.get("tracking") or {}, dict):  # the service sets its uri in it
        raise ExperimentError(
            [*problems, f"tracking is a section of the experiment, got {spec['tracking']!r}"]
        )
    if any("${" in text for text in _collect_strings(spec)):
        # OmegaConf would resolve them: ${oc.env:...} would copy secrets into the run.
        raise ExperimentError([*problems, "the spec contains ${...} interpolations; give values"])
    try:
        config = load_experiment(
            {
                **spec,
                "runs_root": rules.runs_root,
                "tracking": {**(spec.get("tracking") or {}), "uri": rules.tracking_uri},
            }
        )
    except ExperimentError as e:
        raise ExperimentError(problems + e.problems) from None
    problems += _check_size_limits(config, rules.limits) + _check_dataset_paths(config, rules)
    problems += _check_local_paths(config, rules)
    m = config.model
    if m.module not in rules.allowed_model_modules:
        problems.append(
            f"model.module={m.module!r} is not allowed here; use one of "
            f"{list(rules.allowed_model_modules)}"
        )
    if m.args:
        problems.append("model.args (raw TorchTitan flags) is not accepted by the job service")
    r = config.resources
    if r.launcher != Launcher.LOCAL or r.nodes != 1:
        problems.append(
            "the job service runs local launches on one node (resources.launcher=local, "
            "resources.nodes=1)"
        )
    if problems:
        raise ExperimentError(problems)
    validate(config)
    return config


def _collect_strings(value: Any) -> list[str]:
    """Every string in ``value`` (keys too), however deep."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_collect_strings(k), *_collect_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _collect_strings(v)]
    return []


def _service_keys(spec: dict[str, Any], rules: Rules) -> list[str]:
    """Keys only the service sets, if the submitter set them otherwise."""
    problems = []
    if spec.get("runs_root") not in (None, rules.runs_root):
        problems.append("runs_root is chosen by the job service; leave it out")
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    if data.get("cache_dir") is not None:
        problems.append("data.cache_dir is chosen by the job service; leave it out")
    io_options = data.get("io_options") if isinstance(data.get("io_options"), dict) else {}
    if isinstance(io_options.get("cache"), dict) and io_options["cache"].get("dir") is not None:
        problems.append("data.io_options.cache.dir is chosen by the job service; leave it out")
    tracking = spec.get("tracking") if isinstance(spec.get("tracking"), dict) else {}
    if tracking.get("uri") not in (None, rules.tracking_uri):
        problems.append(f"tracking.uri is the job service's ({rules.tracking_uri}); leave it out")
    return problems


def _check_size_limits(config: ExperimentConfig, limits: Limits) -> list[str]:
    d, t, r = config.data, config.train, config.resources
    checks = [
        ("train.steps", t.steps, limits.max_steps),
        ("data.seq_len", d.seq_len, limits.max_seq_len),
        ("data.global_batch_size", d.global_batch_size, limits.max_global_batch_size),
        ("data.lanes", d.lanes, limits.max_lanes),
        ("data.holdout_bytes", d.holdout_bytes, limits.max_holdout_bytes),
        ("data.holdout_docs", d.holdout_docs, limits.max_holdout_docs),
        ("resources.timeout_s", r.timeout_s or 0, limits.max_timeout_s),
    ]
    return [
        f"{key}={value} is above the limit of {limit}"
        for key, value, limit in checks
        if value > limit
    ]


def _check_dataset_paths(config: ExperimentConfig, rules: Rules) -> list[str]:
    """The training datasets and the evaluation sets must lie under the data roots."""
    roots = _resolved_roots(rules)
    problems = []
    named = [
        *((f"data.datasets.{name}", patterns) for name, patterns in config.data.datasets.items()),
        *((f"data.eval_sets.{name}", patterns) for name, patterns in config.data.eval_sets.items()),
    ]
    for key, patterns in named:
        for pattern in patterns:
            if "://" in pattern:
                problems += _object_store_problems(key, pattern, rules)
                continue
            expanded = os.path.expanduser(pattern)
            if not os.path.isabs(expanded):
                problems.append(f"{key}: {pattern!r}: give an absolute path")
                continue
            # The fixed part of a glob, and every file it matches, must stay inside a root.
            fixed = expanded.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
            candidates = [fixed, *glob.glob(expanded, recursive=True)]
            outside = [
                c for c in candidates if not _is_inside_roots(Path(os.path.realpath(c)), roots)
            ]
            if outside:
                problems.append(
                    f"{key}: {pattern!r} is outside the data roots {[str(r) for r in roots]}"
                )
    return problems


def _object_store_problems(key: str, url: str, rules: Rules) -> list[str]:
    """A dataset URL must start with one of the service's object-store prefixes, with no
    ``..`` segment to climb out of it, and no credentials in it."""
    credentials = credentials_problem(url)
    if credentials:
        return [f"{key}: {credentials}"]
    if url.startswith(rules.object_store_prefixes) and ".." not in url.split("/"):
        return []
    allowed = list(rules.object_store_prefixes) or "none (zephon serve --object-store-prefix)"
    return [
        f"{key}: {url!r}: this service accepts URLs only under its object-store prefixes: {allowed}"
    ]


def _tokenizer_outside_roots(spec: dict[str, Any], rules: Rules) -> list[str]:
    """``data.tokenizer``, unless a gpt2 name, must lie under a data root like the datasets."""
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    tokenizer = data.get("tokenizer")
    if not isinstance(tokenizer, str):
        return []  # the default, or a wrong type the schema refuses
    location = tokenizer_file_location(tokenizer)
    return [] if location is None else _outside_roots("data.tokenizer", location, rules)


def _check_local_paths(config: ExperimentConfig, rules: Rules) -> list[str]:
    """``train.init_from`` and ``eval.task_dir`` lie under the data roots like the datasets
    (a task folder's YAML can name Python code to run); ``train.init_from`` is a checkpoint
    folder, checked as ``zephon plan`` checks it (its tensors' shapes are checked when the
    job plans its run)."""
    problems = []
    init_from, task_dir = config.train.init_from, config.eval.task_dir
    if task_dir is not None:
        problems += _outside_roots("eval.task_dir", task_dir, rules)
    if init_from is not None:
        outside = _outside_roots("train.init_from", init_from, rules)
        if outside:  # refused before its folder is looked into
            return [*problems, *outside]
        try:
            checkpoint_format(Path(init_from))
        except ExperimentError as e:
            problems += e.problems
    return problems


def _outside_roots(key: str, location: str, rules: Rules) -> list[str]:
    """Why the local path ``location`` given at ``key`` may not be read ([] if it lies
    under a data root): not absolute, or outside every root."""
    if not os.path.isabs(location):
        return [f"{key}: {location!r}: give an absolute path"]
    roots = _resolved_roots(rules)
    if _is_inside_roots(Path(os.path.realpath(location)), roots):
        return []
    return [f"{key}: {location!r} is outside the data roots {[str(r) for r in roots]}"]


def _resolved_roots(rules: Rules) -> list[Path]:
    """The data roots with ``~``, symlinks and ``..`` resolved."""
    return [Path(os.path.realpath(os.path.expanduser(r))) for r in rules.data_roots]


def _is_inside_roots(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)
