"""A real two-mix sweep tracked on the team server (``tracking=team``: ``mlflow server`` on
PostgreSQL), with PostgreSQL killed (``pg_ctl stop -m immediate``, as a crash) and restarted
while the runs train.

One sweep, ~1 min on 2 cores: 2 mixes, ``zephon_mini`` trained 2 steps each on the shared
corpus (tests/support/sweeps.py's tiny sweep), the zephon launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.run.lifecycle import Run
from orchestrator.tracking.mlflow_names import TAG_KIND, TAG_RUN_FOLDER
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import check_tracking, resolve_uri
from sweeps.summary import SWEEP_FILE
from tests.support import REPO
from tests.support.mlflow_server import mlflow_server
from tests.support.postgres import TemporaryPostgres
from tests.support.sweeps import mixes_override, multirun_command, tiny_sweep_overrides
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(600)

TWO = ((1.0, 1.0, 1.0), (0.0, 0.0, 1.0))
"""The two mixes (in the corpus's domain order)."""
EXPERIMENT = "zephon"
"""``tracking.experiment``'s default: the sweep's, and the reference store's."""
MIN_DOWNTIME_S = 5.0
"""PostgreSQL stays down at least this long (MLflow's client retries a refused write after
2 s, then 4 s: the outage is met, not slipped through)."""
STORE_SPECIFIC = ("comparison_run_id", "tracking_uri")
"""Verdict fields that name the store or a run of it, not the decision (the rows' run ids too)."""


def wait_for(what: str, found: Callable[[], bool], sweep: subprocess.Popen[str], log: Path) -> None:
    """Poll ``found`` until it holds; fail (with the sweep's log) if the sweep ends first."""
    deadline = time.monotonic() + 300
    while not found():
        assert sweep.poll() is None, f"the sweep ended before {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} after 300 s"
        time.sleep(0.1)


def records(runs_root: Path) -> int:
    """The records the trainers of the run folders under ``runs_root`` wrote so far (steps,
    metrics, evals)."""
    folders = [RunFolder(p.parent) for p in runs_root.glob("*/run.json")]
    return sum(len(f.steps()) + len(f.metrics()) + len(f.evals()) for f in folders)


def training(runs_root: Path) -> bool:
    """Whether a run under ``runs_root`` is training: a step done (so its MLflow run is open),
    the eval of its newest step not yet written (so more records are coming)."""
    folders = [RunFolder(p.parent) for p in runs_root.glob("*/run.json")]
    return any(f.steps() and max(f.evals(), default=0) < max(f.steps()) for f in folders)


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """A comparison's decision, without what names its store (run ids, URIs) or what the
    runs' wall times estimate (what another seed costs: a restart lengthens a run)."""
    kept = {k: v for k, v in result.items() if k not in {*STORE_SPECIFIC, "cost_per_seed"}}
    kept["rows"] = [{k: v for k, v in row.items() if k != "run_ids"} for row in result["rows"]]
    kept["pairs"] = [
        {**pair, "next_step": {**pair["next_step"], "device_hours": None}}
        if pair.get("next_step")
        else pair
        for pair in result["pairs"]
    ]
    return kept


def histories(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the run ``run_id``: its (step, value) points, by step."""
    client = MlflowClient(tracking_uri=uri)
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        for key in client.get_run(run_id).data.metrics
    }


def undisturbed(folders: list[RunFolder], into: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The verdict an undisturbed sweep reaches, and its runs' ids by run name: the sweep's
    run folders, copied, each sent whole to a fresh embedded store, compared there."""
    uri = resolve_uri(None, into)
    check_tracking(uri)
    tracker = Tracker(uri, EXPERIMENT)
    run_ids = {}
    for folder in folders:
        copy = RunFolder(shutil.copytree(folder.path, into / folder.name))
        run_ids[copy.name] = tracker.start(
            Run.open(copy)
        )  # a run of another store: sent from the start
        tracker.finish(Run.open(copy), copy.state().status)
    result = compare_tracked(list(run_ids.values()), tracking_uri=uri, experiment=EXPERIMENT)
    return result, run_ids


def test_a_sweep_trains_through_a_postgres_restart_and_reaches_the_undisturbed_verdict(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """PostgreSQL is killed while a run trains (after its first step, before its last eval),
    and restarted once the trainers wrote more records with it down (and after
    :data:`MIN_DOWNTIME_S`); an agent lists the runs meanwhile. The sweep then ends as an
    undisturbed one: every run folder one MLflow run holding every metric point, and the
    same verdict.

    "Undisturbed" is established without a second sweep: training on CPU is deterministic
    (tests/e2e/test_sweeps_e2e.py reruns a sweep to the same fingerprints), so an undisturbed
    sweep leaves these very run folders, and what it logs is them sent to a store in one go.
    So the run folders are copied, sent whole to a fresh embedded store and compared there;
    a second sweep would add a minute of training to show the same thing.
    """
    built = corpus(tmp_path_factory.getbasetemp())
    domains = sorted(built)
    postgres = TemporaryPostgres().start()
    try:
        server_dir = tmp_path / "server"
        server_dir.mkdir()
        with mlflow_server(server_dir, postgres.uri) as server:
            command, sweep_dir = multirun_command(
                tmp_path,
                "team",
                "hydra/launcher=zephon",
                "tracking=team",
                *tiny_sweep_overrides(built),
                mixes_override(domains, *TWO),
            )
            log = tmp_path / "sweep.log"
            env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHON_TEAM_TRACKING_URI": server.uri}
            with log.open("w") as out:
                sweep = subprocess.Popen(
                    command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
                )
            runs_root = tmp_path / "runs"
            try:
                wait_for("a run training", lambda: training(runs_root), sweep, log)
                postgres.kill()
                killed_at, records_then = time.monotonic(), records(runs_root)
                listed: list[int] = []
                agent = threading.Thread(  # waits out the outage on MLflow's retries
                    target=lambda: listed.append(
                        len(Tracker(server.uri, EXPERIMENT).find_runs(f"tags.`{TAG_KIND}` = 'run'"))
                    )
                )
                agent.start()
                wait_for(
                    "a record written with PostgreSQL down",
                    lambda: (
                        records(runs_root) > records_then
                        and time.monotonic() - killed_at >= MIN_DOWNTIME_S
                    ),
                    sweep,
                    log,
                )
                written_down = records(runs_root) - records_then
                postgres.restart()
                agent.join(timeout=300)
                assert sweep.wait(timeout=480) == 0, log.read_text()[-5000:]
            finally:
                if sweep.poll() is None:
                    sweep.kill()
            outage_errors = server.log.read_text().count("SQLAlchemy database error")

            summary = json.loads((sweep_dir / SWEEP_FILE).read_text())
            jobs = summary["jobs"]
            assert [j["status"] for j in jobs] == ["succeeded", "succeeded"]
            assert summary["comparison"]["accepted"], summary["comparison"]
            team = MlflowClient(tracking_uri=server.uri)
            runs = team.search_runs(
                [team.get_experiment_by_name(EXPERIMENT).experiment_id],
                f"tags.`{TAG_KIND}` = 'run'",
            )
            folders = [RunFolder(j["folder"]) for j in jobs]
            tagged = sorted(r.data.tags[TAG_RUN_FOLDER] for r in runs)
            assert tagged == sorted(str(f.path.resolve()) for f in folders)  # once each
            team_histories = {
                RunFolder(r.data.tags[TAG_RUN_FOLDER]).name: histories(server.uri, r.info.run_id)
                for r in runs
            }

        reference, reference_ids = undisturbed(folders, tmp_path / "undisturbed")
        assert verdict(summary["comparison"]) == verdict(reference)
        reference_uri = resolve_uri(None, tmp_path / "undisturbed")
        for name, run_id in reference_ids.items():
            sent, whole = team_histories[name], histories(reference_uri, run_id)
            differing = {k: (sent.get(k), whole.get(k)) for k in sent.keys() | whole.keys()}
            assert sent == whole, {k: v for k, v in differing.items() if v[0] != v[1]}
        points = sum(len(h) for run in team_histories.values() for h in run.values())
        print(
            f"PostgreSQL restart during a sweep: down {postgres.downtimes[0]:.1f} s, "
            f"{written_down} training records written meanwhile, {outage_errors} store errors "
            f"met by the server (retried), agent listed {listed} runs across it; {len(runs)} runs, "
            f"{points} metric points in MLflow = the undisturbed store's, duplicated runs 0, "
            f"verdict {'accepted' if reference['accepted'] else 'refused'} = the undisturbed one"
        )
        assert outage_errors > 0 and listed and written_down > 0
    finally:
        postgres.close()
