"""The zephon launcher: its log names every job once (when it starts, or when it can never
fit), and jobs running at once keep their own Hydra records. Nothing trained; real sweeps
are in tests/e2e."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra._internal.callbacks import Callbacks
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobStatus
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from pipeline.errors import ConfigError
from sweeps.launcher import ZephonLauncher
from sweeps.summary import SWEEP_FILE
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
    assert process.returncode == 1 and "Traceback" not in process.stderr  # a job failed
    statuses = [job["status"] for job in json.loads((sweep_dir / SWEEP_FILE).read_text())["jobs"]]
    assert statuses == ["succeeded", "failed"]


@pytest.fixture
def sweep_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DictConfig]:
    """The sweep's composed config (Hydra initialised in this process, no warm server)."""
    monkeypatch.setenv("ZEPHON_WARM_START", "0")
    with initialize_config_module(config_module="zephon_conf", version_base="1.3"):
        yield compose(
            "config",
            overrides=[f"hydra.sweep.dir={tmp_path}", "train=smoke"],
            return_hydra_config=True,
        )


def launcher_for(config: DictConfig, task_function: TaskFunction) -> ZephonLauncher:
    """A zephon launcher on 2 CPU slots, set up as Hydra sets it up for a sweep."""
    launcher = ZephonLauncher(device="cpu", capacity=2)
    context = HydraContext(
        config_loader=GlobalHydra.instance().config_loader(), callbacks=Callbacks(config)
    )
    launcher.setup(hydra_context=context, task_function=task_function, config=config)
    return launcher


def test_jobs_running_at_once_keep_their_own_hydra_config(
    sweep_config: DictConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hydra's run_job keeps the job's config in a process-wide singleton; two jobs starting
    together once swapped records (and a bare assert failed a CI sweep as 'job None')."""
    set_config = HydraConfig.set_config

    def slow_set_config(self: HydraConfig, config: DictConfig) -> None:
        set_config(self, config)
        time.sleep(0.5)  # widens the window in which another job could overwrite it

    monkeypatch.setattr(HydraConfig, "set_config", slow_set_config)
    both_running = threading.Barrier(2, timeout=60)

    def task_function(config: DictConfig) -> int:
        both_running.wait()  # the two jobs' task functions run at the same time
        return int(config.train.seed)

    returns = launcher_for(sweep_config, task_function).launch(
        [["train.seed=10", "resources.dp=1"], ["train.seed=11", "resources.dp=1"]], 0
    )
    assert [r.status for r in returns] == [JobStatus.COMPLETED] * 2, [
        r._return_value for r in returns
    ]
    assert [r.return_value for r in returns] == [10, 11]
    assert [r.hydra_cfg.hydra.job.num for r in returns] == [0, 1]
    assert [r.hydra_cfg.hydra.overrides.task[0] for r in returns] == [
        "train.seed=10",
        "train.seed=11",
    ]


def test_a_sweep_that_would_change_directory_per_job_is_refused(sweep_config: DictConfig) -> None:
    sweep_config.hydra.job.chdir = True
    with pytest.raises(ConfigError, match=r"set hydra\.job\.chdir=false"):
        launcher_for(sweep_config, lambda config: None)
