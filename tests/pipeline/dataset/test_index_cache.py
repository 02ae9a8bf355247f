"""The index cache: shard fingerprints and indexes reused across Datasets, rebuilt when damaged."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pipeline import formats
from tests.support.shard_files import (
    make_dataset,
    set_old_mtime,
    write_jsonl_lines,
    write_shards,
)


def test_index_cache_is_reused_and_invalidated(tmp_path: Path, monkeypatch) -> None:
    builds: list[Path] = []
    hashes: list[str] = []
    real_build = formats.JsonlFormat.build_index
    real_digest = hashlib.file_digest

    def counting_build(self, path, field):
        builds.append(path)
        return real_build(self, path, field)

    def counting_digest(f, name):
        hashes.append(f.name)
        return real_digest(f, name)

    monkeypatch.setattr(formats.JsonlFormat, "build_index", counting_build)
    monkeypatch.setattr(hashlib, "file_digest", counting_digest)
    paths = [write_jsonl_lines(tmp_path / f"{i}.jsonl", [{"text": f"t{i}"}] * 3) for i in range(3)]
    set_old_mtime(*paths)

    first = make_dataset(tmp_path, str(tmp_path / "*.jsonl"))
    assert first.num_records == 9
    assert (len(builds), len(hashes)) == (3, 3)

    second = make_dataset(tmp_path, str(tmp_path / "*.jsonl"))  # neither re-hashed nor re-indexed
    assert second.fingerprint == first.fingerprint
    assert second.read_texts([8, 0]) == ["t2", "t0"]
    assert (len(builds), len(hashes)) == (3, 3)

    write_jsonl_lines(paths[1], [{"text": "new"}])  # fresh mtime: hashed, not stat-cached
    third = make_dataset(tmp_path, str(tmp_path / "*.jsonl"))
    assert third.read_texts([3]) == ["new"]
    assert third.num_records == 7
    assert (len(builds), len(hashes)) == (4, 4)
    _ = make_dataset(tmp_path, str(tmp_path / "*.jsonl")).num_records
    assert (len(builds), len(hashes)) == (4, 5)  # recently modified: re-hashed, index reused


def test_damaged_cache_entries_are_rebuilt(tmp_path: Path) -> None:
    expected = write_shards(tmp_path, "jsonl.gz", shards=1)
    path = tmp_path / "part-00.jsonl.gz"
    first = make_dataset(tmp_path, path)
    assert first.num_records == len(expected)
    cache = tmp_path / "cache"
    for index_file in (cache / "index").iterdir():  # the table and its metadata
        index_file.write_bytes(b"garbage")
    for copy in (cache / "decompressed").iterdir():
        copy.unlink()
    again = make_dataset(tmp_path, path)
    assert again.read_texts([3, 1]) == [expected[3], expected[1]]
    assert again.fingerprint == first.fingerprint
