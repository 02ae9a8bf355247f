"""The run folder: everything one experiment run leaves on disk, and the only input tracking needs.

Its files survive a crash line by line and double as the buffer of metrics not yet sent
to a tracking server. No torch import. Design: docs/design/orchestrator_experiment.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator.experiment.appended_jsonl import AppendedJsonl, parse_jsonl
from orchestrator.experiment.run_record import ExperimentRecord, RunState

EXPERIMENT_FILE = "experiment.json"
DATA_SPEC_FILE = "data.json"
RUN_FILE = "run.json"
LOG_FILE = "launch.log"
TITAN_DIR = "titan"
RUN_SUBDIR = "zephon"
"""Zephon's files inside TorchTitan's dump folder."""
STEPS_FILE = "steps.jsonl"
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
TASKS_FILE = "tasks.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file ([] if it does not exist); a torn last line is skipped."""
    return parse_jsonl(path.read_bytes()) if path.exists() else []


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace the JSONL file ``path`` by ``records`` (see :func:`write_json_atomic`)."""
    _write_through_rename(path, "".join(json.dumps(r) + "\n" for r in records))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_through_rename(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _write_through_rename(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole or is as it was: a kill or a full disk leaves no half
    file and no scratch file."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        scratch.write_text(text)
        os.replace(scratch, path)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise


class RunFolder:
    """One run folder: its paths, its records (:mod:`.run_record`) and its outputs."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._appended: dict[str, AppendedJsonl] = {}

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def titan_dir(self) -> Path:
        """TorchTitan's ``--dump-folder``."""
        return self.path / TITAN_DIR

    @property
    def data_spec_path(self) -> Path:
        """The trainer's ``--dataloader.spec``."""
        return self.path / DATA_SPEC_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.titan_dir / "checkpoint"

    def exists(self) -> bool:
        return (self.path / EXPERIMENT_FILE).exists()

    # -- experiment.json (immutable) and run.json (updated) ---------------------------------

    def experiment(self) -> ExperimentRecord:
        """``experiment.json``: the experiment, its fingerprints, recipe and identity."""
        return ExperimentRecord.from_dict(json.loads((self.path / EXPERIMENT_FILE).read_text()))

    def write_experiment(self, record: ExperimentRecord) -> None:
        write_json_atomic(self.path / EXPERIMENT_FILE, record.to_dict())

    def state(self) -> RunState:
        """``run.json``: status, segments, where it is tracked (empty before the first write)."""
        path = self.path / RUN_FILE
        return RunState.from_dict(json.loads(path.read_text())) if path.exists() else RunState()

    def records(self) -> tuple[ExperimentRecord, RunState]:
        """``experiment.json`` and ``run.json``, read together (what a run's owner holds)."""
        return self.experiment(), self.state()

    def write_state(self, state: RunState) -> None:
        """Replace ``run.json`` by ``state``. Its one caller is the run's owner
        (:class:`orchestrator.run.lifecycle.Run`), which holds the state between writes."""
        write_json_atomic(self.path / RUN_FILE, state.to_dict())

    # -- training outputs ---------------------------------------------------------------------

    def _records(self, name: str) -> list[dict[str, Any]]:
        """The records of the trainer's appended file ``name``, each line parsed once by
        this object however often it asks (a launch asks every second)."""
        if name not in self._appended:
            self._appended[name] = AppendedJsonl(self.titan_dir / RUN_SUBDIR / name)
        return self._appended[name].records()

    def steps(self) -> dict[int, dict[str, Any]]:
        """Step -> its ``steps.jsonl`` record (the last one written for that step)."""
        return {r["step"]: r for r in self._records(STEPS_FILE)}

    def digests(self) -> dict[int, str]:
        """Step -> global batch digest: the run's data fingerprint, step by step."""
        return {step: r["global_digest"] for step, r in self.steps().items()}

    def data_fingerprint(self) -> str | None:
        """The digest chain after the last finished step (None before the first)."""
        steps = self.steps()
        return steps[max(steps)]["data_fingerprint"] if steps else None

    def metrics(self) -> dict[int, dict[str, Any]]:
        """Step -> TorchTitan's metrics at that step (the last record wins after a resume)."""
        merged: dict[int, dict[str, Any]] = {}
        for record in self._records(METRICS_FILE):
            merged.setdefault(record["step"], {}).update(record)
        return merged

    def evals(self) -> dict[int, dict[str, Any]]:
        """Step -> held-out eval record ``{"step", "bpb": {domain: x}, "aggregate_bpb", ...}``."""
        return {r["step"]: r for r in self._records(EVAL_FILE)}

    def last_checkpoint_step(self) -> int | None:
        """Step of the newest complete checkpoint (DCP writes ``.metadata`` last)."""
        if not self.checkpoint_dir.is_dir():
            return None
        steps = [
            int(p.name.split("-", 1)[1])
            for p in self.checkpoint_dir.glob("step-*")
            if (p / ".metadata").exists() and p.name.split("-", 1)[1].isdigit()
        ]
        return max(steps, default=None)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of ``launch.log``."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])
