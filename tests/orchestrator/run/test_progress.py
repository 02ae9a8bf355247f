"""A run's progress lines, read from the run folder as training writes it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from orchestrator.experiment.runfolder import RUN_SUBDIR, STEPS_FILE, RunFolder
from orchestrator.run import progress as progress_module


def write_step(folder: RunFolder, step: int, tokens: int) -> None:
    path = folder.titan_dir / RUN_SUBDIR / STEPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"step": step, "tokens": tokens}) + "\n")


def test_tokens_per_second_only_once_an_interval_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    folder = RunFolder(tmp_path)
    stream = io.StringIO()
    progress = progress_module.Progress(4, stream, label="run ")

    progress.update(folder)  # nothing trained yet: nothing to say
    write_step(folder, 1, 1000)
    clock[0] += 5
    progress.update(folder)
    write_step(folder, 2, 1000)
    clock[0] += 2
    progress.update(folder)  # within 10 s of the last line: quiet
    write_step(folder, 3, 1000)
    write_step(folder, 4, 1000)
    clock[0] += 2
    progress.update(folder)  # the last step is always shown

    lines = stream.getvalue().splitlines()
    assert lines == ["run step 1/4, 5 s", "run step 4/4, 750 tokens/s, 9 s"]
