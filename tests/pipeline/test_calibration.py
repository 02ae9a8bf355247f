"""Calibration: tokens per byte measured once per dataset and sample, stored for other processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import Dataset, WorkSource, calibration, load_tokenizer
from pipeline.errors import DataError
from pipeline.tokenizer import Tokenizer


def test_calibration_measures_more_tokens_per_byte_for_code(small: list[Dataset]) -> None:
    source = WorkSource(small, {"a": 0.5, "b": 0.5})
    tpb = source.calibrate(load_tokenizer("gpt2"))
    assert 0 < tpb["a"] < tpb["b"] < 1
    assert source.calibrate(load_tokenizer("gpt2")) == tpb  # measured once


def counted_encodes(tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches ``tokenizer`` encodes from now on (one entry per call)."""
    encoded: list[int] = []
    encode_batch = tokenizer.encode_batch

    def counting(texts: list[str]) -> list[list[int]]:
        encoded.append(len(texts))
        return encode_batch(texts)

    monkeypatch.setattr(tokenizer, "encode_batch", counting)
    return encoded


def test_calibration_depends_on_the_data_not_the_seed_and_is_measured_once(
    small: list[Dataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = load_tokenizer("gpt2")
    first = WorkSource(small, {"a": 0.5, "b": 0.5}, seed=0).calibrate(tokenizer)
    encoded = counted_encodes(tokenizer, monkeypatch)
    assert WorkSource(small, {"a": 0.9, "b": 0.1}, seed=5).calibrate(tokenizer) == first
    assert not encoded  # this process measured these datasets already
    WorkSource(small, {"a": 0.5, "b": 0.5}, calibration_bytes=64).calibrate(tokenizer)
    assert len(encoded) == 2  # another sample size is another measurement, per dataset


def test_calibration_is_stored_for_other_processes_and_a_damaged_entry_is_measured_again(
    small: list[Dataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = load_tokenizer("gpt2")
    first = WorkSource(small, {"a": 0.5, "b": 0.5}, calibration_bytes=100).calibrate(tokenizer)
    encoded = counted_encodes(tokenizer, monkeypatch)
    monkeypatch.setattr(calibration, "_MEASURED", {})  # another process: nothing in memory
    assert (
        WorkSource(small, {"a": 0.9, "b": 0.1}, calibration_bytes=100).calibrate(tokenizer) == first
    )
    assert not encoded  # read from the datasets' cache_dir
    stored = sorted((small[0].cache_dir / "calibration").glob("*.json"))
    assert len(stored) == 2
    for entry in stored:
        entry.write_text('{"tokens_per_byte": ')  # a write cut short
    monkeypatch.setattr(calibration, "_MEASURED", {})
    assert (
        WorkSource(small, {"a": 0.5, "b": 0.5}, calibration_bytes=100).calibrate(tokenizer) == first
    )
    assert len(encoded) == 2  # measured again, to the same values
    assert all(json.loads(e.read_text())["tokens_per_byte"] in first.values() for e in stored)


@pytest.mark.filterwarnings("ignore:dataset 'bad'")  # the warning of its skipped records
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (bytes(range(256)) * 40, "invalid_utf8"),  # random bytes, not JSON lines
        (b"".join(json.dumps({"text": n}).encode() + b"\n" for n in range(50)), "missing_field"),
    ],
)
def test_a_dataset_without_one_usable_record_is_a_data_error(
    small: list[Dataset], tmp_path: Path, content: bytes, reason: str
) -> None:
    """Planned over, such a dataset would train on nothing (its tokens per byte 0): refused
    before any work, naming what its files held, every time (an empty sample has one
    identity whatever the dataset, so nothing may be remembered for it)."""
    (tmp_path / "bad.jsonl").write_bytes(content)
    bad = Dataset("bad", [str(tmp_path / "bad.jsonl")], cache_dir=tmp_path / "cache")
    for _ in range(2):
        source = WorkSource([small[0], bad], {"a": 0.5, "bad": 0.5})
        with pytest.raises(DataError, match=f"'bad': no usable .*{reason}"):
            source.calibrate(load_tokenizer("gpt2"))
