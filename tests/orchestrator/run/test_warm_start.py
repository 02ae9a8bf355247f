"""Warm starts (orchestrator/run/warm_start.py) on real training: a warm launch trains exactly
what a cold torchrun trains (and neither leaves anything in the system's temporary folder),
and a killed Zephon leaves neither its warm server nor its launch behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.devices import Devices
from orchestrator.run import api, warm_start
from orchestrator.run.cpu_env import cpu_start_env
from orchestrator.run.launch import prepare_warm_start, train_command
from tests.support import REPO
from tests.support.experiments import data_only_experiment
from tests.support.titan_run import corpus
from tests.support.warm_start import fake_servers

pytestmark = pytest.mark.timeout(900)

STEPS = 4
ZEPHON = [sys.executable, "-m", "orchestrator.cli"]


def naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if text in line and process.pid != os.getpid():
            found.append(line)
    return found


def training_values(folder: RunFolder) -> dict[int, dict[str, float]]:
    """Each step's loss and gradient norm (the metrics that are not timings)."""
    return {
        step: {k: v for k, v in record.items() if k.startswith(("loss_metrics/", "grad_norm"))}
        for step, record in folder.metrics().items()
    }


def test_only_the_trainers_torchrun_on_this_interpreter_starts_warm() -> None:
    args = ["--dump-folder", "/tmp/x"]
    command = train_command(2, args)
    argv = warm_start.torchrun_arguments(command)
    assert argv is not None and argv[-len(args) :] == args and "orchestrator.titan.train" in argv
    assert warm_start.torchrun_arguments(["/usr/bin/python3", *command[1:]]) is None
    other = [*command[:3], "--nproc-per-node=1", "-m", "some.other.module"]
    assert warm_start.torchrun_arguments(other) is None


def test_a_server_serves_only_launches_with_its_start_time_environment() -> None:
    env = {"MALLOC_TOP_PAD_": "1", "PYTHONPATH": "/a", "HF_HOME": "/run/hf", "OMP_NUM_THREADS": "2"}
    assert warm_start.start_env(env) == {"MALLOC_TOP_PAD_": "1", "PYTHONPATH": "/a"}


def test_a_speculative_server_is_kept_by_its_launch_and_ended_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_servers(monkeypatch)
    env = {"MALLOC_ARENA_MAX": "2"}
    warm_start.speculate(env)
    kept = warm_start.starter(env)
    warm_start.prepare(env)  # the plan confirmed a local CPU launch with that environment
    assert warm_start.starter(env) is kept and not kept.closed
    warm_start.withdraw()  # nothing speculative is left to end
    assert not kept.closed

    warm_start.speculate(env)
    warm_start.withdraw()  # a dry run, a Slurm or a GPU launch
    assert kept.closed and not warm_start._starters

    warm_start.speculate(env)
    speculative = warm_start.starter(env)
    other = {"MALLOC_ARENA_MAX": "4"}  # the job's own environment differs (hydra.job.env_set)
    warm_start.prepare(other)
    assert speculative.closed and not warm_start.starter(other).closed

    warm_start.speculate(env)
    unused = warm_start.starter(env)
    monkeypatch.setenv(warm_start.WARM_START_ENV, "0")  # turned off by the job's environment
    warm_start.prepare(env)
    assert unused.closed


def test_a_plan_for_a_gpu_or_slurm_launch_ends_the_speculative_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_servers(monkeypatch)
    config = api.load_experiment(data_only_experiment(corpus(tmp_path.parent), STEPS))
    for devices in (Devices("cpu", 2, "cpu"), Devices("cuda", 1, "a GPU", (0,))):
        warm_start.speculate(cpu_start_env())
        speculative = warm_start.starter(cpu_start_env())
        prepare_warm_start(devices.kind, config.resources.launcher)
        assert speculative.closed == (devices.kind == "cuda")
    slurm = replace(config, resources=replace(config.resources, launcher="slurm"))
    warm_start.speculate(cpu_start_env())
    speculative = warm_start.starter(cpu_start_env())
    prepare_warm_start(Devices("cpu", 2, "cpu").kind, slurm.resources.launcher)
    assert speculative.closed


def test_a_warm_launch_trains_what_a_cold_torchrun_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    domains = corpus(tmp_path.parent)
    config = data_only_experiment(domains, STEPS, max_procs=2)
    config["data"]["holdout_bytes"] = 4096
    config["eval"] = {"interval": STEPS}
    monkeypatch.chdir(tmp_path)
    system_tmp = tmp_path / "system-tmp"  # the system's temporary folder, as the runs see it
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    monkeypatch.setenv(warm_start.WARM_START_ENV, "0")
    cold = api.run(config, dp=2, run_name="cold", tracking=False)
    monkeypatch.setenv(warm_start.WARM_START_ENV, "1")
    warm = api.run(config, dp=2, run_name="warm", tracking=False, fresh=True)
    assert cold.status == warm.status == RunStatus.SUCCEEDED, cold.messages + warm.messages
    # torchrun's log folders and the launches' temporary files stay in their run folders
    assert sorted(p.name for p in system_tmp.iterdir()) == []
    cold_folder, warm_folder = RunFolder(Path(cold.folder)), RunFolder(Path(warm.folder))
    # The warm one really started warm, the cold one did not.
    warm_log, cold_log = warm_folder.log_path.read_text(), cold_folder.log_path.read_text()
    assert warm_start.WARM_LOG_LINE in warm_log and "starting torchrun cold" not in warm_log
    assert warm_start.WARM_LOG_LINE not in cold_log
    assert sorted(warm_folder.digests()) == list(range(1, STEPS + 1))
    assert warm_folder.digests() == cold_folder.digests()
    assert training_values(warm_folder) == training_values(cold_folder)  # bit for bit
    assert warm.eval and cold.eval
    assert {k: v for k, v in warm.eval.items() if k != "seconds"} == {
        k: v for k, v in cold.eval.items() if k != "seconds"
    }
    record = "experiment.json"
    init_of = {
        f: json.loads((f.path / record).read_text())["init_checkpoint"]
        for f in (cold_folder, warm_folder)
    }
    assert init_of[cold_folder] == init_of[warm_folder]


def test_a_killed_zephon_leaves_no_warm_server_and_no_training(tmp_path: Path) -> None:
    domains = corpus(tmp_path.parent)
    config_path = tmp_path / "long.json"
    config_path.write_text(json.dumps(data_only_experiment(domains, 400, max_procs=2)))
    folder = RunFolder(tmp_path / "runs" / "killed")
    agent = subprocess.Popen(
        [*ZEPHON, "run", "-c", str(config_path), "--dp", "2", "--name", "killed"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), warm_start.WARM_START_ENV: "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not folder.steps() and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert agent.poll() is None, agent.communicate()[1]
        server = [
            c for c in psutil.Process(agent.pid).children() if "warm_start" in " ".join(c.cmdline())
        ]
        assert server, "the run did not start from a warm server"
        assert naming(str(folder.path.absolute())), "the warm launch does not name its run folder"
        agent.send_signal(signal.SIGKILL)  # no handler runs: only the server can clean up
        agent.wait()
        deadline = time.monotonic() + 30
        while (
            naming(str(folder.path.absolute())) or server[0].is_running()
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not naming(str(folder.path.absolute()))
        assert not server[0].is_running() or server[0].status() == psutil.STATUS_ZOMBIE
    finally:
        if agent.poll() is None:
            agent.kill()
