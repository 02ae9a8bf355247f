"""orchestrator.experiment.appended_jsonl: a trainer's JSONL file read on from where the last
read stopped, always the same records as reading it whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.experiment.appended_jsonl import AppendedJsonl, parse_jsonl
from orchestrator.experiment.runfolder import (
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
    write_jsonl,
)


def line(step: int) -> bytes:
    return (json.dumps({"step": step, "loss": 1.0 / step}) + "\n").encode()


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_lines_are_parsed_once_and_a_line_being_written_waits(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    follower = AppendedJsonl(path)
    assert follower.records() == []  # no file yet
    append(path, line(1) + line(2))
    first = follower.records()
    assert [r["step"] for r in first] == [1, 2]
    half = line(3)[:7]
    append(path, half)
    assert [r["step"] for r in follower.records()] == [1, 2]  # step 3 is still being written
    append(path, line(3)[7:] + line(4))
    records = follower.records()
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[0] is first[0]  # read on, not again


def test_a_file_replaced_cut_short_or_rewritten_in_place_is_read_again_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "eval.jsonl"
    append(path, line(1) + line(2) + line(3))
    follower = AppendedJsonl(path)
    assert len(follower.records()) == 3
    write_jsonl(path, [{"step": 1, "loss": 1.0}])  # a resume forgets steps 2 and 3
    assert [r["step"] for r in follower.records()] == [1]
    append(path, line(2) + line(3))
    assert [r["step"] for r in follower.records()] == [1, 2, 3]
    with path.open("r+b") as f:  # cut short in place
        f.truncate(len(line(1)))
    assert [r["step"] for r in follower.records()] == [1]
    path.write_bytes(line(7) + line(8))  # rewritten in place, longer than before
    assert [r["step"] for r in follower.records()] == [7, 8]
    path.unlink()
    assert follower.records() == []


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 40)),
        st.tuples(st.just("replace"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("torn"), st.integers(1, 20), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_reading_on_always_gives_what_reading_whole_gives(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    """Whatever is appended (whole lines, a line in pieces, a torn line a crash left), and
    however the file is replaced or cut, the records equal a whole read's of the file's
    whole lines at every point."""
    path = tmp_path_factory.mktemp("f") / "metrics.jsonl"
    follower = AppendedJsonl(path)
    step = 0
    pending = b""
    for kind, count, cut in ops:
        if kind == "append":  # ``count`` lines, the last one split at ``cut``
            data = pending + b"".join(line(step + i + 1) for i in range(count))
            step += count
            cut = min(cut, len(data))
            append(path, data[: len(data) - cut])
            pending = data[len(data) - cut :]
        elif kind == "replace":
            write_jsonl(path, [{"step": s} for s in range(count)])
            pending = b""
        elif kind == "truncate" and path.exists():
            with path.open("r+b") as f:
                f.truncate(min(count, os.path.getsize(path)))
            pending = b""
        elif kind == "torn":  # a crash's half line, then the next launch's lines
            append(path, line(step + 1)[:count] + b"\n")
            pending = b""
        whole = path.read_bytes() if path.exists() else b""
        assert follower.records() == parse_jsonl(whole[: whole.rfind(b"\n") + 1])


def test_a_run_folder_reads_its_trainer_files_on(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    steps_path = folder.titan_dir / RUN_SUBDIR / STEPS_FILE
    steps_path.parent.mkdir(parents=True)
    append(steps_path, line(1))
    assert list(folder.steps()) == [1]
    append(steps_path, line(2))
    assert list(folder.steps()) == [1, 2]
    assert RunFolder(folder.path).steps() == folder.steps()  # a new reader reads it whole
