"""The initial model's evaluation, made once: step-0 scores kept under a key of everything
that decides them, and reused by every run that would compute the same numbers.

Runs that share initial weights, a model and an evaluation set score the same initial
model on the same rows (the main job's 12 runs: 2 sets of step-0 scores, one per seed).
The key is a SHA-256 over content, never a path or a run's name (:class:`InitialScoring`);
an entry is ``$ZEPHON_HOME/evals/step-0/<key>.json``, written through a rename, and read
only if whole (its key, its format and the digest of its record check out).

Design: docs/design/orchestrator_evaluation.md. No torch here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from orchestrator.evaluation.record import EvalRecord, EvalSource
from pipeline.io.atomic import atomic_write
from pipeline.paths import zephon_home
from pipeline.state import fingerprint

FORMAT = 1
"""The entries' layout; another value is a miss."""
CACHE_FOLDER = Path("evals") / "step-0"
"""Under :func:`~pipeline.paths.zephon_home`."""
SCORING_SOURCES = ("evaluation/**/*.py", "titan/*.py")
"""The code that scores (under ``orchestrator/``): the metrics, the scorers, the model's
config and the CPU stand-ins it runs with."""
SCORING_PACKAGES = ("torch", "torchtitan", "numpy")
EXACT_ACROSS_LAYOUTS = ("cpu", "float32")
"""(device, precision) whose step-0 scores are the same to the last bit on any dp size
(the rows of one forward are scored independently; the main job's dp 1 and dp 2 runs agree
exactly); on others the dp size is part of the key."""


@dataclass(frozen=True)
class InitialModel:
    """What the trainer knows of the model step 0 scores (it gives it to the evaluator)."""

    weights: str
    """sha256 of the initial checkpoint's files, as the run records it
    (``orchestrator.run.initial_weights.checkpoint_digest``): per seed, per recipe."""
    config: str
    """Fingerprint of the model's config as TorchTitan resolved it, with ``training.dtype``."""
    precision: str
    """``training.mixed_precision_param``: the precision the forward runs in."""


@dataclass(frozen=True)
class InitialScoring:
    """Everything that decides an evaluation of the initial model: the key of its entry."""

    model: InitialModel
    eval_set: str
    """Fingerprint of the rows scored (:func:`rows_fingerprint`): the documents' tokens as
    windows, each row's document, each document's bytes and dataset, the datasets' names
    (the record's keys). It covers the held-out documents, the tokenizer and ``seq_len``."""
    rows_per_forward: int
    metrics: tuple[str, ...]
    device: str
    layout: str | None
    """The parallel layout (dp, tp), or None where it cannot change a score
    (:data:`EXACT_ACROSS_LAYOUTS`, without tensor parallelism)."""
    code: str
    """:func:`scoring_code`: fingerprint of :data:`SCORING_SOURCES` and the versions of :data:`SCORING_PACKAGES`."""

    @property
    def key(self) -> str:
        return fingerprint({"format": FORMAT, **dataclasses.asdict(self)})


def parallel_layout(*, device: str, precision: str, dp: int, tp: int) -> str | None:
    """:attr:`InitialScoring.layout` of a run on ``device`` in ``precision``."""
    if (device, precision) == EXACT_ACROSS_LAYOUTS and tp == 1:
        return None
    return f"dp{dp}-tp{tp}"


def rows_fingerprint(names: list[str], arrays: list[Any]) -> str:
    """sha256 over the datasets' ``names`` and each array's dtype, shape and bytes."""
    digest = hashlib.sha256(json.dumps(names).encode())
    for array in arrays:
        digest.update(f"{array.dtype}{tuple(array.shape)}".encode())
        digest.update(memoryview(array.tobytes()))
    return digest.hexdigest()


@functools.cache
def scoring_code() -> str:
    """Fingerprint of the scoring code and packages (once per process)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(f for pattern in SCORING_SOURCES for f in root.glob(pattern))
    sources = {
        f.relative_to(root).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest() for f in files
    }
    versions = {name: _version(name) for name in SCORING_PACKAGES}
    return fingerprint({"sources": sources, "versions": versions})


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class StepZeroCache:
    """Step-0 records by :attr:`InitialScoring.key`, in ``folder`` (default: under
    :func:`~pipeline.paths.zephon_home`)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else zephon_home() / CACHE_FOLDER

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def load(self, key: str) -> EvalRecord | None:
        """The record stored under ``key``, or None: none, or one that is not whole (it is
        then computed again and replaced, never trusted)."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_bytes())
            line = entry["record"]
            if entry["format"] != FORMAT or entry["key"] != key:
                raise ValueError("another key or format")
            if entry["sha256"] != fingerprint(line):
                raise ValueError("its record does not match its digest")
            record = EvalRecord.from_json(line)
            if record.step != 0:
                raise ValueError(f"a record of step {record.step}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:  # JSONDecodeError: ValueError
            print(f"[zephon] ignoring step-0 eval cache entry {path}: {e}", file=sys.stderr)
            return None
        return record

    def store(self, key: str, record: EvalRecord) -> None:
        """Keep ``record`` (computed, step 0) under ``key``: whole or not at all, so two runs
        storing at once or a kill mid-write leave an entry a reader takes or ignores."""
        assert record.step == 0 and record.made is EvalSource.COMPUTED, record
        line = record.to_json()
        entry = {"format": FORMAT, "key": key, "sha256": fingerprint(line), "record": line}
        atomic_write(self.path(key), lambda f: f.write(json.dumps(entry).encode()))
