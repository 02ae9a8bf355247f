"""A run's datasets as MLflow dataset inputs, and its MLflow run name, against a real MLflow
SQLite store.

The run folders hold a real data contract (``orchestrator.experiment.fingerprints`` over a
small real corpus, as ``zephon plan`` computes it) and a real data spec; their steps are
synthetic (``tests.support.tracked_folders``): nothing trains. Nothing is mocked.
"""

from __future__ import annotations

import json
import socket
import traceback
from pathlib import Path
from typing import Any

import mlflow.data
import pytest
from mlflow import MlflowClient

from demo.local_corpus import build_local_corpus
from orchestrator.errors import TrackingUnavailable
from orchestrator.experiment import fingerprints, load_experiment
from orchestrator.experiment.config import load_data_section
from orchestrator.experiment.dataspec import write_data_spec
from orchestrator.experiment.run_record import ExperimentRecord, Segment
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run.lifecycle import Run
from orchestrator.tracking import provenance
from orchestrator.tracking.inputs import (
    MAX_DIGEST,
    MAX_SOURCE,
    evaluation_input,
    evaluation_inputs,
    training_inputs,
)
from orchestrator.tracking.mlflow_names import (
    MAX_RUN_NAME,
    TAG_RUN_FOLDER,
    run_display_name,
    short_mixture,
)
from orchestrator.tracking.tracker import Tracker
from tests.support.processes import forked_process_context
from tests.support.tracked_folders import write_metrics, write_steps

MIXTURE = {"code": 0.5, "docs": 0.3, "unicode": 0.2}
CONTEXT = "mlflow.data.context"
JOBS = 6


@pytest.fixture(autouse=True)
def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests do not run git in the checkout."""
    monkeypatch.setattr(provenance, "git_revision", lambda cwd=None: "test-rev")


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``zephon run`` records in ``experiment.json``: the experiment ``main`` (one seed
    0, as a sweep's replicate sets it) over three real domains, and its real data contract."""
    root = tmp_path_factory.mktemp("planned")
    corpus = build_local_corpus(root / "corpus", max_bytes_per_domain=200_000)
    config = load_experiment(
        {
            "name": "main",
            "data": {
                "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
                "mixture": MIXTURE,
                "cache_dir": str(root / "cache"),
            },
            "train": {"seed": 0},
        }
    )
    return {"config": config.to_dict(), **fingerprints(config).to_dict()}


def run_folder(root: Path, name: str, record: dict[str, Any], dp: int = 2) -> RunFolder:
    """A run folder as a launch leaves it before tracking starts (experiment.json, run.json
    with its first segment, the data spec), with 4 synthetic steps."""
    folder = RunFolder(root / name)
    folder.write_experiment(ExperimentRecord.from_dict(record))
    Run.open(folder).commit(
        status="running", segments=(Segment.new(dp_size=dp, start_step=0, device="cpu"),)
    )
    write_data_spec(folder.data_spec_path, load_data_section(record["config"]["data"]))
    write_steps(folder, range(1, 5), dp_size=dp)
    write_metrics(folder, range(1, 5))
    return folder


def closed_port_uri() -> str:
    """An HTTP URI nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def inputs_of(uri: str, run_id: str) -> dict[str, Any]:
    """The run's dataset inputs by dataset name (each name at most once)."""
    listed = MlflowClient(tracking_uri=uri).get_run(run_id).inputs.dataset_inputs
    by_name = {d.dataset.name: d for d in listed}
    assert len(by_name) == len(listed), [d.dataset.name for d in listed]
    return by_name


# -- dataset inputs ---------------------------------------------------------------------------


def test_each_training_dataset_is_a_dataset_input_found_by_mlflow_filters(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    folder = run_folder(tmp_path, "sweep-20261204-222229-6815-008", planned)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    tracker.sync(Run.open(folder))
    Run.open(folder).commit(status="succeeded")
    tracker.finish(Run.open(folder), "succeeded")

    inputs = inputs_of(db_uri, run_id)
    contract = {d["name"]: d for d in planned["contract"]["datasets"]}
    assert set(inputs) == set(contract) == set(MIXTURE)
    for name, given in inputs.items():
        dataset, fingerprint = given.dataset, contract[name]["fingerprint"]
        assert {t.key: t.value for t in given.tags} == {CONTEXT: "training"}
        # the contract fingerprint, cut to MLflow's 36 characters; whole in the profile
        assert len(fingerprint) == 64 and dataset.digest == fingerprint[:MAX_DIGEST]
        paths = planned["config"]["data"]["datasets"][name]
        assert dataset.source_type == "local"
        assert json.loads(dataset.source)["uris"] == paths
        assert mlflow.data.get_source(given).uri == paths[0]  # MLflow's own class reads it
        profile = json.loads(dataset.profile)
        assert profile["token_share"] == MIXTURE[name]
        assert profile["fingerprint"] == fingerprint
        assert profile["field"] == "text" and profile["exhausted"] == "repeat"
        assert profile["tokens_per_byte"] == planned["contract"]["tokens_per_byte"][name]

    other = tracker.new_run("not-a-training-run", kind="comparison")
    client = MlflowClient(tracking_uri=db_uri)
    experiment_id = tracker.experiment_id()

    def found(filter_string: str) -> list[str]:
        return [r.info.run_id for r in client.search_runs([experiment_id], filter_string)]

    assert other in found("")
    assert found("dataset.name = 'code'") == [run_id]
    digest = inputs["docs"].dataset.digest
    assert found(f"dataset.name = 'docs' AND dataset.digest = '{digest}'") == [run_id]
    assert found("dataset.context = 'training'") == [run_id]
    assert found("dataset.name = 'web'") == []


def test_a_run_trained_offline_logs_its_inputs_once_when_it_syncs(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    """The store unreachable at the start: the first sync that reaches it creates the run
    with its inputs; the later syncs, the final one, ``zephon sync`` and a resume (which
    reopens the run) send none again."""
    folder = run_folder(tmp_path, "offline", planned)
    dead = closed_port_uri()
    with pytest.raises(TrackingUnavailable):
        Tracker(dead, experiment_name).start(Run.open(folder))
    assert folder.state().mlflow_run_id is None

    Run.open(folder).commit(tracking_uri=db_uri)  # the store is back
    tracker = Tracker(db_uri, experiment_name)
    tracker.sync(Run.open(folder))
    run_id = folder.state().mlflow_run_id
    assert folder.state().tracking.inputs_logged is True
    first = inputs_of(db_uri, run_id)
    assert set(first) == set(MIXTURE)

    write_steps(folder, range(5, 7))
    write_metrics(folder, range(5, 7))
    tracker.sync(Run.open(folder))
    Run.open(folder).commit(status="interrupted")
    Run.open(folder).sync()
    assert tracker.start(Run.open(folder)) == run_id  # a resume reopens the same run
    Run.open(folder).commit(status="succeeded")
    tracker.finish(Run.open(folder), "succeeded")
    Run.open(folder).sync()

    after = inputs_of(db_uri, run_id)
    assert {n: d.dataset.digest for n, d in after.items()} == {
        n: d.dataset.digest for n, d in first.items()
    }
    client = MlflowClient(tracking_uri=db_uri)
    runs = client.search_runs([tracker.experiment_id()], "dataset.name = 'unicode'")
    assert [r.info.run_id for r in runs] == [run_id]


def _start_at_once(uri: str, experiment: str, path: str, barrier: Any, results: Any) -> None:
    """One job of a sweep starting: its run created with its inputs, all jobs at once."""
    try:
        provenance.git_revision = lambda cwd=None: "test-rev"  # this process's own module
        tracker = Tracker(uri, experiment)
        tracker.experiment_id()  # the experiment exists: the race is the datasets'
        barrier.wait(timeout=60)
        results.put(("ok", tracker.start(Run.open(RunFolder(path)))))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def test_jobs_starting_at_once_on_the_same_datasets_all_log_them(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    """The jobs of a sweep train on the same datasets and start together: each one logs
    the experiment's datasets, new to it, at the same moment (MLflow's store inserts a
    dataset the first time it is logged to an experiment; two inserts of one collide)."""
    folders = [run_folder(tmp_path, f"job-{n}", planned) for n in range(JOBS)]
    context = forked_process_context(__name__)
    barrier, results = context.Barrier(JOBS), context.Queue()
    processes = [
        context.Process(
            target=_start_at_once,
            args=(db_uri, experiment_name, str(f.path), barrier, results),
        )
        for f in folders
    ]
    for process in processes:
        process.start()
    reported = [results.get(timeout=240) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [text for kind, text in reported if kind != "ok"]
    assert not errors, "\n".join(errors)
    for _, run_id in reported:
        assert set(inputs_of(db_uri, run_id)) == set(MIXTURE)


def test_a_folder_synced_before_inputs_existed_gets_them_on_its_next_sync(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    """A run tracked before this change (``params_logged``, no ``inputs_logged``): the next
    ``zephon sync`` adds its inputs, once."""
    folder = run_folder(tmp_path, "older", planned)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.new_run("older", kind="run")
    Run.open(folder).commit(
        mlflow_run_id=run_id,
        tracking_uri=db_uri,
        mlflow_experiment=experiment_name,
        tracking={"tags": {}, "parent_run_id": None, "params_logged": True},
    )
    assert inputs_of(db_uri, run_id) == {}
    Run.open(folder).sync()
    Run.open(folder).sync()
    assert set(inputs_of(db_uri, run_id)) == set(MIXTURE)


def test_evaluation_sets_are_inputs_with_context_evaluation(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    record = json.loads(json.dumps(planned))
    record["config"]["data"]["eval_sets"] = {"held-web": ["/data/web/test-*.jsonl.zst"]}
    folder = run_folder(tmp_path, "with-eval-sets", record)
    tracker = Tracker(db_uri, experiment_name)
    run_id = tracker.start(Run.open(folder))
    inputs = inputs_of(db_uri, run_id)
    assert set(inputs) == {*MIXTURE, "held-web"}
    held = inputs["held-web"]
    assert {t.key: t.value for t in held.tags} == {CONTEXT: "evaluation"}
    assert json.loads(held.dataset.source)["uris"] == ["/data/web/test-*.jsonl.zst"]

    client = MlflowClient(tracking_uri=db_uri)
    evaluated = client.search_runs([tracker.experiment_id()], "dataset.context = 'evaluation'")
    assert [r.info.run_id for r in evaluated] == [run_id]


def test_an_experiment_without_eval_sets_logs_no_evaluation_input(
    planned: dict[str, Any],
) -> None:
    assert "sets" not in planned["config"]["eval"]
    assert not planned["config"]["data"].get("eval_sets")
    assert evaluation_inputs(ExperimentRecord.from_dict(planned)) == []
    assert [r.context for r in training_inputs(ExperimentRecord.from_dict(planned))] == [
        "training"
    ] * 3


def test_data_eval_sets_take_their_contract_fingerprint_and_the_spec_paths(
    planned: dict[str, Any],
) -> None:
    """``data.eval_sets`` (part of the data contract, with a fingerprint each there)."""
    record = json.loads(json.dumps(planned))
    record["config"]["data"]["eval_sets"] = {"held": ["held/*.jsonl"], "raw": ["raw.jsonl"]}
    record["contract"]["eval_sets"] = [{"name": "held", "fingerprint": "9" * 64, "field": "text"}]
    held, raw = evaluation_inputs(
        ExperimentRecord.from_dict(record), {"held": ["/abs/held/*.jsonl"]}
    )
    assert (held.name, held.context, held.digest) == ("held", "evaluation", "9" * MAX_DIGEST)
    assert json.loads(held.source)["uris"] == ["/abs/held/*.jsonl"]
    assert json.loads(raw.source)["uris"] == ["raw.jsonl"] and len(raw.digest) == 8


def test_a_compared_dataset_version_is_the_input_of_its_dataset(
    planned: dict[str, Any],
) -> None:
    """``data.compared=dataset:docs``: the contract keeps only the dataset's name; its
    version (fingerprint, field, tokens per byte, paths) is in ``varied``."""
    record = json.loads(json.dumps(planned))
    entries = record["contract"]["datasets"]
    docs = next(e for e in entries if e["name"] == "docs")
    version = {
        **{k: v for k, v in docs.items() if k != "name"},
        "fingerprint": "7" * 64,
        "tokens_per_byte": record["contract"]["tokens_per_byte"].pop("docs"),
        "paths": ["/data/docs-v2/*.jsonl"],
    }
    record["contract"]["datasets"] = [{"name": "docs"} if e is docs else e for e in entries]
    record["config"]["data"]["datasets"]["docs"] = ["/data/docs-v2/*.jsonl"]
    record["varied"] = {"data.datasets.docs": version}
    by_name = {r.name: r for r in training_inputs(ExperimentRecord.from_dict(record))}
    assert by_name["docs"].digest == "7" * MAX_DIGEST
    profile = json.loads(by_name["docs"].profile)
    assert profile["fingerprint"] == "7" * 64 and profile["field"] == "text"
    assert profile["tokens_per_byte"] == version["tokens_per_byte"]
    assert json.loads(by_name["docs"].source)["uris"] == ["/data/docs-v2/*.jsonl"]
    assert by_name["code"].digest == entries[0]["fingerprint"][:MAX_DIGEST]
    # and the run is named by that version too
    assert run_display_name(ExperimentRecord.from_dict(record), dp=1) == (
        "main-code0.50-docs0.30-unicode0.20-docs@77777777-s0-dp1"
    )


def test_a_dataset_of_very_many_shard_files_fits_mlflow_source_limit() -> None:
    paths = [f"/data/web/shard-{n:07d}.jsonl.zst" for n in range(20_000)]
    record = evaluation_input("web", paths)
    source = json.loads(record.source)
    assert len(record.source) <= MAX_SOURCE
    assert source["uris"] == paths[: len(source["uris"])]
    assert source["left_out"] == len(paths) - len(source["uris"]) > 0
    assert evaluation_input("web", ["https://host/a.jsonl"]).source_type == "http"


# -- run names --------------------------------------------------------------------------------


def test_the_mlflow_run_is_named_by_mixture_seed_and_dp_and_the_folder_keeps_its_name(
    db_uri: str, experiment_name: str, planned: dict[str, Any], tmp_path: Path
) -> None:
    folder = run_folder(tmp_path, "sweep-20261204-222229-6815-008", planned, dp=2)
    tracker = Tracker(db_uri, experiment_name)
    run = MlflowClient(tracking_uri=db_uri).get_run(tracker.start(Run.open(folder)))
    assert run.info.run_name == "main-code0.50-docs0.30-unicode0.20-s0-dp2"
    assert run.data.tags[TAG_RUN_FOLDER] == str(folder.path.resolve())
    assert folder.name == "sweep-20261204-222229-6815-008" and folder.exists()


def named(record: dict[str, Any]) -> ExperimentRecord:
    """The record of a partial ``experiment.json`` (a run name reads only some keys)."""
    return ExperimentRecord.from_dict(record)


def test_run_display_name_parts() -> None:
    record: dict[str, Any] = {
        "config": {
            "name": "main",
            "data": {"seed": 1, "shuffle_seed": 1},
            "train": {"seed": 1},
        },
        "mixture": {"unicode": "0.200000", "code": "0.500000", "docs": "0.300000"},
    }
    assert run_display_name(named(record), dp=4) == "main-code0.50-docs0.30-unicode0.20-s1-dp4"
    record["config"]["train"]["seed"] = 42  # seeds set apart: all three, data.shuffle.train
    assert run_display_name(named(record)) == "main-code0.50-docs0.30-unicode0.20-s1.1.42"
    assert run_display_name(named({"mixture": {"a": 1}}), dp=1) == "run-a1.00-dp1"
    assert short_mixture({"b": "0.666667", "a": "0.333333"}) == "a0.3333-b0.6667"
    assert short_mixture({"a": 0.125, "b": 0.875}) == "a0.125-b0.875"

    many = {f"dataset{n:03d}": "0.010000" for n in range(100)}
    names = {
        run_display_name(named({"mixture": {**many, "dataset099": share}}), dp=2)
        for share in ("0.010000", "0.020000")
    }
    assert len(names) == 2 and all(len(n) <= MAX_RUN_NAME and n.endswith("-dp2") for n in names)
