"""The zephon launcher's log: every message once, each job named once (when it starts, or
when it can never fit). A dry-run mix sweep, nothing trained; real sweeps are in tests/e2e."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from sweeps.sweeper import SWEEP_FILE
from tests.support.sweeps import multirun

HYDRA_LINE = re.compile(r"^\[[^\]]*\]\[HYDRA\] (.*)$", re.MULTILINE)
"""A line of Hydra's logging (``hydra/hydra_logging``: time, then the message)."""


def test_each_job_is_logged_once_whether_it_starts_or_never_fits(tmp_path: Path) -> None:
    process, sweep_dir = multirun(
        tmp_path,
        "once",
        "hydra/launcher=zephon",
        "hydra.launcher.capacity=1",  # one device: the dp-2 replicate can never fit
        "dry_run=true",
        "model=mini",
        "train=smoke",
        "hydra.sweeper.mix.explicit=[{code:1.0}]",
        "hydra.sweeper.replicate_dp=[1,2]",
        timeout=300,
    )
    output = process.stdout + process.stderr
    messages = HYDRA_LINE.findall(output)
    assert [m for m, n in Counter(messages).items() if n > 1] == [], output[-5000:]
    assert [m for m in messages if m.startswith("Launching")] == [
        "Launching 2 jobs on 1 free cpu devices"
    ]
    jobs = sorted(re.findall(r"^\t#(\d+) (\S+ \S+)", "\n".join(messages), re.MULTILINE))
    assert jobs == [("0", "started: dp"), ("1", "cannot start:")], output[-5000:]
    assert "needs dp in [2] but only 1 cpu devices are free" in output
    # the failed job is reported by the sweeper, which fails the sweep
    assert process.returncode != 0
    statuses = [job["status"] for job in json.loads((sweep_dir / SWEEP_FILE).read_text())["jobs"]]
    assert statuses == ["succeeded", "failed"]
