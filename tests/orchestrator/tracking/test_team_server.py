"""The team tracking server (orchestrator.tracking.team_server, scripts/tracking_server.sh):
its checks, and the server the script starts on a private PostgreSQL cluster under load.

The load: 20 writers, 2 guard readers and 2 agents listing runs, all at once for
:data:`LOAD_S` seconds. A writer is a run folder whose records grow as a trainer appends
them (steps.jsonl, then metrics.jsonl), synced by :class:`Tracker` as training syncs it:
20 real trainings would need far more than the 2 cores these tests run on, and the tracking
side of a run is exactly this (the tracker reads nothing else of a run folder).
"""

from __future__ import annotations

import socket
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from mlflow import MlflowClient

from benchmarks.object_store import BUCKET, ObjectStore, local_object_store
from orchestrator.errors import EXIT_TRACKING, TrackingError
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.guard.tracker_io import load_runs
from orchestrator.run.launch import free_port
from orchestrator.run.lifecycle import Run
from orchestrator.tracking import postgres_cluster, team_server
from orchestrator.tracking.mlflow_names import (
    METRIC_DATA_WAIT,
    METRIC_LOSS,
    METRIC_TOKENS_PER_S,
    TAG_KIND,
    TAG_RUN_FOLDER,
)
from orchestrator.tracking.store_reader import training_run_ids
from orchestrator.tracking.tracker import Tracker
from pipeline.errors import ConfigError
from tests.support import REPO
from tests.support.mlflow_server import RunningServer, serving
from tests.support.postgres import TemporaryPostgres
from tests.support.processes import forked_process_context
from tests.support.tracked_folders import METRICS_PER_STEP, make_folder, write_metrics, write_steps

WRITERS = 20
GUARDS = 2
AGENTS = 2
LOAD_S = 20.0
"""How long the writers keep writing (each finishes its round, then ends its run)."""
STEPS_PER_ROUND = 3
"""Steps a writer appends between two syncs."""
EXPERIMENT = "team-load"
ARTIFACTS_PREFIX = "mlflow-artifacts"
ALLOWED_HOST = "mlflow.team.test"
"""The host name clients use for the module's server (``--allowed-hosts``)."""
TRAINING_RUNS = f"tags.`{TAG_KIND}` = 'run'"


# -- the checks -------------------------------------------------------------------------------


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_database_is_said_before_mlflow_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    uri = f"postgresql://zephon:secret@127.0.0.1:{closed_port()}/mlflow"
    assert team_server.main(["--backend-store-uri", uri, "--port", str(free_port())]) == (
        EXIT_TRACKING
    )
    error = capsys.readouterr().err
    assert "is not reachable" in error and "--init-cluster" in error
    assert "secret" not in error and "zephon:***@" in error


def test_a_port_in_use_is_refused() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(TrackingError, match="another server uses the port"):
            team_server.check_port_free("127.0.0.1", taken.getsockname()[1])


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # `import` fails
    with pytest.raises(TrackingError, match=r"pip install -e '\.\[team\]'"):
        team_server.check_database("postgresql://zephon@127.0.0.1:5432/mlflow")


def test_no_database_and_other_stores_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(team_server.DB_URI_ENV, raising=False)
    assert team_server.main([]) == EXIT_TRACKING
    assert "--init-cluster DIR" in capsys.readouterr().err
    with pytest.raises(TrackingError, match="not a PostgreSQL URI"):
        team_server.check_database("sqlite:///mlflow.db")


def test_the_server_command_names_the_driver_and_proxies_the_artifacts(tmp_path: Path) -> None:
    command = team_server.server_command(
        "postgresql://u@db/mlflow",
        "s3://bucket/mlflow",
        host="0.0.0.0",
        port=5000,
        workers=2,
        allowed_hosts="mlflow.internal",
    )
    allowed = command[command.index("--allowed-hosts") + 1].split(",")
    assert allowed[0] == "mlflow.internal" and "127.0.0.1:*" in allowed  # MLflow's default kept
    assert command[command.index("--backend-store-uri") + 1] == "postgresql+psycopg2://u@db/mlflow"
    assert command[command.index("--artifacts-destination") + 1] == "s3://bucket/mlflow"
    assert "--serve-artifacts" in command  # clients need no S3 keys
    local = team_server.server_command(
        "sqlite:///x.db", str(tmp_path / "a"), host="127.0.0.1", port=1, workers=1
    )
    assert local[local.index("--artifacts-destination") + 1] == str(tmp_path / "a")
    assert (tmp_path / "a").is_dir() and "sqlite:///x.db" in local
    assert "--allowed-hosts" not in local


def test_a_cluster_is_not_created_over_other_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    cluster = postgres_cluster.PostgresCluster(tmp_path, free_port())
    with pytest.raises(TrackingError, match="not empty"):
        cluster.init()


# -- the script's server under load ----------------------------------------------------------


@dataclass
class TeamServer:
    """The server the script started, and the S3 bucket holding its artifacts."""

    uri: str
    artifacts: ObjectStore


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TeamServer]:
    """``scripts/tracking_server.sh --init-cluster DIR --artifacts s3://...``: PostgreSQL created
    and started in a temporary folder, MLflow on it (2 workers) keeping the artifacts in a
    local S3 endpoint (moto's); all stopped after the module."""
    work = tmp_path_factory.mktemp("team")
    postgres = TemporaryPostgres()  # its folder and port; the script creates the cluster
    port = free_port()
    command = [
        "bash",
        str(REPO / "scripts" / "tracking_server.sh"),
        "--init-cluster",
        str(postgres.cluster.folder),
        "--pg-port",
        str(postgres.cluster.port),
        "--artifacts",
        f"s3://{BUCKET}/{ARTIFACTS_PREFIX}",
        "--port",
        str(port),
        "--workers",
        "2",
        "--allowed-hosts",
        f"{ALLOWED_HOST}:{port}",
    ]
    try:
        # the endpoint and its keys reach the server through the environment, as on S3
        with (
            local_object_store() as store,
            serving(command, RunningServer(f"http://127.0.0.1:{port}", work / "server.log")) as up,
        ):
            yield TeamServer(up.uri, store)
    finally:
        postgres.close()


def _status_for_host(uri: str, host: str) -> int:
    """The HTTP status the server answers a search of experiments sent with ``Host: host``."""
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/experiments/search?max_results=1", headers={"Host": host}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_server_answers_the_allowed_host_names_only(team: TeamServer) -> None:
    port = team.uri.rsplit(":", 1)[1]
    assert _status_for_host(team.uri, f"{ALLOWED_HOST}:{port}") == 200
    assert _status_for_host(team.uri, f"elsewhere.example:{port}") >= 400


def _write(uri: str, folder_path: str, deadline: float, results: Any) -> None:
    """A writer: a run folder appended to and synced in rounds until ``deadline``, then
    ended as a trainer ends it (the final sync, counted in ``syncs``)."""
    try:
        folder = RunFolder(folder_path)
        tracker = Tracker(uri, EXPERIMENT)
        tracker.start(Run.open(folder))
        steps = syncs = 0
        while not syncs or time.monotonic() < deadline:  # one round at least, however late
            new = range(steps + 1, steps + STEPS_PER_ROUND + 1)
            write_steps(folder, new)
            write_metrics(folder, new)
            steps += STEPS_PER_ROUND
            tracker.sync(Run.open(folder))
            syncs += 1
        Run.open(folder).commit(status=RunStatus.SUCCEEDED)
        tracker.finish(Run.open(folder), RunStatus.SUCCEEDED)
        results.put({"role": "writer", "steps": steps, "syncs": syncs + 1})
    except BaseException:
        results.put({"role": "writer", "error": traceback.format_exc()})


def _read_as_guard(uri: str, deadline: float, results: Any) -> None:
    """A guard: the training runs read as the comparison reads them, again and again."""
    try:
        tracker = Tracker(uri, EXPERIMENT)
        reads = most = 0
        while not reads or time.monotonic() < deadline:  # one read at least
            try:
                ids = training_run_ids(uri, experiment=EXPERIMENT)
            except ConfigError:  # no run yet
                time.sleep(0.2)
                continue
            summaries = load_runs(tracker, ids)
            # by folder: runs of one mixture, seed and dp share their MLflow run name
            seen = Counter(s.folder or s.run_id for s in summaries)
            assert max(seen.values()) == 1, f"a run seen twice in one read: {seen}"
            reads += 1
            most = max(most, len(summaries))
        results.put({"role": "guard", "reads": reads, "most": most})
    except BaseException:
        results.put({"role": "guard", "error": traceback.format_exc()})


def _list_as_agent(uri: str, deadline: float, results: Any) -> None:
    """An agent: the experiment's training runs listed, again and again."""
    try:
        tracker = Tracker(uri, EXPERIMENT)
        listings = 0
        while not listings or time.monotonic() < deadline:
            runs = tracker.find_runs(TRAINING_RUNS)
            # A run just created gets its folder's tags a moment later: untagged ones only
            # count by id.
            folders = Counter(
                r.data.tags[TAG_RUN_FOLDER] for r in runs if TAG_RUN_FOLDER in r.data.tags
            )
            ids = Counter(r.info.run_id for r in runs)
            assert max([*folders.values(), *ids.values(), 1]) == 1, f"listed twice: {folders}"
            listings += 1
            time.sleep(0.1)
        results.put({"role": "agent", "listings": listings})
    except BaseException:
        results.put({"role": "agent", "error": traceback.format_exc()})


@pytest.mark.timeout(300)
def test_twenty_writers_guards_and_agents_lose_nothing_and_duplicate_nothing(
    team: TeamServer, tmp_path: Path
) -> None:
    folders = [make_folder(tmp_path, f"writer-{n:02d}", steps=0) for n in range(WRITERS)]
    context = forked_process_context(__name__)
    results = context.Queue()
    deadline = time.monotonic() + LOAD_S
    workers = [
        *(
            context.Process(target=_write, args=(team.uri, str(f.path), deadline, results))
            for f in folders
        ),
        *(
            context.Process(target=_read_as_guard, args=(team.uri, deadline, results))
            for _ in range(GUARDS)
        ),
        *(
            context.Process(target=_list_as_agent, args=(team.uri, deadline, results))
            for _ in range(AGENTS)
        ),
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    elapsed = time.monotonic() - started
    errors = [r["error"] for r in reports if "error" in r]
    assert not errors, "\n".join(errors)

    # Every run folder is one MLflow run, holding every point the folder holds, once.
    client = MlflowClient(tracking_uri=team.uri)
    tracker = Tracker(team.uri, EXPERIMENT)
    runs = tracker.find_runs(TRAINING_RUNS)
    by_folder = Counter(r.data.tags[TAG_RUN_FOLDER] for r in runs)
    duplicates = sum(count - 1 for count in by_folder.values())
    assert duplicates == 0 and set(by_folder) == {str(f.path.resolve()) for f in folders}
    written = read = 0
    for folder in folders:
        run_id = folder.state().mlflow_run_id
        steps = sorted(folder.steps())
        assert steps == list(range(1, len(steps) + 1)) and steps
        written += len(steps) * METRICS_PER_STEP
        run = client.get_run(run_id)
        # its datasets, logged by twenty runs at once into one experiment new to them
        assert sorted(d.dataset.name for d in run.inputs.dataset_inputs) == ["code", "docs"]
        keys = run.data.metrics
        assert len(keys) == METRICS_PER_STEP, sorted(keys)
        histories = {key: client.get_metric_history(run_id, key) for key in keys}
        for key, points in histories.items():
            assert sorted(p.step for p in points) == steps, (folder.name, key)
            read += len(points)
        values = {key: {p.step: p.value for p in points} for key, points in histories.items()}
        assert values[METRIC_LOSS] == {s: pytest.approx(10.0 / s) for s in steps}
        assert values[METRIC_TOKENS_PER_S] == {s: 1000.0 + s for s in steps}
        assert values[METRIC_DATA_WAIT] == {s: pytest.approx(0.001 * s) for s in steps}
    assert read == written

    # The guard sees each run exactly once, with its records (artifacts, kept on S3).
    summaries = load_runs(tracker, training_run_ids(team.uri, experiment=EXPERIMENT))
    assert Counter(s.folder for s in summaries) == Counter(str(f.path.resolve()) for f in folders)
    assert all(len(s.digests) == len(RunFolder(s.folder).steps()) for s in summaries)
    stored = boto3.client("s3", endpoint_url=team.artifacts.endpoint).list_objects_v2(
        Bucket=BUCKET, Prefix=ARTIFACTS_PREFIX
    )
    assert sum(o["Key"].endswith("/zephon/steps.jsonl") for o in stored["Contents"]) == WRITERS

    by_role = {
        role: [r for r in reports if r["role"] == role] for role in ("writer", "guard", "agent")
    }
    syncs = sum(r["syncs"] for r in by_role["writer"])
    guard_reads = sum(r["reads"] for r in by_role["guard"])
    listings = sum(r["listings"] for r in by_role["agent"])
    print(
        f"team server load: {WRITERS} writers + {GUARDS} guards + {AGENTS} agents for "
        f"{elapsed:.1f} s (writing {LOAD_S:.0f} s): {len(runs)} runs, {syncs} syncs, "
        f"{written} metric points written, {read} read back, duplicated runs {duplicates}, "
        f"{guard_reads} guard reads (up to {max(r['most'] for r in by_role['guard'])} runs "
        f"each, none seen twice), {listings} agent listings"
    )
    assert guard_reads > 0 and listings > 0
