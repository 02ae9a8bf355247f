"""The run's owner (:class:`orchestrator.run.lifecycle.Run`) driven through the API with a
stand-in launcher that writes a trainer's records instead of training: a new run, an answer,
a resume, a failed launch, an interrupt, a follower node, and who reads and writes
``run.json``."""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.experiment.run_record import InitCheckpoint, RunStatus
from orchestrator.experiment.runfolder import RUN_FILE, RunFolder
from orchestrator.run import api, interrupts, lifecycle, segment
from orchestrator.run.launch import Launch
from orchestrator.run.run_plan import RunPlan
from orchestrator.run.segment import SegmentHooks
from tests.support import REPO
from tests.support.experiments import data_only_experiment
from tests.support.titan_run import corpus
from tests.support.tracked_folders import write_metrics, write_steps

PRODUCT = ("orchestrator", "pipeline", "sweeps", "benchmarks", "demo", "hydra_plugins")
"""The folders of the product's code (tests write run folders of their own)."""
GONE_PID = 2**22 + 1
"""A process group id no process has: what a stand-in launch records."""


class StandIn:
    """A launcher that trains nothing: it records a process group and writes the steps
    from the segment's start to ``reach`` (default: the last), a checkpoint at each even
    one, then exits with ``code``."""

    def __init__(self, code: int = 0, reach: int | None = None, log: str = "") -> None:
        self.code, self.reach, self.log = code, reach, log
        self.launched: list[RunPlan] = []
        self.at_launch: dict[str, Any] = {}

    def __call__(self, plan: RunPlan, hooks: SegmentHooks) -> int:
        self.launched.append(plan)
        self.at_launch = {"reads": list(_watch.reads), "writes": list(_watch.writes)}
        hooks.on_processes((GONE_PID,))
        folder = plan.folder
        start = folder.last_checkpoint_step() or 0
        steps = range(start + 1, (self.reach or plan.config.train.steps) + 1)
        write_steps(folder, steps, dp_size=plan.dp)
        write_metrics(folder, steps)
        for step in steps[1::2] if steps.start % 2 else steps[::2]:
            (folder.checkpoint_dir / f"step-{step}").mkdir(parents=True)
            (folder.checkpoint_dir / f"step-{step}" / ".metadata").touch()
        folder.log_path.write_text(self.log)
        hooks.on_tick(folder)
        return self.code


class _Watch:
    """The opens for reading and the replacements of the ``run.json`` of the run folder
    named ``name``, seen by an audit hook (``os.replace`` is audited as ``os.rename``)."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.reads: list[str] = []
        self.writes: list[str] = []

    def start(self, name: str) -> None:
        """Count from now on, for the run folder ``name``."""
        self.name, self.reads, self.writes = name, [], []

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.name is None or event not in ("open", "os.rename"):
            return
        path = str(args[1] if event == "os.rename" else args[0])
        if not path.endswith(f"{os.sep}{self.name}{os.sep}{RUN_FILE}"):
            return
        if event == "os.rename":
            self.writes.append(path)
        elif args[1] is None or "r" in str(args[1]):
            self.reads.append(path)


_watch = _Watch()
sys.addaudithook(_watch.hook)


@pytest.fixture
def experiment(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 4-step experiment over the shared corpus, its runs under this test's folder."""
    domains = corpus(tmp_path_factory.getbasetemp())
    return {**data_only_experiment(domains, 4, max_procs=1), "runs_root": str(tmp_path / "runs")}


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[StandIn]:
    """The stand-in every launch of the test goes to; no initial checkpoint is made."""
    stand_in = StandIn()
    monkeypatch.setattr(lifecycle, "launch_segment", stand_in)
    (tmp_path / "init" / "step-0").mkdir(parents=True)
    made = InitCheckpoint.of("stand-in", str(tmp_path / "init" / "step-0"), "0" * 64)
    monkeypatch.setattr(api, "ensure_init_checkpoint", lambda config, recipe: made)
    monkeypatch.setattr(interrupts, "_noted", [])
    monkeypatch.setenv("ZEPHON_WARM_START", "0")
    yield stand_in
    _watch.name = None


def test_only_the_run_writes_run_json() -> None:
    """``RunFolder.write_state`` has one caller in the product: the run's owner."""
    callers = set()
    for top in PRODUCT:
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and node.attr in ("write_state", "update_state"):
                    callers.add(str(path.relative_to(REPO)))
    assert callers == {"orchestrator/run/lifecycle.py"}


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "answerable"])
def test_a_new_tracked_run_reads_run_json_never_and_writes_it_three_times_before_launch(
    experiment: dict[str, Any], launcher: StandIn, tmp_path: Path, fresh: bool
) -> None:
    """From ``run()`` to its first launch: no read of its ``run.json`` and three writes
    (its first segment, its MLflow run's id, its params and inputs sent)."""
    experiment["tracking"] = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    _watch.start("counted")
    result = api.run(experiment, dp=1, run_name="counted", fresh=fresh)
    assert result.status == RunStatus.SUCCEEDED and result.tracking == "synced"
    assert launcher.at_launch == {"reads": [], "writes": [str(Path(result.folder) / RUN_FILE)] * 3}
    state = RunFolder(result.folder).state()
    assert state.launch_process_groups == (GONE_PID,) and state.mlflow_run_id
    assert state.tracking.metrics_step == 4  # the final sync sent every step


def test_an_identical_run_is_answered_without_a_launch(
    experiment: dict[str, Any], launcher: StandIn
) -> None:
    first = api.run(experiment, dp=1, tracking=False)
    again = api.run(experiment, dp=1, tracking=False)
    assert len(launcher.launched) == 1
    assert again.answered_from == first.run_name and again.status == RunStatus.SUCCEEDED
    assert again.data_fingerprint == first.data_fingerprint == "fp4"


def test_an_interrupted_run_says_how_to_go_on_and_resumes_from_its_records(
    experiment: dict[str, Any], launcher: StandIn
) -> None:
    launcher.code, launcher.reach = -2, 2  # SIGINT after step 2
    stopped = api.run(experiment, dp=1, tracking=False)
    assert stopped.status == RunStatus.INTERRUPTED and stopped.steps == 2
    assert "interrupted at step 2/4" in stopped.messages[0] and "resume" in stopped.messages[0]
    assert interrupts.unfinished() == stopped.messages[:1]

    launcher.code, launcher.reach = 0, None
    resumed = api.resume(stopped.folder, dp=1)
    assert resumed.status == RunStatus.SUCCEEDED and resumed.steps == 4
    segments = RunFolder(resumed.folder).state().segments
    assert [(s.start_step, s.returncode, s.end_step) for s in segments] == [(0, -2, 2), (2, 0, 4)]
    assert api.resume(stopped.folder).status == RunStatus.SUCCEEDED  # done: nothing launched
    assert len(launcher.launched) == 2


def test_a_failed_launch_keeps_its_log_tail_and_is_resumed_by_the_next_submission(
    experiment: dict[str, Any], launcher: StandIn
) -> None:
    launcher.code, launcher.reach, launcher.log = 1, 1, "Traceback: boom\n"
    failed = api.run(experiment, dp=1, tracking=False)
    assert failed.status == RunStatus.FAILED and failed.returncode == 1
    assert "exit status 1" in failed.messages[-1] and "boom" in failed.messages[-1]

    launcher.code, launcher.reach = 0, None
    again = api.run(experiment, dp=1, tracking=False)
    assert again.answered_from == failed.run_name and again.status == RunStatus.SUCCEEDED
    assert [s.returncode for s in RunFolder(failed.folder).state().segments] == [1, 0]


def test_the_held_state_is_what_the_file_holds(
    experiment: dict[str, Any], launcher: StandIn
) -> None:
    result = api.run(experiment, dp=1, tracking=False)
    folder = RunFolder(result.folder)
    reopened = lifecycle.Run.open(folder)
    assert reopened.state.to_dict() == folder.state().to_dict()
    assert reopened.state.status == RunStatus.SUCCEEDED and not reopened.state.tracking_enabled
    before = (folder.path / RUN_FILE).stat().st_mtime_ns
    reopened.commit(status=RunStatus.SUCCEEDED)  # what it holds already: nothing written
    assert (folder.path / RUN_FILE).stat().st_mtime_ns == before


def test_a_follower_node_trains_beside_node_zero_and_writes_no_records(
    experiment: dict[str, Any], launcher: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Launch] = []

    def stand_in(launch: Launch) -> int:
        started.append(launch)
        return 0

    monkeypatch.setattr(segment, "run_local", stand_in)
    experiment["resources"].update(
        launcher="multinode", nodes=2, node_rank=1, rdzv_endpoint="127.0.0.1:29400"
    )
    result = api.run(experiment, dp=2, tracking=False)
    assert result.status == RunStatus.SUCCEEDED and result.mlflow_run_id is None
    assert result.messages == ["node 1 of 2: node 0 keeps this run's records and tracking"]
    (follower,) = started
    assert follower.on_processes is None and follower.log_path.name == "launch-node1.log"
    folder = RunFolder(result.folder)
    assert not folder.exists() and not (folder.path / RUN_FILE).exists()
    assert launcher.launched == []  # node 0's launcher, which records, never ran here
