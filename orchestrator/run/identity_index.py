"""Answers from what already ran: a run's identity, and the index of run folders by identity.

A run's identity is what decides its training and its scores: the data variant (contract,
data seeds and mixture), the recipe fingerprint (model, schedule, steps, init seed,
versions), the initial checkpoint's sha256 and the ``eval`` section. The dp size, the run
name, ``resources`` and ``tracking`` are not part of it. An experiment whose identity
matches a run that succeeded is answered from that run (:func:`orchestrator.run.api.run`).

The index is one small file per :class:`AnswerKey`, ``<runs_root>/.identities/<key>.json``
naming the run folder that trains it: a look-up reads one file however many runs the
root holds. The run that trains a key holds ``<key>.lock`` (``flock``) from its look-up to
its end, so an identical submission waits and is then answered, and the lock of a killed
process is released with it (the next submission resumes that run).
A fresh run (``fresh=True``) neither looks up, nor locks, nor is indexed: it answers nobody.

A replicate asked for at a dp size (a sweep's ``replicate_dp``: the point is to train at each
size) is keyed by its identity *and* dp size, ``<identity>@dp<k>``: it is answered by a run
of that identity that trained at that size, and only what is missing trains.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder, write_json_atomic
from orchestrator.tracking.mirrored_run import MirroredRun
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.provenance import answer_tags
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.tracker import Tracker
from pipeline.filelock import file_lock

INDEX_DIR = ".identities"
"""The index's folder under ``runs_root``."""


@dataclass(frozen=True)
class AnswerKey:
    """What a run answers: its identity, and the dp size it must have trained at."""

    identity: str
    dp: int | None = None
    """The dp size of a replicate asked for at a size (``replicate_dp``); None: any size."""

    @property
    def name(self) -> str:
        """The index's file name stem: ``<identity>`` or ``<identity>@dp<k>``."""
        return self.identity if self.dp is None else f"{self.identity}@dp{self.dp}"


def identity_lock(
    runs_root: Path, key: AnswerKey | None
) -> contextlib.AbstractContextManager[None]:
    """The lock of ``key`` under ``runs_root``, to hold in a ``with`` block (module
    docstring); none for a fresh run (``key`` None), which answers nobody."""
    if key is None:
        return contextlib.nullcontext()
    return file_lock(Path(runs_root) / INDEX_DIR / f"{key.name}.lock")


def indexed_run(runs_root: Path, key: AnswerKey) -> RunFolder | None:
    """The run folder under ``runs_root`` recorded for ``key`` (any status), or None: none
    recorded, its folder is gone, or it holds another identity now (extended)."""
    try:
        entry = json.loads((Path(runs_root) / INDEX_DIR / f"{key.name}.json").read_text())
    except (OSError, ValueError):
        return None
    folder = RunFolder(Path(runs_root) / entry["run"])
    if not folder.exists() or folder.experiment().identity != key.identity:
        return None
    return folder


def finished_at(runs_root: Path, key: AnswerKey) -> RunFolder | None:
    """For a replicate at a dp size, the run of its identity at any size if that run
    finished having trained at this size only (it answers the replicate too), else None."""
    if key.dp is None:
        return None
    run = indexed_run(runs_root, AnswerKey(key.identity))
    if run is None:
        return None
    state = run.state()
    return run if state.status == RunStatus.SUCCEEDED and set(state.dp_sizes) == {key.dp} else None


def indexed_key(run: MirroredRun) -> AnswerKey | None:
    """The key the index names ``run`` for (the run that answers it; not a fresh run
    beside it), else None."""
    folder, record = run.folder, run.experiment
    identity = record.identity
    if identity is None:
        return None
    dp = record.config.get("resources", {}).get("dp")
    for key in (AnswerKey(identity), AnswerKey(identity, dp)):
        found = indexed_run(folder.path.parent, key)
        if found is not None and found.path.resolve() == folder.path.resolve():
            return key
    return None


def index_run(folder: RunFolder, key: AnswerKey) -> None:
    """Record ``folder`` (under its ``runs_root``) as the run of ``key``."""
    entry = {"identity": key.identity, "run": folder.name}
    write_json_atomic(folder.path.parent / INDEX_DIR / f"{key.name}.json", entry)


def link_answer(
    tracker: Tracker, earlier: MirroredRun, *, parent_run_id: str, sweep: str | None
) -> str:
    """A metric-less MLflow run under ``parent_run_id`` (a sweep's) that points at the run
    ``earlier`` answered the sweep's job with (``zephon.answered_from``); its id. Its kind
    is ``answer``, not ``run``: comparisons count the original alone."""
    link = tracker.new_run(
        earlier.folder.name,
        kind=RunKind.ANSWER,
        tags=answer_tags(earlier, sweep),
        parent_run_id=parent_run_id,
    )
    tracker.end_run(link, MlflowStatus.FINISHED)
    return link
