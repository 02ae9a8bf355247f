"""Bad records: skipped, counted and warned of once, or an error naming the file, line and reason."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pipeline.errors import DataError
from tests.support.shard_files import (
    make_dataset,
    write_jsonl_lines,
)

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
    path = write_jsonl_lines(tmp_path / "a.jsonl", lines)
    (tmp_path / "b.txt").write_bytes(b"line one\nbad \xff byte")
    ds = make_dataset(tmp_path, [path, tmp_path / "b.txt"])
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
    path = write_jsonl_lines(tmp_path / "a.jsonl", [b"", {"text": "x"}, b"\r"])
    ds = make_dataset(tmp_path, path, on_bad_record="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ds.read_texts([0]) == ["x"]
    assert ds.report()["skipped"] == {"blank_line": 2}


@pytest.mark.parametrize("reason", list(BAD_LINES))
def test_error_mode_names_path_line_and_reason(tmp_path: Path, reason: str) -> None:
    path = write_jsonl_lines(tmp_path / "a.jsonl", [{"text": "ok"}, b"", BAD_LINES[reason]])
    ds = make_dataset(tmp_path, path, on_bad_record="error")
    with pytest.raises(DataError, match=rf"{path}:3: .*{reason}.*on_bad_record='skip'"):
        _ = ds.num_records


def test_error_mode_on_invalid_utf8_text_file(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_bytes(b"# title\n\nok\n\x80 bad")
    with pytest.raises(DataError, match=rf"{path}:4: .*invalid_utf8"):
        _ = make_dataset(tmp_path, path, on_bad_record="error").num_records
