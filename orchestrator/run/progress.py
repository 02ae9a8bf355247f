"""Training progress from a run folder's ``steps.jsonl``: a bar on a terminal, a line per ~10 s
otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from orchestrator.experiment.runfolder import RunFolder


class Progress:
    """Training progress from ``steps.jsonl``: a bar on a terminal, one line per ~10 s otherwise."""

    def __init__(self, total_steps: int, stream: TextIO | None = None, *, label: str = "") -> None:
        self.total = total_steps
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.label = label
        self._start = time.monotonic()
        self._first: tuple[int, float] | None = None
        self._last_line = 0.0
        self._shown = -1

    def update(self, folder: RunFolder) -> None:
        steps = folder.steps()
        if not steps:
            return
        done = max(steps)
        now = time.monotonic()
        if self._first is None:
            self._first = (done, now)
        # Measured from the first step seen on: no rate until a whole interval is measured.
        tokens = sum(r.get("tokens", 0) for s, r in steps.items() if s > self._first[0])
        rate = tokens / (now - self._first[1]) if tokens and now > self._first[1] else None
        loss = folder.metrics().get(done, {}).get("loss_metrics/global_avg_loss")
        loss_text = f" loss {loss:.3f}" if isinstance(loss, float) else ""
        if self.tty:
            width = 24
            filled = int(width * done / max(1, self.total))
            rate_text = "" if rate is None else f" {rate:,.0f} tok/s"
            self.stream.write(
                f"\r{self.label}[{'#' * filled}{'.' * (width - filled)}] step {done}/{self.total}"
                f"{rate_text}{loss_text}   "
            )
            self.stream.flush()
        elif done != self._shown and (now - self._last_line >= 10 or done == self.total):
            rate_text = "" if rate is None else f", {rate:,.0f} tokens/s"
            self.stream.write(
                f"{self.label}step {done}/{self.total}{rate_text}{loss_text}, "
                f"{now - self._start:.0f} s\n"
            )
            self.stream.flush()
            self._last_line = now
        self._shown = done

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
