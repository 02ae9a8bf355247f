"""Generated mistakes given to ``zephon`` in process: experiment files with a wrong type, an
unknown key or a value out of range, overrides, files that do not parse, damaged datasets
of every format, bad tracking URIs. Each is exit 2 (``invalid``) with a message naming the
key, file or value, no traceback, and nothing written where the command ran.

``pytest -s`` prints how many inputs each face was given."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import zephon_in_process
from tests.support.mistakes import (
    FEW,
    MANY,
    MULTINODE_OVER_LANES,
    TRIED,
    broken_experiment_texts,
    leaf_name,
    mistakes,
    refused_by_zephon,
    with_value,
)

TEXTS = [f"record {i}: " + "words of a small document " * 8 for i in range(40)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the commands run: one good dataset, ``a.jsonl``; the shard index cache lies
    outside it (a cache of the data, kept by valid plans too)."""
    work = tmp_path_factory.mktemp("work")
    (work / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    yield work
    print(f"\nmistakes tried by face: {dict(sorted(TRIED.items()))}")


@pytest.fixture(scope="module")
def experiment(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A valid experiment over ``a.jsonl``: ``zephon plan`` accepts it, exit 0."""
    cache = tmp_path_factory.mktemp("cache")
    good = {"data": {"datasets": {"a": ["a.jsonl"]}, "cache_dir": str(cache)}}
    (folder / "good.yaml").write_text(yaml.safe_dump(good))
    done = zephon_in_process(folder, "plan", "-c", "good.yaml", "--json")
    assert done.returncode == 0 and not (folder / "runs").exists(), done.stdout + done.stderr
    return good


def names_of(key: str, value: Any) -> tuple[str, ...]:
    """What a refusal of ``key: value`` may name: the key, or the value (a mapping's keys)."""
    values = [str(k) for k in value] if isinstance(value, dict) else [str(value)]
    return (leaf_name(key), *values)


@MANY
@given(mistake=mistakes())
def test_an_experiment_file_with_a_mistake(
    mistake: tuple[str, Any], folder: Path, experiment: dict[str, Any]
) -> None:
    key, value = mistake
    bad = with_value(experiment, key, value)
    if key == "resources.nodes" and isinstance(value, int) and value > 4:
        bad = {**bad, "resources": {**bad["resources"], **_multinode()}}
    (folder / "bad.yaml").write_text(yaml.safe_dump(bad))
    refused_by_zephon("cli plan -c", folder, "plan", "-c", "bad.yaml", names=names_of(key, value))


def _multinode() -> dict[str, str]:
    return {k.split(".")[1]: v for k, v in MULTINODE_OVER_LANES.items()}


def override(key: str, value: Any) -> str:
    """``key=value`` as an override writes it (JSON flow style is Hydra's too)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return f"{key}={text}"


@MANY
@given(
    # an override merges a mapping into the experiment's: {} changes nothing
    mistake=mistakes().filter(lambda m: m[1] not in ("", {})),
    options=st.sampled_from([[], ["--dp", "2"]]),
)
def test_an_override_with_a_mistake(
    mistake: tuple[str, Any], options: list[str], folder: Path, experiment: dict[str, Any]
) -> None:
    key, value = mistake
    if key == "resources.dp" and options:
        options = []  # --dp would stand in for it
    refused_by_zephon(
        "cli plan key=value",
        folder,
        "plan",
        "-c",
        "good.yaml",
        override(key, value),
        *options,
        names=names_of(key, value),
    )


@FEW
@given(
    word=st.sampled_from(
        [
            "train.steps=[1,2",
            "train.steps={a:",
            "train.steps=1,2",
            "+train.extra=1",
            "~train.steps=1",
            "train.steps==",
            "data.mixture=1",
            "data=mini",
            "model=mini",
            "data.datasets.a=x.jsonl",
            "=5",
            "train..steps=3",
        ]
    ),
)
def test_an_override_that_cannot_be_read(word: str, folder: Path, experiment: Any) -> None:
    refused_by_zephon("cli plan key=value", folder, "plan", "-c", "good.yaml", word, names=word)


@FEW
@given(dp=st.sampled_from(["0", "-1", "3", "5", "8", "x", "1.5", ""]))
def test_a_dp_option_that_cannot_run(dp: str, folder: Path, experiment: Any) -> None:
    refused_by_zephon("cli plan --dp", folder, "plan", "-c", "good.yaml", "--dp", dp, names="dp")


@FEW
@given(
    text=broken_experiment_texts(),
    suffix=st.sampled_from([".yaml", ".json", ".yml"]),
)
def test_an_experiment_file_that_does_not_parse(text: str, suffix: str, folder: Path) -> None:
    name = f"broken{suffix}"
    (folder / name).write_text(text)
    refused_by_zephon("cli plan -c", folder, "plan", "-c", name, names=(name, "experiment"))


def _jsonl(records: list[Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _parquet(column: str) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({column: TEXTS}), sink)
    return sink.getvalue()


GOOD_BYTES = {
    "jsonl": _jsonl([{"text": t} for t in TEXTS]),
    "jsonl.gz": gzip.compress(_jsonl([{"text": t} for t in TEXTS])),
    "jsonl.zst": zstandard.ZstdCompressor().compress(_jsonl([{"text": t} for t in TEXTS])),
    "parquet": _parquet("text"),
    "txt": "\n".join(TEXTS).encode(),
}
DAMAGES = {  # per format: damaged contents no record can be read from
    "jsonl": [
        b"",
        b"\xff\xfe\x00\x81 not utf-8",
        _jsonl([[1, 2], 3, "s"]),
        _jsonl([{"body": "x"}]),
    ],
    "jsonl.gz": [b"", b"not gzip at all", _jsonl([{"text": "plain"}])],
    "jsonl.zst": [b"", b"not zstd", _jsonl([{"text": "plain"}])],
    "parquet": [b"", b"PAR1garbagePAR1", _parquet("body"), _jsonl([{"text": "x"}])],
    "txt": [b"", b"\xff\xfe\x00\x81", b"\x80" * 50],
}


@st.composite
def damaged_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(format, bytes) of a data file no record can be read from: garbage, emptied, the
    wrong content for its name, or a compressed or Parquet file cut short."""
    fmt = draw(st.sampled_from(sorted(GOOD_BYTES)))
    binary = fmt in ("jsonl.gz", "jsonl.zst", "parquet")
    cut = st.builds(lambda k: GOOD_BYTES[fmt][:k], st.integers(1, len(GOOD_BYTES[fmt]) - 1))
    junk = st.binary(min_size=1, max_size=64).map(lambda b: b"\xff" + b.replace(b"\n", b""))
    choices = [st.sampled_from(DAMAGES[fmt])] + ([cut, junk] if binary else [junk])
    return fmt, draw(st.one_of(choices))


@FEW
@given(damaged=damaged_files(), beside_a_good_one=st.booleans())
def test_a_damaged_dataset_file(
    damaged: tuple[str, bytes], beside_a_good_one: bool, folder: Path, experiment: Any
) -> None:
    fmt, content = damaged
    name = f"damaged.{fmt}"
    (folder / name).write_bytes(content)
    datasets = {"d": [name], **({"a": ["a.jsonl"]} if beside_a_good_one else {})}
    (folder / "bad.yaml").write_text(
        yaml.safe_dump(with_value(experiment, "data.datasets", datasets))
    )
    refused_by_zephon("cli plan dataset", folder, "plan", "-c", "bad.yaml", names=(name, "'d'"))


BAD_URIS = [
    "foo://bar",
    "ftp://host/store",
    "s3://bucket/mlflow",
    "mlruns",
    "./mlruns",
    "file:///tmp/mlruns",
    "http://[::1",
    "sqlite:///no/such/folder/mlflow.db",
    "sqlite:///missing.db",
]


@FEW
@given(
    command=st.sampled_from(["compare", "fit", "propose"]),
    uri=st.sampled_from(BAD_URIS),
    runs=st.sampled_from([["--experiment", "x"], ["--sweep", "s"], ["r1", "r2"]]),
)
def test_a_tracking_uri_that_names_no_store(
    command: str, uri: str, runs: list[str], folder: Path
) -> None:
    refused_by_zephon(
        f"cli {command} --tracking-uri",
        folder,
        command,
        *runs,
        "--tracking-uri",
        uri,
        names=(uri, uri.rpartition("///")[2]),  # a relative path is named made absolute
    )
