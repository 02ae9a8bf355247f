"""orchestrator.tracking against real MLflow stores: embedded SQLite, and one real server.

Run folders are synthetic (the JSONL formats of orchestrator.experiment.runfolder / titan.runlog);
everything else is real: MlflowClient, SQLite, artifacts on disk, HTTP to `mlflow server`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from orchestrator.errors import EXIT_INVALID, ExperimentError, TrackingError, TrackingUnavailable
from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.experiment.runfolder import (
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
)
from orchestrator.failpoints import Failpoint
from orchestrator.run.lifecycle import Run
from orchestrator.run.segment_tracking import SYNC_EVERY_S, SegmentTracking, TrackingState
from orchestrator.tracking import metric_units, provenance
from orchestrator.tracking.mlflow_names import (
    METRIC_DATA_WAIT,
    METRIC_EVAL_AGGREGATE,
    METRIC_LOSS,
    METRIC_TOKENS_PER_S,
    TAG_CONTRACT,
    TAG_DATA_FINGERPRINT,
    TAG_DEVICE,
    TAG_DP_HISTORY,
    TAG_DP_SIZE,
    TAG_GIT,
    TAG_KIND,
    TAG_RUN_FOLDER,
    TAG_STATUS,
    TAG_STEPS,
    TAG_SWEEP,
    TAG_VARIANT,
    TAG_VERSIONS,
    eval_metric,
)
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.store_reader import training_run_ids
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import check_tracking, resolve_uri
from pipeline.errors import ConfigError
from tests.support.mlflow_server import mlflow_server
from tests.support.processes import forked_process_context
from tests.support.tracked_folders import (
    METRICS_PER_STEP,
    append_records,
    history,
    make_folder,
    write_evals,
    write_metrics,
    write_steps,
)

REAL_GIT_REVISION = provenance.git_revision  # before the autouse fixture replaces it


@pytest.fixture(autouse=True)
def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests do not run git in the checkout; git_revision itself is tested on its own."""
    monkeypatch.setattr(provenance, "git_revision", lambda cwd=None: "test-rev")


def cursor(folder: RunFolder) -> dict[str, Any]:
    t = folder.state().tracking
    return {"metrics_step": t.metrics_step, "eval_step": t.eval_step}


def closed_port_uri() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- tests ------------------------------------------------------------------------------------


def _open_store(uri: str, barrier: Any) -> None:
    import mlflow  # noqa: F401  (imported before the barrier: both open the store together)

    barrier.wait(timeout=60)
    check_tracking(uri)


def test_processes_opening_a_new_store_at_once_all_get_it(tmp_path: Path) -> None:
    """Jobs of a sweep or of the job service start together on a new database: MLflow's
    migrations must run once, not race (they fail with ``dimension_attributes`` then)."""
    uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"
    ctx = forked_process_context(__name__)
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_open_store, args=(uri, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    assert [p.exitcode for p in procs] == [0, 0]
    assert MlflowClient(tracking_uri=uri).search_experiments()  # migrated: Default exists


def test_resolve_uri(tmp_path: Path) -> None:
    assert resolve_uri(None, tmp_path) == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    assert resolve_uri("sqlite:///sub/x.db", tmp_path) == f"sqlite:///{tmp_path.resolve()}/sub/x.db"
    assert resolve_uri("sqlite:////abs/x.db", tmp_path) == "sqlite:////abs/x.db"
    assert resolve_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"


def test_names_land_where_documented(
    db_uri: str, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # artifacts must not depend on the working directory
    folder = make_folder(tmp_path)
    write_evals(folder, [5, 10])
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder), tags={TAG_DEVICE: "cuda:H200", "zephon.sweep": "s1"})

    state = folder.state()
    assert state.mlflow_run_id == run_id
    assert state.tracking_uri == db_uri and state.mlflow_experiment == experiment_name

    counts = tracker.sync(Run.open(folder))
    assert counts == {"metrics": 10 * METRICS_PER_STEP + 2 * 3, "steps": 10, "evals": 2}
    Run.open(folder).commit(status="succeeded")
    tracker.finish(Run.open(folder), "succeeded")

    client = MlflowClient(tracking_uri=db_uri)
    run = client.get_run(run_id)
    # named by what it varies (this record has no experiment name nor seeds), not by folder
    assert run.info.run_name == "run-code0.50-docs0.50-dp2" and folder.name == "run-a"
    assert run.info.status == MlflowStatus.FINISHED
    params = run.data.params
    assert params["mix.code"] == "0.5" and params["mix.docs"] == "0.5"
    assert params["data.datasets.code.fingerprint"] == "f00d"
    assert params["data.datasets.docs.paths.0"] == "x.md"
    assert params["data.tokenizer.eos"] == "100257"
    assert params["data.shuffle"] == "true"

    tags = run.data.tags
    assert tags[TAG_KIND] == "run"
    assert tags[TAG_CONTRACT] == "ab" * 32 and tags[TAG_VARIANT] == "cd" * 32
    assert tags[TAG_RUN_FOLDER] == str(folder.path.resolve())
    assert set(json.loads(tags[TAG_VERSIONS])) == {
        "zephon",
        "torch",
        "torchtitan",
        "mlflow",
        "tiktoken",
    }
    assert json.loads(tags[TAG_VERSIONS])["mlflow"] == "3.17.2"
    assert tags[TAG_GIT] == "test-rev"
    assert tags[TAG_DEVICE] == "cuda:H200" and tags["zephon.sweep"] == "s1"
    assert tags[TAG_DATA_FINGERPRINT] == "fp10" and tags[TAG_STEPS] == "10"
    assert tags[TAG_DP_SIZE] == "2" and tags[TAG_DP_HISTORY] == "2"
    assert tags[TAG_STATUS] == "succeeded"
    assert "mlflow.parentRunId" not in tags

    assert history(client, run_id, METRIC_LOSS) == [(s, 10.0 / s) for s in range(1, 11)]
    assert history(client, run_id, METRIC_TOKENS_PER_S) == [(s, 1000.0 + s) for s in range(1, 11)]
    assert history(client, run_id, METRIC_DATA_WAIT) == [(s, 0.001 * s) for s in range(1, 11)]
    assert len(history(client, run_id, "loss_metrics/global_max_loss")) == 10
    assert len(history(client, run_id, "memory/max_active_GiB")) == 10
    assert history(client, run_id, eval_metric("code")) == [(5, 6.0), (10, 11.0)]
    assert history(client, run_id, METRIC_EVAL_AGGREGATE) == [(5, 6.5), (10, 11.5)]
    assert set(run.data.metrics) == {
        METRIC_LOSS,
        METRIC_TOKENS_PER_S,
        METRIC_DATA_WAIT,
        "loss_metrics/global_max_loss",
        "grad_norm",
        "memory/max_active_GiB",
        "mfu_pct",
        eval_metric("code"),
        eval_metric("docs"),
        METRIC_EVAL_AGGREGATE,
    }

    listed = {a.path for a in client.list_artifacts(run_id, "zephon")}
    assert listed == {"zephon/experiment.json", "zephon/steps.jsonl", "zephon/eval.jsonl"}
    assert {a.path for a in client.list_artifacts(run_id, "logs")} == {"logs/launch.log"}
    store_dir = Path(db_uri.removeprefix("sqlite:///")).parent
    stored = (
        store_dir / "mlruns" / experiment_name / run_id / "artifacts" / "zephon" / "steps.jsonl"
    )
    assert stored.read_text() == (folder.titan_dir / RUN_SUBDIR / STEPS_FILE).read_text()
    assert not (elsewhere / "mlruns").exists()


def test_sync_is_incremental_and_idempotent(
    db_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    assert tracker.sync(Run.open(folder))["steps"] == 10
    assert tracker.sync(Run.open(folder)) == {"metrics": 0, "steps": 0, "evals": 0}
    assert cursor(folder) == {"metrics_step": 10, "eval_step": None}

    write_steps(folder, range(11, 16))
    write_metrics(folder, range(11, 16))
    write_evals(folder, [15])
    assert tracker.sync(Run.open(folder)) == {
        "metrics": 5 * METRICS_PER_STEP + 3,
        "steps": 5,
        "evals": 1,
    }
    assert Tracker(db_uri, experiment_name).sync(Run.open(folder)) == {
        "metrics": 0,
        "steps": 0,
        "evals": 0,
    }

    # Step 16's data is handed over (steps.jsonl, and the trainer's data line in
    # metrics.jsonl) but its loss is not in yet: held back.
    write_steps(folder, range(16, 17))
    append_records(
        folder.titan_dir / RUN_SUBDIR / METRICS_FILE, [{"step": 16, "zephon/tokens": 1024}]
    )
    assert tracker.sync(Run.open(folder))["steps"] == 0
    write_metrics(folder, range(16, 17))
    assert tracker.sync(Run.open(folder))["steps"] == 1

    # Step 17 never gets a metrics line (the run dies): the final sync sends what exists.
    write_steps(folder, range(17, 18))
    assert tracker.sync(Run.open(folder), final=True) == {"metrics": 1, "steps": 1, "evals": 0}

    client = MlflowClient(tracking_uri=db_uri)
    assert history(client, run_id, METRIC_LOSS) == [(s, 10.0 / s) for s in range(1, 17)]
    assert [s for s, _ in history(client, run_id, METRIC_DATA_WAIT)] == list(range(1, 18))
    assert history(client, run_id, METRIC_EVAL_AGGREGATE) == [(15, 16.5)]
    assert client.get_run(run_id).data.tags[TAG_STEPS] == "17"


def test_metrics_go_in_batches(
    db_uri: str, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path, steps=300)
    write_evals(folder, list(range(10, 301, 10)))
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))

    calls: list[int] = []
    original = MlflowClient.log_batch

    def counting(
        self: MlflowClient, run_id: str, metrics: Any = (), *args: Any, **kwargs: Any
    ) -> Any:
        calls.append(len(metrics))
        return original(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", counting)
    t0 = time.perf_counter()
    counts = tracker.sync(Run.open(folder))
    elapsed = time.perf_counter() - t0
    points = 300 * METRICS_PER_STEP + 30 * 3
    assert counts == {"metrics": points, "steps": 300, "evals": 30}
    metric_calls = [n for n in calls if n]
    assert sum(metric_calls) == points
    assert max(metric_calls) <= 1000
    assert len(metric_calls) == -(-points // 1000)  # 2190 points: 3 calls, none per metric
    assert len(calls) <= len(metric_calls) + 1  # plus one call for the progress tags
    assert len(history(MlflowClient(tracking_uri=db_uri), run_id, METRIC_LOSS)) == 300
    print(f"\nsync of {points} points: {len(calls)} log_batch calls, {elapsed:.2f} s")


class Killed(BaseException):
    """A kill of the syncing process: no handler of the code under test catches it."""


def test_a_sync_killed_inside_a_unit_larger_than_a_batch_sends_no_point_twice(
    db_uri: str, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An eval over 1,200 datasets is one unit of 1,201 points, two MLflow batches. A kill
    after MLflow accepted the first, before ``run.json`` said so, must not send those 1,000
    points again, nor lose the rest."""
    folder = make_folder(tmp_path, steps=2)
    domains = {f"d{i:04}": float(i) for i in range(1200)}
    append_records(
        folder.titan_dir / RUN_SUBDIR / "eval.jsonl",
        [{"step": 2, "bpb": domains, "aggregate_bpb": 0.5}],
    )
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    reached: list[int] = []

    def killed_inside_the_eval(point: Failpoint, step: int) -> None:
        reached.append(step)
        if len(reached) == 2:  # the training steps' batch, then the eval's first 1,000
            raise Killed

    monkeypatch.setattr(metric_units.failpoints, "reach", killed_inside_the_eval)
    with pytest.raises(Killed):
        tracker.sync(Run.open(folder), final=True)
    killed = folder.state().tracking
    assert (killed.metrics_step, killed.eval_step) == (2, None)
    assert killed.in_flight is not None  # MLflow has the batch; run.json does not say so yet
    counts = tracker.sync(Run.open(folder), final=True)
    assert counts["evals"] == 1
    client = MlflowClient(tracking_uri=db_uri)
    for name, value in [("d0000", 0.0), ("d0999", 999.0), ("d1000", 1000.0), ("d1199", 1199.0)]:
        assert history(client, run_id, eval_metric(name)) == [(2, value)]
    assert history(client, run_id, METRIC_EVAL_AGGREGATE) == [(2, 0.5)]
    assert history(client, run_id, METRIC_LOSS) == [(1, 10.0), (2, 5.0)]
    tracking = folder.state().tracking
    assert (tracking.eval_step, tracking.partial, tracking.in_flight) == (2, None, None)


def test_resume_continues_the_same_run(db_uri: str, experiment_name: str, tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    tracker.sync(Run.open(folder))
    # Killed while step 11 trained: its data line is in, its loss never came.
    write_steps(folder, range(11, 12))
    Run.open(folder).commit(status="interrupted")
    tracker.finish(Run.open(folder), "interrupted")
    client = MlflowClient(tracking_uri=db_uri)
    assert client.get_run(run_id).info.status == MlflowStatus.KILLED
    assert cursor(folder)["metrics_step"] == 10  # step 11 stays pending for the resume

    # Resumed from the checkpoint of step 8 on one rank: steps 9..10 are redone.
    Run.open(folder).commit(
        status="running",
        segments=[{"dp_size": 2, "start_step": 0}, {"dp_size": 1, "start_step": 8}],
    )
    write_steps(folder, range(9, 11), dp_size=1)
    write_steps(folder, range(12, 21), dp_size=1)
    write_metrics(folder, range(9, 21), loss_scale=11.0)
    again = Tracker(db_uri, experiment_name)
    assert again.start(Run.open(folder), tags={TAG_DEVICE: "cpu"}) == run_id
    assert client.get_run(run_id).info.status == MlflowStatus.RUNNING
    assert (
        again.sync(Run.open(folder))["steps"] == 10
    )  # 11..20; 9 and 10 were sent before the resume

    run = client.get_run(run_id)
    assert run.data.tags[TAG_DP_HISTORY] == "2,1"
    assert run.data.tags[TAG_DP_SIZE] == "1"
    assert run.data.tags[TAG_STATUS] == "running"
    loss = history(client, run_id, METRIC_LOSS)
    assert [s for s, _ in loss] == list(range(1, 21))  # one point per step, none twice
    assert dict(loss)[10] == 1.0 and dict(loss)[11] == 1.0
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_parent_run_and_long_params(db_uri: str, experiment_name: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=db_uri)
    parent = client.create_run(client.create_experiment(experiment_name + "-sweep")).info.run_id
    folder = RunFolder(tmp_path / "long")
    folder.write_experiment(
        ExperimentRecord.new(
            contract={"datasets": [{"name": "code", "paths": ["p" * 7000]}]},
            mixture={"code": 1.0},
            contract_fingerprint="ab",
            variant="cd",
        )
    )
    run_id = Tracker(db_uri, experiment_name).start(Run.open(folder), parent_run_id=parent)
    run = client.get_run(run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.params["data.datasets.code.paths.0"] == "p" * 6000  # MLflow's limit
    # Nothing trained yet: a sync sends nothing and does not fail on the missing files.
    assert Tracker(db_uri, experiment_name).sync(Run.open(folder), final=True)["metrics"] == 0


def test_dead_server_fails_fast_and_loses_nothing(
    db_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    dead = closed_port_uri()
    t0 = time.perf_counter()
    with pytest.raises(TrackingUnavailable) as error:
        check_tracking(dead, timeout_s=2)
    assert time.perf_counter() - t0 < 5
    message = str(error.value)
    assert dead in message and "offline_ok" in message and "zephon sync" in message

    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    tracker.sync(Run.open(folder))
    write_steps(folder, range(11, 21))
    write_metrics(folder, range(11, 21))
    write_evals(folder, [20])
    before = folder.state().tracking
    with pytest.raises(TrackingUnavailable, match="zephon sync"):
        Tracker(dead, experiment_name).sync(Run.open(folder))  # the server went away mid-training
    assert folder.state().tracking == before

    Run.open(folder).commit(status="failed")
    assert Run.open(folder).sync() == {
        "metrics": 10 * METRICS_PER_STEP + 3,
        "steps": 10,
        "evals": 1,
    }
    assert Run.open(folder).sync() == {"metrics": 0, "steps": 0, "evals": 0}
    client = MlflowClient(tracking_uri=db_uri)
    assert [s for s, _ in history(client, run_id, METRIC_LOSS)] == list(range(1, 21))
    assert client.get_run(run_id).info.status == MlflowStatus.FAILED


def test_offline_from_launch_is_created_by_zephon_sync(
    db_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    folder = make_folder(tmp_path)
    write_evals(folder, [10])
    dead = closed_port_uri()
    with pytest.raises(TrackingUnavailable):
        Tracker(dead, experiment_name).start(Run.open(folder), tags={TAG_DEVICE: "cuda:X"})
    assert folder.state().tracking_uri == dead and folder.state().mlflow_run_id is None

    Run.open(folder).commit(
        tracking_uri=db_uri, status="succeeded"
    )  # the user points it at a live store
    assert Run.open(folder).sync() == {
        "metrics": 10 * METRICS_PER_STEP + 3,
        "steps": 10,
        "evals": 1,
    }
    run = MlflowClient(tracking_uri=db_uri).get_run(folder.state().mlflow_run_id)
    assert run.info.status == MlflowStatus.FINISHED
    assert run.data.tags[TAG_DEVICE] == "cuda:X"  # the launch's tags were kept for later
    assert run.data.params["mix.code"] == "0.5"


def test_offline_from_the_start_keeps_its_sweep_parent_and_device_on_sync(
    db_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    """What ``api.run`` leaves when the store was unreachable at launch (``offline_ok``): no
    Tracker.start at all, only run.json's sweep, parent and segment device. ``zephon sync``
    creates the run as an online launch would have: same tags, same parent."""
    client = MlflowClient(tracking_uri=db_uri)
    artifacts = (tmp_path / "artifacts").as_uri()  # MLflow's default is ./mlruns, the checkout
    sweep_id = client.create_experiment(experiment_name, artifact_location=artifacts)
    parent = client.create_run(sweep_id, tags={TAG_KIND: "sweep"}).info.run_id
    online, offline = make_folder(tmp_path, "online"), make_folder(tmp_path, "offline")
    for folder in (online, offline):
        Run.open(folder).commit(
            sweep="mix-7",
            parent_run_id=parent,
            segments=[{"dp_size": 2, "start_step": 0, "device": "cuda:X"}],
            tracking_uri=closed_port_uri(),
            mlflow_experiment=experiment_name,
        )
    Tracker(db_uri, experiment_name).start(Run.open(online))
    Run.open(offline).commit(tracking_uri=db_uri, status="succeeded")  # the store is back
    Run.open(offline).sync()
    runs = {f.name: client.get_run(f.state().mlflow_run_id).data.tags for f in (online, offline)}
    assert runs["offline"][TAG_SWEEP] == "mix-7" and runs["offline"][TAG_DEVICE] == "cuda:X"
    assert runs["offline"]["mlflow.parentRunId"] == parent
    different = {
        k: (v, runs["offline"].get(k))
        for k, v in runs["online"].items()
        if runs["offline"].get(k) != v and k not in (TAG_RUN_FOLDER, TAG_STATUS, "mlflow.runName")
    }
    assert not different  # the same start tags as the run tracked from its launch
    found = training_run_ids(db_uri, experiment=experiment_name, sweep="mix-7")
    assert set(found) == {f.state().mlflow_run_id for f in (online, offline)}


def test_failure_between_batches_resends_only_the_rest(
    db_uri: str, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path, steps=400)  # 2800 points: three batches
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    original = MlflowClient.log_batch
    sent = []

    def flaky(self: MlflowClient, run_id: str, metrics: Any = (), *args: Any, **kwargs: Any) -> Any:
        if metrics and sent:
            raise MlflowException("API request to http://x/api failed with exception boom")
        if metrics:
            sent.append(len(metrics))
        return original(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", flaky)
    with pytest.raises(TrackingUnavailable):
        tracker.sync(Run.open(folder))
    first = cursor(folder)["metrics_step"]
    assert first == sent[0] // METRICS_PER_STEP  # only whole steps of the accepted batch
    monkeypatch.setattr(MlflowClient, "log_batch", original)
    assert tracker.sync(Run.open(folder))["steps"] == 400 - first
    client = MlflowClient(tracking_uri=db_uri)
    assert [s for s, _ in history(client, run_id, METRIC_LOSS)] == list(range(1, 401))


def test_rejections_are_tracking_errors_not_unavailable(
    db_uri: str, experiment_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    tracker.start(Run.open(folder))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise MlflowException("Invalid value", error_code=1000)  # INVALID_PARAMETER_VALUE

    monkeypatch.setattr(MlflowClient, "log_batch", refuse)
    with pytest.raises(TrackingError) as error:
        tracker.sync(Run.open(folder))
    assert not isinstance(error.value, TrackingUnavailable)
    assert cursor(folder)["metrics_step"] is None


@pytest.mark.parametrize(
    ("status", "mlflow_status"),
    [
        ("succeeded", MlflowStatus.FINISHED),
        ("failed", MlflowStatus.FAILED),
        ("interrupted", MlflowStatus.KILLED),
    ],
)
def test_finish_maps_status(
    db_uri: str, experiment_name: str, tmp_path: Path, status: str, mlflow_status: str
) -> None:
    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    tracker.finish(Run.open(folder), status)
    run = MlflowClient(tracking_uri=db_uri).get_run(run_id)
    assert run.info.status == mlflow_status and run.info.end_time is not None
    assert run.data.tags[TAG_STATUS] == status
    assert len(history(MlflowClient(tracking_uri=db_uri), run_id, METRIC_LOSS)) == 10


def test_runs_asked_for_that_are_not_there_are_invalid_requests(
    db_uri: str, experiment_name: str, tmp_path: Path
) -> None:
    """ConfigError: the CLI's exit code 2 ("invalid"), and still a ValueError for callers."""
    with pytest.raises(ConfigError, match="no MLflow experiment named") as error:
        training_run_ids(db_uri, experiment=experiment_name)
    assert isinstance(error.value, ValueError) and error.value.exit_code == EXIT_INVALID
    Tracker(db_uri, experiment_name).experiment_id()
    with pytest.raises(ConfigError, match="no training runs of sweep 'none' in experiment"):
        training_run_ids(db_uri, experiment=experiment_name, sweep="none")
    with pytest.raises(ConfigError, match="no MLflow run 'nope'"):
        Tracker(db_uri, experiment_name).download_run("nope", "zephon", tmp_path)


def test_finish_rejects_unknown_status(db_uri: str, experiment_name: str, tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    tracker = Tracker(db_uri, experiment_name)
    tracker.start(Run.open(folder))
    with pytest.raises(ValueError, match="unknown run status"):
        tracker.finish(Run.open(folder), "done")


def test_a_run_is_ended_only_as_finished_failed_or_killed(
    db_uri: str, experiment_name: str
) -> None:
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.new_run("parent", kind="sweep")
    with pytest.raises(ValueError, match="as 'RUNNING'; use one of FAILED, FINISHED, KILLED"):
        tracker.end_run(run_id, MlflowStatus.RUNNING)
    tracker.end_run(run_id, MlflowStatus.KILLED)
    assert MlflowClient(tracking_uri=db_uri).get_run(run_id).info.status == MlflowStatus.KILLED


def test_sync_folder_needs_a_tracked_folder(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    with pytest.raises(TrackingError, match="never tracked"):
        Run.open(folder).sync()
    with pytest.raises(ExperimentError, match="not a run folder"):
        Run.open(RunFolder(tmp_path / "nothing-here")).sync()


def test_check_tracking_sqlite(tmp_path: Path) -> None:
    uri = resolve_uri(None, tmp_path / "new" / "dir")
    check_tracking(uri)  # creates the folder and the database
    assert (tmp_path / "new" / "dir" / "mlflow.db").exists()
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        if os.access(readonly, os.W_OK):  # root ignores permissions
            pytest.skip("running as root: cannot make a folder unwritable")
        with pytest.raises(TrackingError, match="not writable"):
            check_tracking(resolve_uri(None, readonly))
    finally:
        readonly.chmod(0o700)


def test_git_revision_unknown_outside_a_checkout(tmp_path: Path) -> None:
    assert REAL_GIT_REVISION(tmp_path / "does-not-exist") == "unknown"


# -- against a real `mlflow server` -----------------------------------------------------------


@pytest.mark.timeout(240)
def test_real_server_round_trip(tmp_path: Path, experiment_name: str) -> None:
    with mlflow_server(tmp_path, f"sqlite:///{tmp_path / 'server.db'}") as server:
        uri = server.uri
        check_tracking(uri)
        folder = make_folder(tmp_path / "runs", steps=150)
        write_evals(folder, [50, 100, 150])
        tracker = Tracker(uri, experiment_name)
        run_id = tracker.start(Run.open(folder), tags={TAG_DEVICE: "cpu"})
        t1 = time.perf_counter()
        assert tracker.sync(Run.open(folder))["steps"] == 150
        print(f"sync of 150 steps over HTTP: {time.perf_counter() - t1:.2f} s")

        # The server "goes away" (a dead URI), training appends, nothing advances.
        write_steps(folder, range(151, 201))
        write_metrics(folder, range(151, 201))
        before = folder.state().tracking
        with pytest.raises(TrackingUnavailable):
            Tracker(closed_port_uri(), experiment_name).sync(Run.open(folder))
        assert folder.state().tracking == before

        Run.open(folder).commit(status="succeeded")
        assert Run.open(folder).sync() == {
            "metrics": 50 * METRICS_PER_STEP,
            "steps": 50,
            "evals": 0,
        }
        assert Run.open(folder).sync()["metrics"] == 0

        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(run_id)
        assert run.info.status == MlflowStatus.FINISHED
        assert run.data.tags[TAG_STATUS] == "succeeded" and run.data.tags[TAG_STEPS] == "200"
        assert [s for s, _ in history(client, run_id, METRIC_LOSS)] == list(range(1, 201))
        assert history(client, run_id, METRIC_EVAL_AGGREGATE) == [
            (50, 51.5),
            (100, 101.5),
            (150, 151.5),
        ]
        assert {a.path for a in client.list_artifacts(run_id, "zephon")} == {
            "zephon/experiment.json",
            "zephon/steps.jsonl",
            "zephon/eval.jsonl",
        }
        steps_copy = client.download_artifacts(run_id, "zephon/steps.jsonl", str(tmp_path / "dl"))
        assert (
            Path(steps_copy).read_text() == (folder.titan_dir / RUN_SUBDIR / STEPS_FILE).read_text()
        )

        # A run that starts while the server answers nothing trains on; once the server is
        # back, its next periodic sync creates its MLflow run and sends what it wrote.
        late = make_folder(tmp_path / "runs", name="run-late", steps=20)
        late_run = Run.open(late)
        server.pause()
        try:
            segment = SegmentTracking.start(
                Tracker(uri, experiment_name), late_run, offline_ok=True
            )
        finally:
            server.resume()
        assert (
            segment.state == TrackingState.PENDING and "training continues" in segment.messages[0]
        )
        assert late.state().mlflow_run_id is None
        segment.last_sync = -SYNC_EVERY_S  # the next periodic sync is due
        segment.sync_now_and_then(late_run)
        assert segment.state == TrackingState.SYNCED
        late_id = late.state().mlflow_run_id
        assert [s for s, _ in history(client, late_id, METRIC_LOSS)] == list(range(1, 21))

        # Dataset inputs go over HTTP too, once, in the run created late as well.
        for tracked in (run_id, late_id):
            inputs = client.get_run(tracked).inputs.dataset_inputs
            assert sorted((d.dataset.name, d.dataset.digest) for d in inputs) == [
                ("code", "f00d"),
                ("docs", "beef"),
            ]
        found = client.search_runs([tracker.experiment_id()], "dataset.name = 'code'")
        assert {r.info.run_id for r in found} == {run_id, late_id}
