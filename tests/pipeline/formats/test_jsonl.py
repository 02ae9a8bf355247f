"""JSONL shards: lines across read blocks, CRLF, no final newline, any text field."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import orjson
import pytest

from pipeline.formats import jsonl
from tests.support.shard_files import (
    make_dataset,
    write_jsonl_lines,
)


def test_lines_split_across_read_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl, "READ_BLOCK_BYTES", 7)  # far smaller than a line
    texts = ["a", "b" * 40, "ç" * 5, "d"]
    raw = b"".join(orjson.dumps({"text": t}) + b"\r\n" for t in texts[:3])
    (tmp_path / "x.jsonl").write_bytes(raw + orjson.dumps({"text": texts[3]}))  # no final newline
    ds = make_dataset(tmp_path, tmp_path / "x.jsonl")
    assert ds.read_texts([3, 0, 2, 1]) == [texts[3], texts[0], texts[2], texts[1]]


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
    write_jsonl_lines(
        tmp_path / "code.jsonl", [{"path": str(i), "content": t} for i, t in enumerate(texts)]
    )
    ds = make_dataset(tmp_path, tmp_path / "code.jsonl", field="content")
    assert ds.num_records == len(texts)
    assert ds.record_bytes.tolist() == [len(t.encode()) for t in ds.read_texts(range(len(texts)))]
    assert ds.read_texts(range(len(texts))) == texts
