"""Tests of the local multi-domain corpus builder (small capped builds, no network)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import zstandard

from demo import local_corpus
from demo.local_corpus import MANIFEST_NAME, build_local_corpus
from pipeline.errors import ConfigError

CAP = 200_000


def _records(path: Path) -> list[dict]:
    name = path.name
    if name.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    if name.endswith(".jsonl.zst"):
        data = zstandard.ZstdDecompressor().decompress(path.read_bytes())
    elif name.endswith(".jsonl.gz"):
        data = gzip.decompress(path.read_bytes())
    else:
        raise AssertionError(f"unexpected shard {path}")
    return [orjson.loads(line) for line in data.splitlines()]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Path]]]:
    out = tmp_path_factory.mktemp("corpus")
    return out, build_local_corpus(out, max_bytes_per_domain=CAP)


def test_domains_non_empty_and_readable(corpus: tuple[Path, dict[str, list[Path]]]) -> None:
    _, shards = corpus
    assert sorted(shards) in (["code", "docs", "i18n"], ["code", "docs", "licenses"])
    for domain, paths in shards.items():
        assert paths, domain
        records = [r for p in paths for r in _records(p)]
        assert records, domain
        assert all(isinstance(r["text"], str) and r["text"].strip() for r in records), domain
        assert len({r["id"] for r in records}) == len(records), domain


def test_cap_and_manifest(corpus: tuple[Path, dict[str, list[Path]]]) -> None:
    out, shards = corpus
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert set(manifest["domains"]) == set(shards)
    for domain, paths in shards.items():
        info = manifest["domains"][domain]
        records = [r for p in paths for r in _records(p)]
        assert info["files"] == len(paths)
        assert info["records"] == len(records)
        assert info["bytes"] == sum(len(r["text"].encode()) for r in records)
        # Hard cap unless a single first record is larger than it.
        assert info["bytes"] <= CAP or info["records"] == 1


def test_deterministic_and_idempotent(
    corpus: tuple[Path, dict[str, list[Path]]], tmp_path: Path
) -> None:
    out, shards = corpus
    again = build_local_corpus(tmp_path, max_bytes_per_domain=CAP)
    assert _tree(tmp_path) == _tree(out)
    assert {d: [p.relative_to(tmp_path) for p in ps] for d, ps in again.items()} == {
        d: [p.relative_to(out) for p in ps] for d, ps in shards.items()
    }
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert build_local_corpus(tmp_path, max_bytes_per_domain=CAP) == again
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == mtimes


def test_rebuild_on_other_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Many small shards first, so the rebuild has stale shards to remove.
    monkeypatch.setattr(local_corpus, "SHARD_TARGET_BYTES", 5_000)
    small = build_local_corpus(tmp_path, max_bytes_per_domain=50_000)
    small_records = sum(len(_records(p)) for p in small["code"])
    assert len(small["code"]) > 1
    monkeypatch.undo()
    bigger = build_local_corpus(tmp_path, max_bytes_per_domain=CAP)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["params"]["max_bytes_per_domain"] == CAP
    assert sum(len(_records(p)) for p in bigger["code"]) > small_records
    on_disk = sorted(p for p in tmp_path.rglob("shard-*"))
    assert on_disk == sorted(p for ps in bigger.values() for p in ps)


def test_licenses_replace_i18n_without_gettext_catalogs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_corpus, "_i18n_records", lambda: iter(()))
    shards = build_local_corpus(tmp_path, max_bytes_per_domain=50_000)
    assert sorted(shards) == ["code", "docs", "licenses"]
    assert [r for p in shards["licenses"] for r in _records(p) if r["text"].strip()]


def test_split_cuts_long_sources_at_line_boundaries() -> None:
    text = "".join(f"line {i} ünïcode\n" for i in range(100)) + "x" * 500
    parts = list(local_corpus._split([{"id": "a", "text": text}, {"id": "b", "text": "ok"}], 200))
    assert "".join(p["text"] for p in parts[:-1]) == text
    assert [p["id"] for p in parts[:2]] == ["a#0", "a#1"] and parts[-1] == {"id": "b", "text": "ok"}
    # Every part fits, except the one overlong line, which stays whole.
    assert all(len(p["text"].encode()) <= 200 for p in parts if not p["text"].startswith("x"))


def test_rejects_non_positive_cap(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_local_corpus(tmp_path, max_bytes_per_domain=0)
