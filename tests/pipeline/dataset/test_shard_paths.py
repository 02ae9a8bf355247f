"""A dataset's paths: files, globs and ``~`` resolved into sorted, de-duplicated shards."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.dataset.shard_paths import resolve_shards
from pipeline.errors import ConfigError
from tests.support.shard_files import (
    make_dataset,
    write_jsonl_lines,
)


def test_globs_resolve_sorted_and_deduplicated(tmp_path: Path, monkeypatch) -> None:
    for rel in ["b/2.jsonl", "a/x/1.jsonl", "a/0.jsonl", "c.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl_lines(tmp_path / rel, [{"text": rel}])
    monkeypatch.setenv("HOME", str(tmp_path))
    ds = make_dataset(
        tmp_path,
        ["~/**/*.jsonl", str(tmp_path / "a" / "0.jsonl"), str(tmp_path / "a" / ".." / "c.txt")],
    )
    assert ds.shards == [tmp_path / p for p in ["a/0.jsonl", "a/x/1.jsonl", "b/2.jsonl", "c.txt"]]
    assert ds.read_texts([0, 1, 2]) == ["a/0.jsonl", "a/x/1.jsonl", "b/2.jsonl"]


@pytest.mark.parametrize(
    ("paths", "match"),
    [
        ("missing/*.jsonl", "matches no files"),
        ("missing.jsonl", "does not exist"),
        (".", "is a directory"),
        ([], "no paths"),
    ],
)
def test_bad_paths_raise_config_error_naming_the_dataset(
    tmp_path: Path, monkeypatch, paths, match: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=rf"dataset 'ds': .*{match}"):
        resolve_shards("ds", paths)
