"""Generated mistakes (hypothesis) fed to Zephon's faces in process, and the error rules
they are held to: the documented exit code and kind, a message naming the key, file or
value, no traceback, nothing written.

``TRIED`` counts the inputs each face was given; each test module prints its faces' counts
when it ends (``pytest -s``)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from orchestrator.experiment.schema import experiment_json_schema
from orchestrator.service.config import load_service
from tests.support.cli import zephon_in_process

TRIED: Counter[str] = Counter()
"""Inputs tried per face (``cli plan``, ``mcp submit``, ...)."""

FEW = settings(
    max_examples=40,
    deadline=None,
    database=None,  # no .hypothesis folder: the faces run in the folders they are checked in
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
"""Hypothesis settings of these tests: cheap examples, no deadline, no example database."""

MANY = settings(FEW, max_examples=150)
"""For the widest strategies (a mistake anywhere in an experiment)."""


SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database while a connection is open (not rows)."""


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder`` but SQLite's side files: relative path ->
    (size, mtime in ns) of a file, (0, 0) of a folder (whose own mtime changes as SQLite's
    side files come and go in it; its entries are compared themselves)."""
    return {
        str(p.relative_to(folder)): (
            (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (0, 0)
        )
        for p in sorted(folder.rglob("*"))
        if not p.name.endswith(SQLITE_SIDE_FILES)
    }


@contextlib.contextmanager
def nothing_written(folder: Path) -> Iterator[None]:
    """Assert that the block creates, changes or removes nothing under ``folder``."""
    before = files_under(folder)
    yield
    after = files_under(folder)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a refused command wrote under {folder}: {changed}"


def queued(root: Path) -> int:
    """The rows of the queue of the service ``root``, its connection closed (a connection
    left to the garbage collector would write the queue file while a check looks)."""
    queue = load_service(root).queue()
    try:
        return sum(queue.counts().values())
    finally:
        queue.close()


def refused_by_zephon(
    face: str,
    folder: Path,
    *argv: str,
    code: int = 2,
    kind: str = "invalid",
    names: str | tuple[str, ...] = (),
) -> dict[str, Any]:
    """``zephon ARGV --json`` run in ``folder``, held to the rules: exit ``code``, one JSON
    error of ``kind`` on stdout whose message contains one of ``names``, no traceback on
    stderr, nothing written under ``folder``; the error."""
    TRIED[face] += 1
    with nothing_written(folder):
        done = zephon_in_process(folder, *argv, "--json")
    return refusal_checked(done, code=code, kind=kind, names=names)


def refusal_checked(
    done: subprocess.CompletedProcess[str],
    *,
    code: int,
    kind: str,
    names: str | tuple[str, ...],
) -> dict[str, Any]:
    """The JSON error of the finished ``zephon --json`` command ``done``, checked."""
    where = f"{done.args}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert "Traceback" not in done.stderr + done.stdout, where
    error = json.loads(done.stdout)["error"]
    assert (done.returncode, error["kind"]) == (code, kind), where
    assert_names(error["message"], names)
    return error


def assert_names(message: str, names: str | tuple[str, ...]) -> None:
    """The ``message`` of a refusal names one of ``names`` (the key, file or value)."""
    names = (names,) if isinstance(names, str) else names
    assert "Traceback" not in message, message
    assert not names or any(name in message for name in names), (names, message)


# -- Experiments with one mistake each ---------------------------------------------------


def schema_leaves(schema: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Every typed field of an experiment's JSON Schema below sections: (dotted key,
    JSON type); fields of any type (``Any``) are left out."""
    leaves = []
    for name, field in schema["properties"].items():
        key = f"{prefix}{name}"
        if "properties" in field:
            leaves += schema_leaves(field, f"{key}.")
            continue
        kinds = field.get("type") or [
            option["type"] for option in field.get("anyOf", []) if option.get("type") != "null"
        ]
        kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds if k != "null"]
        if kinds:
            leaves.append((key, kinds[0]))
    return leaves


LEAVES = schema_leaves(experiment_json_schema())
"""(key, JSON type) of every typed field of the experiment."""

WRONG_VALUES: dict[str, list[Any]] = {
    "integer": ["many", "1.5x", 1.5, [1], {"n": 1}],
    "number": ["fast", "1e", [1.0], {"x": 1}],
    "boolean": ["maybe", "yess", [True], {"on": 1}],
    "string": [[1, 2], {"x": "y"}],
    "array": ["one", 7, {"x": 1}],
    "object": [[1, 2], "flat", 5],
}
"""Values of another type than a field's, per JSON type, that no conversion makes right."""


@st.composite
def wrong_types(draw: st.DrawFn) -> tuple[str, Any]:
    """A (key, value) giving a typed field a value of a wrong type."""
    key, kind = draw(st.sampled_from(LEAVES))
    return key, draw(st.sampled_from(WRONG_VALUES[kind]))


SECTIONS = {"": "", **{f"{name}.": name for name in ("model", "data", "train", "eval")}}
SECTIONS.update({"resources.": "resources", "tracking.": "tracking"})


@st.composite
def unknown_keys(draw: st.DrawFn) -> tuple[str, Any]:
    """A (key, value) naming a key the experiment (or its section) does not have."""
    prefix = draw(st.sampled_from(sorted(SECTIONS)))
    known = {key for key, _ in LEAVES} | set(SECTIONS.values())
    name = draw(st.from_regex(r"[a-z][a-z_]{2,10}", fullmatch=True))
    key = f"{prefix}{name}"
    if key in known or key.startswith("data.mixture"):
        key = f"{prefix}x_{name}"
    return key, draw(st.sampled_from([1, "on", [1]]))


NEGATIVE = st.integers(-(10**6), 0)
OUT_OF_RANGE: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("name", st.sampled_from(["a b", "x/y", "", "run!", "é"])),
    *(
        (f"data.{key}", NEGATIVE)
        for key in ("lanes", "global_batch_size", "seq_len", "chunk_tokens", "flush_every")
    ),
    ("data.shard_window", NEGATIVE),
    *(
        (f"data.{key}", st.integers(-(10**6), -1))
        for key in ("seed", "shuffle_seed", "shuffle_buffer", "holdout_bytes", "overlap_ngram")
    ),
    ("data.holdout_docs", st.integers(-100, 1)),
    ("data.global_batch_size", st.sampled_from([1, 2, 3, 5, 6, 7, 9, 10, 13])),
    ("data.exhausted", st.sampled_from(["loop", "again", "Repeat", "halt"])),
    ("data.order", st.sampled_from(["v3", "v0", "latest", "V2"])),
    ("data.compared", st.sampled_from(["mixtures", "dataset:", "dataset:zzz", "weights"])),
    ("data.mixture", st.sampled_from([{"a": -1.0}, {"a": math.inf}, {"a": 0.0}, {"zz": 1.0}])),
    ("data.mixture", st.builds(lambda w: {"a": w}, st.floats(max_value=-1e-9))),
    ("data.datasets", st.sampled_from([{}, {"a b": ["a.jsonl"]}, {"a": []}])),
    ("data.datasets", st.builds(lambda n: {"a": [f"missing/{n}.jsonl"]}, st.integers(0, 99))),
    ("data.eval_sets", st.sampled_from([{"a": ["a.jsonl"]}, {"ev": ["missing.jsonl"]}])),
    ("data.tokenizer", st.sampled_from(["no/such/tokenizer.json", "gpt9", "tok.json;eos=x"])),
    *((f"train.{key}", NEGATIVE) for key in ("steps", "microbatch_size", "checkpoint_interval")),
    ("train.keep_checkpoints", st.sampled_from([1, -1, -5])),
    ("train.lr", st.sampled_from([0.0, -0.1, math.inf, -math.inf])),
    ("train.warmup_steps", st.sampled_from([-1, 21, 1000])),
    ("train.decay_ratio", st.sampled_from([0.0, -0.5, 1.5, 2.0])),
    ("train.decay_type", st.sampled_from(["exp", "Linear", "step"])),
    ("train.min_lr_factor", st.sampled_from([-0.1, 1.1, 7.0])),
    ("train.precision", st.sampled_from(["fp16", "float64", "half", "bf16x"])),
    ("train.init_from", st.sampled_from(["no/such/checkpoint", "missing-step-10"])),
    ("eval.interval", NEGATIVE),
    ("eval.task_limit", NEGATIVE),
    ("eval.task_dir", st.sampled_from(["no/such/tasks", "missing"])),
    ("resources.dp", st.sampled_from([0, -1, -4, 3, 5, 6, 7, 8, 16])),
    ("resources.device", st.sampled_from(["gpu", "tpu", "CUDA", "cuda:0"])),
    ("resources.launcher", st.sampled_from(["ssh", "mpi", "Local", "k8s"])),
    ("resources.nodes", NEGATIVE),
    ("resources.nodes", st.integers(2, 64)),  # a local launch runs on one node
    ("resources.node_rank", st.sampled_from([-1, 1, 5])),
    ("resources.max_procs", NEGATIVE),
    ("resources.gpu_ids", st.sampled_from([[], [-1], [0, -2]])),
    ("resources.timeout_s", NEGATIVE),
    ("model.args", st.sampled_from([["--training.steps=5"], ["--checkpoint.interval", "3"]])),
    ("tracking.uri", st.sampled_from(["foo://bar", "ftp://h/x", "mlruns", "file:///tmp/mlruns"])),
]
"""(key, values) of values of the right type that the experiment cannot work with."""


@st.composite
def out_of_range(draw: st.DrawFn) -> tuple[str, Any]:
    """A (key, value) of the right type that cannot work."""
    key, values = draw(st.sampled_from(OUT_OF_RANGE))
    return key, draw(values)


MULTINODE_OVER_LANES = {
    "resources.launcher": "multinode",
    "resources.rdzv_endpoint": "localhost:29400",
}
"""With ``resources.nodes`` above ``data.lanes``: more nodes than lanes to train."""


def mistakes() -> st.SearchStrategy[tuple[str, Any]]:
    """One mistake in an experiment: (key, value)."""
    return st.one_of(wrong_types(), unknown_keys(), out_of_range())


def with_value(experiment: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``experiment`` with the dotted ``key`` set to ``value``."""
    copy = json.loads(json.dumps(experiment))
    *sections, last = key.split(".")
    node = copy
    for section in sections:
        node = node.setdefault(section, {})
    node[last] = value
    return copy


def leaf_name(key: str) -> str:
    """The last part of a dotted key: what a refusal must name at least."""
    return key.rsplit(".", 1)[-1]


SERVICE_KEYS = ("tracking.", "runs_root", "data.cache_dir")
"""Keys the job service sets itself: a spec's mistake there is a key it refuses apart."""


def spec_with_a_mistake(
    good: dict[str, Any], key: str, value: Any
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A job service's spec: ``good`` with ``key`` set to ``value`` (an unknown key of
    ``train`` instead of a key the service sets), and what its refusal may name."""
    if key.startswith(SERVICE_KEYS):
        key = f"train.{leaf_name(key)}x"
    spec = with_value(good, key, value)
    if key == "data.datasets" and value == {}:
        spec["data"]["datasets"] = {}
    names = (
        leaf_name(key),
        str(value),
        *([str(k) for k in value] if isinstance(value, dict) else []),
    )
    return spec, names


BROKEN_YAML = [
    "data: [1, 2\n",
    "data: {datasets: {a: [a.jsonl]}\n",
    "name: 'unterminated\n",
    "data:\n\t lanes: 4\n",
    "train: *nowhere\n",
    "data:\n  lanes: 4\n lanes: 5\n",
    "a: b: c\n",
]


def broken_experiment_texts() -> st.SearchStrategy[str]:
    """The text of an experiment file that does not parse, or parses to no mapping."""
    return st.one_of(
        st.sampled_from(BROKEN_YAML),
        st.builds(
            lambda t, k: t[: max(1, k)], st.just('{"data": {"lanes": 4}}'), st.integers(1, 21)
        ),
        st.sampled_from(["- a\n- b\n", "42\n", "just words\n", "null\n", "[]\n"]),
    )
