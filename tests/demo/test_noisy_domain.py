"""The local corpus's noisy domain (demo/noisy_domain.py), what ``--curation`` filters: its
junk is what datatrove's FineWeb quality filter drops, carries no copy of the text it is
made from, and is built deterministically, once."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from demo.noisy_domain import (
    JUNK_KINDS,
    MANIFEST_NAME,
    build_noisy_domain,
    junk_record,
    noisy_records,
)
from pipeline.errors import ConfigError
from pipeline.processing.datatrove_filter import DatatroveFilter
from pipeline.processing.step import StepKind

CLEAN = [
    "The quick brown fox jumps over the lazy dog.\nIt was not amused by the fox at all.\n"
    "Dogs and foxes rarely agree on anything, as everyone knows.\n",
    "A function returns a value to its caller.\nArguments are evaluated before the call.\n"
    "Keyword arguments follow positional ones; defaults are evaluated once.\n",
    "Modules are imported once per interpreter.\nA second import finds the module cached.\n"
    "Reloading is possible, though rarely what you want.\n",
]


def _shard_records(paths: list[Path]) -> list[dict]:
    return [
        json.loads(line)
        for p in paths
        for line in gzip.decompress(p.read_bytes()).split(b"\n")
        if line
    ]


def test_fineweb_s_filter_drops_every_kind_of_junk_and_keeps_the_clean_records() -> None:
    fineweb = DatatroveFilter(StepKind.FINEWEB_QUALITY, {})
    for text in CLEAN:
        assert fineweb.apply(text) == text
        for kind in JUNK_KINDS:
            junk = junk_record(text, kind, seed=f"{kind}:{text[:8]}")
            assert fineweb.apply(junk) is None, (kind, junk)


def test_junk_keeps_the_text_s_words_but_none_of_its_lines() -> None:
    text = CLEAN[1]
    lines = {line for line in text.splitlines() if line}
    for kind in JUNK_KINDS:
        junk = junk_record(text, kind, seed="s")
        assert junk == junk_record(text, kind, seed="s")  # deterministic
        assert not lines & set(junk.splitlines()), kind  # no line of the text survives
    words = junk_record(text, "word_list", seed="s").split()
    assert sorted(words) == sorted(w.strip(".,;") for w in text.split())
    assert sorted(junk_record(text, "garbled", seed="s")) == sorted(text)


def test_junk_comes_between_the_clean_records_in_turn() -> None:
    records = noisy_records("docs", CLEAN, 1.0)
    assert [r["id"] for r in records] == [
        "docs/0", "docs/0/garbled", "docs/1", "docs/1/word_list", "docs/2", "docs/2/boilerplate",
    ]  # fmt: skip
    assert [r["text"] for r in records[::2]] == CLEAN
    half = noisy_records("docs", CLEAN, 0.5)
    assert [r["id"] for r in half] == ["docs/0", "docs/1", "docs/1/garbled", "docs/2"]
    assert noisy_records("docs", CLEAN, 0.0) == [
        {"id": f"docs/{n}", "text": t} for n, t in enumerate(CLEAN)
    ]


def test_the_build_is_deterministic_and_done_once(tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in CLEAN))
    corpus = {"docs": [source]}
    first = build_noisy_domain(corpus, "docs", 1.0, tmp_path / "a")
    again = build_noisy_domain(corpus, "docs", 1.0, tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert [r["text"] for r in _shard_records(first)][::2] == CLEAN
    manifest = json.loads((tmp_path / "a" / MANIFEST_NAME).read_text())
    assert (manifest["records"], manifest["junk_records"]) == (6, 3)
    stamp = first[0].stat().st_mtime_ns
    assert build_noisy_domain(corpus, "docs", 1.0, tmp_path / "a") == first
    assert first[0].stat().st_mtime_ns == stamp  # not rebuilt
    source.write_text(json.dumps({"text": CLEAN[0]}) + "\n")  # the domain changed: rebuilt
    assert len(_shard_records(build_noisy_domain(corpus, "docs", 1.0, tmp_path / "a"))) == 2
    with pytest.raises(ConfigError, match="no domain 'web'"):
        build_noisy_domain(corpus, "web", 1.0, tmp_path / "c")
    with pytest.raises(ConfigError, match="junk_per_record"):
        build_noisy_domain(corpus, "docs", -1.0, tmp_path / "c")
