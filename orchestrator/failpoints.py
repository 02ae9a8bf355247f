"""Failpoints: named places in a run where a fault test holds the process, to kill it there.

A failpoint is armed only by ``ZEPHON_FAILPOINT=<point>@<step>`` in the environment (the
fault matrix, ``benchmarks/fault_matrix.py``, and its test set it); unarmed, :func:`reach`
returns at once. An armed one, reached at its step, writes the process id to the file
``ZEPHON_FAILPOINT_HELD`` names and sleeps until it is killed: the killer then knows the
run stands exactly at that point (a checkpoint half written, an eval half done, a batch
that MLflow accepted whose cursor is not written yet), which a timer never could.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum
from pathlib import Path

FAILPOINT_ENV = "ZEPHON_FAILPOINT"
"""``<point>@<step>``: where to hold."""
HELD_ENV = "ZEPHON_FAILPOINT_HELD"
"""The file an armed failpoint writes its process id to when it holds."""


class Failpoint(StrEnum):
    """The places a run can be held at; each holds at a training step."""

    STEP = "step"
    """Before training step N (global rank 0)."""
    STEP_LOGGED = "step_logged"
    """Step N's line is in ``steps.jsonl``; its loss is not in ``metrics.jsonl`` yet."""
    CHECKPOINT_WRITTEN = "checkpoint_written"
    """Step N's checkpoint shards are written; its ``.metadata`` is not (a torn checkpoint)."""
    CHECKPOINT_SAVED = "checkpoint_saved"
    """Step N's checkpoint is whole; training has not gone on."""
    EVAL = "eval"
    """The held-out eval of step N has scored the model; nothing of it is recorded."""
    TRACKING_SENT = "tracking_sent"
    """MLflow accepted a batch of metrics ending at step N; the run's cursor still says
    they were not sent (the Zephon process, not the trainer)."""


def armed(point: Failpoint) -> int | None:
    """The step at which ``point`` is armed in this process, or None."""
    spec = os.environ.get(FAILPOINT_ENV, "")
    name, _, step = spec.partition("@")
    return int(step) if name == point and step.isdigit() else None


def reach(point: Failpoint, step: int) -> None:
    """Hold here until killed if ``point`` is armed at ``step`` (global rank 0 only: the
    other ranks then wait for it in their next collective); else return at once."""
    if armed(point) != step or os.environ.get("RANK", "0") != "0":
        return
    Path(os.environ[HELD_ENV]).write_text(f"{os.getpid()}\n")
    while True:  # the fault test kills this process; nothing else ends it
        time.sleep(60)
