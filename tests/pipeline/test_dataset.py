"""Dataset: formats, path resolution, bad input, fingerprints, the index cache, concurrent reads."""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import random
import sysconfig
import threading
import warnings
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline import dataset as dataset_module
from pipeline import formats
from pipeline.dataset import Dataset, RecordPointer
from pipeline.errors import ConfigError, DataError

FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "txt"]
LONG_AGO_NS = 1_000_000_000 * 1_000_000_000  # an mtime old enough for the stat cache


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "home"))


def texts_for(shard: int, n: int) -> list[str]:
    """Varied texts: ASCII, multi-byte UTF-8, newlines, quotes."""
    return [f"shard {shard} rec {i} " + 'héllo ✓ 🎉\n"q"\t' * (i % 4) + "x" * i for i in range(n)]


def write_jsonl(path: Path, lines: list[bytes | dict]) -> Path:
    raw = b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in lines)
    if path.name.endswith(".gz"):
        raw = gzip.compress(raw)
    elif path.name.endswith(".zst"):
        raw = zstd_frames(raw)
    path.write_bytes(raw)
    return path


def zstd_frames(raw: bytes) -> bytes:
    """Two streamed frames without a content size, as many real .zst files are."""
    half = len(raw) // 2
    frames = []
    for part in (raw[:half], raw[half:]):
        buf = _Sink()
        with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
            w.write(part)
        frames.append(bytes(buf.data))
    assert zstandard.frame_content_size(frames[0]) == -1
    return b"".join(frames)


class _Sink:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> int:
        self.data += b
        return len(b)


def write_shards(root: Path, fmt: str, shards: int = 3, per_shard: int = 25) -> list[str]:
    """Shards of one format; returns all texts in global (sorted shard) order."""
    expected = []
    for s in range(shards):
        texts = texts_for(s, per_shard if fmt != "txt" else 1)
        expected += texts
        path = root / f"part-{s:02d}.{fmt}"
        if fmt == "parquet":
            pq.write_table(
                pa.table({"text": texts, "id": list(range(len(texts)))}), path, row_group_size=7
            )
        elif fmt == "txt":
            path.write_text(texts[0], encoding="utf-8")
        else:
            write_jsonl(path, [{"id": i, "text": t} for i, t in enumerate(texts)])
    return expected


def make(tmp_path: Path, paths, **kwargs) -> Dataset:
    return Dataset(kwargs.pop("name", "ds"), paths, cache_dir=tmp_path / "cache", **kwargs)


def set_old_mtime(*paths: Path) -> None:
    for p in paths:
        os.utime(p, ns=(LONG_AGO_NS, LONG_AGO_NS))


# -- formats ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reads_right_texts_in_random_order(tmp_path: Path, fmt: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    expected = write_shards(data, fmt)
    ds = make(tmp_path, str(data / f"*.{fmt}"))
    assert ds.num_records == len(expected)
    assert ds.record_bytes.dtype == np.int64
    assert ds.record_bytes.tolist() == [len(t.encode()) for t in expected]
    order = list(range(len(expected))) * 2
    random.Random(0).shuffle(order)
    assert ds.read_texts(order) == [expected[i] for i in order]
    assert ds.read_texts([]) == []
    assert ds.report()["skipped"] == {}


def test_pointer_maps_global_index_across_empty_shards(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": "a0"}, {"text": "a1"}])
    (tmp_path / "b.jsonl").write_bytes(b"")
    write_jsonl(tmp_path / "c.jsonl", [{"text": "c0"}])
    ds = make(tmp_path, str(tmp_path / "*.jsonl"), name="mix.v1")
    assert [ds.pointer(key).as_tuple() for key in ds.global_keys(range(3))] == [
        ("mix.v1", 0, 0),
        ("mix.v1", 0, 1),
        ("mix.v1", 2, 0),
    ]
    assert ds.pointer(2 << 32) == RecordPointer("mix.v1", 2, 0)
    with pytest.raises(IndexError):
        ds.global_keys([3])
    with pytest.raises(IndexError):
        ds.read_texts([0, -1])
    with pytest.raises(IndexError):
        ds.read_records([(2 << 32) | 1])  # shard 2 has one record
    assert ds.report()["empty_shards"] == 1


def test_lines_split_across_read_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "_BLOCK", 7)  # far smaller than a line
    texts = ["a", "b" * 40, "ç" * 5, "d"]
    raw = b"".join(orjson.dumps({"text": t}) + b"\r\n" for t in texts[:3])
    (tmp_path / "x.jsonl").write_bytes(raw + orjson.dumps({"text": texts[3]}))  # no final newline
    ds = make(tmp_path, tmp_path / "x.jsonl")
    assert ds.read_texts([3, 0, 2, 1]) == [texts[3], texts[0], texts[2], texts[1]]


def test_reads_survive_handle_and_row_group_cache_eviction(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dataset_module, "_MAX_OPEN_SHARDS", 2)
    monkeypatch.setattr(
        dataset_module, "ParquetFormat", functools.partial(formats.ParquetFormat, cache_bytes=1)
    )
    (tmp_path / "t").mkdir()
    expected = write_shards(tmp_path, "parquet") + write_shards(tmp_path / "t", "txt", shards=6)
    ds = make(tmp_path, [str(tmp_path / "*.parquet"), str(tmp_path / "t" / "*.txt")])
    order = list(range(len(expected))) * 2
    random.Random(2).shuffle(order)
    assert ds.read_texts(order) == [expected[i] for i in order]


def test_stdlib_sources_round_trip(tmp_path: Path) -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for path in sorted(stdlib.glob("*.py"))[:60]:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    texts = [t for t in texts if t]
    assert len(texts) > 30
    write_jsonl(
        tmp_path / "code.jsonl", [{"path": str(i), "content": t} for i, t in enumerate(texts)]
    )
    ds = make(tmp_path, tmp_path / "code.jsonl", field="content")
    assert ds.num_records == len(texts)
    assert ds.record_bytes.tolist() == [len(t.encode()) for t in ds.read_texts(range(len(texts)))]
    assert ds.read_texts(range(len(texts))) == texts


# -- paths and configuration -----------------------------------------------------------------


def test_globs_resolve_sorted_and_deduplicated(tmp_path: Path, monkeypatch) -> None:
    for rel in ["b/2.jsonl", "a/x/1.jsonl", "a/0.jsonl", "c.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(tmp_path / rel, [{"text": rel}])
    monkeypatch.setenv("HOME", str(tmp_path))
    ds = make(
        tmp_path,
        ["~/**/*.jsonl", str(tmp_path / "a" / "0.jsonl"), str(tmp_path / "a" / ".." / "c.txt")],
    )
    assert ds.shards == [tmp_path / p for p in ["a/0.jsonl", "a/x/1.jsonl", "b/2.jsonl", "c.txt"]]
    assert ds.read_texts([0, 1, 2]) == ["a/0.jsonl", "a/x/1.jsonl", "b/2.jsonl"]


def test_construction_reads_nothing(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    ds = make(tmp_path, tmp_path / "a.jsonl")
    assert "0 indexed" in repr(ds)
    assert ds.shards == [tmp_path / "a.jsonl"]
    assert ds.manifest_fingerprint  # the plan's metadata: a stat, no read
    assert not (tmp_path / "cache").exists()
    assert ds.num_records == 1
    assert "1 indexed" in repr(ds)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"paths": "missing/*.jsonl"}, "matches no files"),
        ({"paths": "missing.jsonl"}, "does not exist"),
        ({"paths": "."}, "is a directory"),
        ({"paths": []}, "no paths"),
        ({"paths": "notes.txt.gz"}, "only compressed JSONL"),
        ({"name": ""}, "name"),
        ({"name": "a b"}, "name"),
        ({"field": ""}, "field"),
        ({"exhausted": "loop"}, "exhausted"),
        ({"on_bad_record": "ignore"}, "on_bad_record"),
    ],
)
def test_bad_configuration_raises_config_error(tmp_path: Path, monkeypatch, kwargs, match) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "ok.jsonl", [{"text": "x"}])
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"hello"))
    args = {"name": "ds", "paths": "ok.jsonl", **kwargs}
    with pytest.raises(ConfigError, match=match):
        Dataset(args.pop("name"), args.pop("paths"), cache_dir=tmp_path / "cache", **args)


# -- bad input --------------------------------------------------------------------------------

BAD_LINES: dict[str, bytes] = {
    "malformed_json": b'{"text": "unterminated',
    "not_an_object": b'["text", "a list"]',
    "missing_field": b'{"body": "no text field"}',
    "invalid_utf8": b'{"text": "caf\xe9"}',
    "empty_document": b'{"text": ""}',
}


def test_bad_records_are_skipped_counted_and_warned(tmp_path: Path) -> None:
    lines: list[bytes | dict] = [{"text": "good 0"}, b"", b"  \t"]
    for reason, line in BAD_LINES.items():
        lines += [line] * (5 if reason == "malformed_json" else 1)
    lines += [b'{"text": null}', b'{"text": 3}', {"text": "good 1"}]
    path = write_jsonl(tmp_path / "a.jsonl", lines)
    (tmp_path / "b.txt").write_bytes(b"line one\nbad \xff byte")
    ds = make(tmp_path, [path, tmp_path / "b.txt"])
    # One warning per dataset, at the first shard with bad records; report() counts them all.
    with pytest.warns(UserWarning, match=r"skipped 11 bad records .* in .*a\.jsonl") as caught:
        assert ds.num_records == 2
    assert len(caught) == 1
    assert ds.read_texts([1, 0]) == ["good 1", "good 0"]
    report = ds.report()
    assert report["skipped"] == {
        "blank_line": 2,
        "malformed_json": 5,
        "not_an_object": 1,
        "missing_field": 3,
        "invalid_utf8": 2,
        "empty_document": 1,
    }
    assert report["examples"]["malformed_json"] == [f"{path}:{n}" for n in (4, 5, 6)]
    assert report["examples"]["missing_field"] == [f"{path}:{n}" for n in (10, 13, 14)]
    assert report["examples"]["invalid_utf8"] == [f"{path}:11", f"{tmp_path / 'b.txt'}:2"]
    assert report["empty_shards"] == 1
    assert (report["records"], report["shards"], report["shards_indexed"]) == (2, 2, 2)


def test_blank_lines_alone_are_silent_even_in_error_mode(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [b"", {"text": "x"}, b"\r"])
    ds = make(tmp_path, path, on_bad_record="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.read_texts([0]) == ["x"]
    assert ds.report()["skipped"] == {"blank_line": 2}


@pytest.mark.parametrize("reason", list(BAD_LINES))
def test_error_mode_names_path_line_and_reason(tmp_path: Path, reason: str) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "ok"}, b"", BAD_LINES[reason]])
    ds = make(tmp_path, path, on_bad_record="error")
    with pytest.raises(DataError, match=rf"{path}:3: .*{reason}.*on_bad_record='skip'"):
        _ = ds.num_records


def test_error_mode_on_invalid_utf8_text_file(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_bytes(b"# title\n\nok\n\x80 bad")
    with pytest.raises(DataError, match=rf"{path}:4: .*invalid_utf8"):
        _ = make(tmp_path, path, on_bad_record="error").num_records


def test_empty_files_are_empty_shards(tmp_path: Path) -> None:
    for name in ["a.jsonl", "b.txt", "c.jsonl.gz", "d.jsonl.zst"]:
        (tmp_path / name).write_bytes(b"")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "e.parquet")
    write_jsonl(tmp_path / "z.jsonl", [{"text": "only"}])
    ds = make(tmp_path, str(tmp_path / "*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.read_texts([0]) == ["only"]
    assert ds.report()["empty_shards"] == 5
    assert ds.pointer(int(ds.global_keys([0])[0])).shard == 5


def test_parquet_bad_rows_and_missing_column(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"text": ["a", None, "", "b"], "n": [1, 2, 3, 4]}),
        tmp_path / "a.parquet",
        row_group_size=3,
    )
    with pytest.warns(UserWarning):
        ds = make(tmp_path, tmp_path / "a.parquet")
        assert ds.read_texts([1, 0]) == ["b", "a"]
    assert ds.report()["skipped"] == {"missing_field": 1, "empty_document": 1}
    assert ds.report()["examples"]["missing_field"] == [f"{tmp_path / 'a.parquet'}:2"]
    with pytest.raises(
        DataError, match=r"no usable records \(1 files; skipped: \{'missing_field': 4\}\)"
    ):
        _ = make(tmp_path, tmp_path / "a.parquet", field="n").num_records


def test_zero_usable_records_is_a_data_error(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"content": "x"}, {"content": "y"}])
    with pytest.raises(DataError, match=r"dataset 'ds' has no usable records .*check `field=`"):
        _ = make(tmp_path, tmp_path / "a.jsonl").num_records


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.jsonl.zst", "a.parquet"])
def test_corrupt_files_raise_data_error_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name == "a.parquet":
        path.write_bytes(b"PAR1 definitely not parquet")
    else:
        write_jsonl(path, [{"text": "x" * 5000 + str(i)} for i in range(50)])
        path.write_bytes(path.read_bytes()[:-20])  # truncated
    with pytest.raises(DataError, match=str(path)):
        _ = make(tmp_path, path, on_bad_record="skip").num_records
    assert not list((tmp_path / "cache").rglob("*.jsonl"))  # no partial copy left behind


# -- fingerprints and the index cache ----------------------------------------------------------


def test_fingerprint_follows_content_not_paths(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(a, [{"text": "one", "body": "1"}, {"text": "two", "body": "2"}])
    write_jsonl(b, [{"text": "three", "body": "3"}])
    first = make(tmp_path, [a, b])
    assert first.shard_fingerprints == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)]

    moved = tmp_path / "moved"
    moved.mkdir()
    a.rename(moved / "a2.jsonl")
    b.rename(moved / "b2.jsonl")
    second = make(tmp_path, str(moved / "*.jsonl"))
    assert second.fingerprint == first.fingerprint
    assert make(tmp_path, [a.parent / "moved" / "a2.jsonl"]).fingerprint != first.fingerprint
    assert make(tmp_path, str(moved / "*.jsonl"), field="body").fingerprint != first.fingerprint

    raw = bytearray((moved / "b2.jsonl").read_bytes())
    raw[raw.index(b"three")] = ord("T")  # same size
    (moved / "b2.jsonl").write_bytes(raw)
    changed = make(tmp_path, str(moved / "*.jsonl"))
    assert changed.fingerprint != first.fingerprint
    assert changed.read_texts([2]) == ["Three"]


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
    paths = [write_jsonl(tmp_path / f"{i}.jsonl", [{"text": f"t{i}"}] * 3) for i in range(3)]
    set_old_mtime(*paths)

    first = make(tmp_path, str(tmp_path / "*.jsonl"))
    assert first.num_records == 9
    assert (len(builds), len(hashes)) == (3, 3)

    second = make(tmp_path, str(tmp_path / "*.jsonl"))  # neither re-hashed nor re-indexed
    assert second.fingerprint == first.fingerprint
    assert second.read_texts([8, 0]) == ["t2", "t0"]
    assert (len(builds), len(hashes)) == (3, 3)

    write_jsonl(paths[1], [{"text": "new"}])  # fresh mtime: hashed, not stat-cached
    third = make(tmp_path, str(tmp_path / "*.jsonl"))
    assert third.read_texts([3]) == ["new"]
    assert third.num_records == 7
    assert (len(builds), len(hashes)) == (4, 4)
    _ = make(tmp_path, str(tmp_path / "*.jsonl")).num_records
    assert (len(builds), len(hashes)) == (4, 5)  # recently modified: re-hashed, index reused


def test_damaged_cache_entries_are_rebuilt(tmp_path: Path) -> None:
    expected = write_shards(tmp_path, "jsonl.gz", shards=1)
    path = tmp_path / "part-00.jsonl.gz"
    first = make(tmp_path, path)
    assert first.num_records == len(expected)
    cache = tmp_path / "cache"
    for index_file in (cache / "index").iterdir():  # the table and its metadata
        index_file.write_bytes(b"garbage")
    for copy in (cache / "decompressed").iterdir():
        copy.unlink()
    again = make(tmp_path, path)
    assert again.read_texts([3, 1]) == [expected[3], expected[1]]
    assert again.fingerprint == first.fingerprint


def test_file_changed_before_first_read_raises(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "one"}, {"text": "two"}])
    ds = make(tmp_path, path)
    assert ds.num_records == 2
    write_jsonl(path, [{"text": "uno"}, {"text": "dos, longer"}])
    with pytest.raises(DataError, match="changed since it was indexed"):
        ds.read_texts([1])


@pytest.mark.parametrize("fmt", ["jsonl", "txt", "parquet"])
def test_file_changed_while_open_raises_naming_the_record(tmp_path: Path, fmt: str) -> None:
    write_shards(tmp_path, fmt, shards=1)
    path = tmp_path / f"part-00.{fmt}"
    ds = make(tmp_path, path)
    last = ds.num_records - 1
    ds.read_texts([0])  # opens the shard
    if fmt == "jsonl":
        write_jsonl(path, [{"body": "x" * 200}] * (last + 1))
    elif fmt == "txt":
        path.write_bytes(b"\xff" * path.stat().st_size)
    else:
        pq.write_table(pa.table({"text": ["short"] * 3}), path)
    with pytest.raises(
        DataError, match=rf"record \('ds', 0, {last}\).*changed since it was indexed"
    ):
        ds.read_texts([last])


def test_concurrent_reads_match_serial(tmp_path: Path) -> None:
    for fmt in ["jsonl", "jsonl.gz", "parquet", "txt"]:
        (tmp_path / fmt).mkdir()
        write_shards(tmp_path / fmt, fmt, shards=4, per_shard=60)
    ds = make(tmp_path, str(tmp_path / "**" / "part-*"))
    n = ds.num_records
    rng = random.Random(1)
    batches = [[rng.randrange(n) for _ in range(rng.randint(1, 20))] for _ in range(400)]
    reference = make(tmp_path, str(tmp_path / "**" / "part-*"))
    serial = [reference.read_texts(b) for b in batches]
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(w: int) -> None:
        try:
            start.wait()
            for i in range(w, len(batches), 4):
                results[i] = ds.read_texts(batches[i])
        except BaseException as e:  # surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [results[i] for i in range(len(batches))] == serial


def test_a_bounded_number_of_indexes_stays_mapped(tmp_path: Path, monkeypatch) -> None:
    """A run that reads 100,000 shards must not hold 100,000 memory maps (the kernel's
    limit is ~65,000): the least recently used indexes are unmapped and mapped again."""
    monkeypatch.setattr(dataset_module, "_MAX_MAPPED_INDEXES", 3)
    for s in range(8):
        write_jsonl(tmp_path / f"s{s}.jsonl", [{"text": f"shard {s} record {i}"} for i in range(5)])
    ds = make(tmp_path, str(tmp_path / "s*.jsonl"))
    keys = [(s << 32) | 2 for s in range(8)] * 2
    assert ds.read_records(keys) == [f"shard {s} record 2" for s in range(8)] * 2
    assert len(ds._mapped) == 3 and ds.report()["shards_indexed"] == 8
    assert [ds.shard_records(s) for s in range(8)] == [5] * 8
    assert ds.record_text_bytes([(7 << 32) | 4, 4]).tolist() == [len("shard 7 record 4")] * 2
