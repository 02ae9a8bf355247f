"""A team's own tokenizer and evaluation tasks, end to end: two mixtures trained with the real
GPT-NeoX tokenizer (plan, train, held-out eval), scored on a local multiple-choice and a
local perplexity task through lm-evaluation-harness, and compared on each.

Runs (dp 1, side by side, 2 steps; held-out evaluation and tasks at step 2):

    a   code .5 docs .3 unicode .2
    b   code 0  docs .5 unicode .5
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from orchestrator.errors import ExperimentError
from orchestrator.experiment import DataSection
from orchestrator.experiment.fingerprints import build_pipeline
from orchestrator.experiment.runfolder import RUN_SUBDIR, TASKS_FILE, RunFolder, read_jsonl
from orchestrator.guard import DecisionPolicy
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.run import api
from orchestrator.tracking.mlflow_names import task_metric
from orchestrator.tracking.uris import resolve_uri
from pipeline import ConfigError, load_tokenizer
from tests.support import REPO
from tests.support.tasks import MC_ITEMS, PPL_TEXTS, write_tasks
from tests.support.tokenizers import GPT_NEOX, GPT_NEOX_VOCAB

pytestmark = pytest.mark.timeout(1200)

MIXES = {
    "a": {"code": 0.5, "docs": 0.3, "unicode": 0.2},
    "b": {"code": 0.0, "docs": 0.5, "unicode": 0.5},
}
STEPS = 2


def experiment(domains: dict[str, list[Path]], mixture: dict[str, float], task_dir: Path) -> dict:
    """A 2-step ``zephon_mini`` run with the GPT-NeoX tokenizer and both local tasks."""
    return {
        "model": {"config": "zephon_mini"},
        "data": {
            "datasets": {n: [str(p) for p in paths] for n, paths in domains.items()},
            "mixture": mixture,
            "holdout_bytes": 4096,
            "tokenizer": str(GPT_NEOX),
        },
        "train": {"steps": STEPS, "checkpoint_interval": 2},
        "eval": {"interval": 2, "tasks": ["tiny_mc", "tiny_ppl"], "task_dir": str(task_dir)},
        "resources": {"timeout_s": 600, "max_procs": 1},
    }


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tokenizer-tasks-e2e")


@pytest.fixture(scope="module")
def task_dir(work: Path) -> Path:
    return write_tasks(work)


@pytest.fixture(scope="module")
def runs(work: Path, domains: dict[str, list[Path]], task_dir: Path) -> dict[str, api.RunResult]:
    cwd = os.getcwd()
    os.chdir(work)  # the embedded store is ./mlflow.db
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HF_DATASETS_OFFLINE", "1")
            patch.setenv("HF_HUB_OFFLINE", "1")
            with ThreadPoolExecutor(2) as pool:
                futures = {
                    name: pool.submit(
                        api.run, experiment(domains, mix, task_dir), dp=1, run_name=name
                    )
                    for name, mix in MIXES.items()
                }
                return {name: future.result() for name, future in futures.items()}
    finally:
        os.chdir(cwd)


def compare(work: Path, runs: dict[str, api.RunResult], decide_on: list[str]) -> dict[str, Any]:
    cwd = os.getcwd()
    os.chdir(work)
    try:
        run_ids = [r.mlflow_run_id or "" for r in runs.values()]
        return compare_tracked(run_ids, DecisionPolicy(decide_on=decide_on))
    finally:
        os.chdir(cwd)


def test_runs_train_with_the_neox_tokenizer_and_record_its_content(
    runs: dict[str, api.RunResult],
) -> None:
    neox = load_tokenizer(str(GPT_NEOX))
    for name, result in runs.items():
        assert result.status == "succeeded", f"{name}: {result.messages}"
        assert result.steps == STEPS and result.tracking == "synced"
        record = RunFolder(result.folder).experiment()
        assert record.contract["tokenizer"] == {
            "name": "huggingface",
            "fingerprint": neox.fingerprint,
        }
        assert str(GPT_NEOX) not in json.dumps(record.contract)  # content, not path
        assert record.recipe["model_spec"]["model"]["vocab_size"] == GPT_NEOX_VOCAB


def test_held_out_bytes_do_not_depend_on_the_tokenizer(
    runs: dict[str, api.RunResult], domains: dict[str, list[Path]], task_dir: Path
) -> None:
    """Bits per byte divide by the held-out documents' UTF-8 bytes, chosen by dataset name
    alone: with gpt2 the same documents and bytes are scored (comparable across tokenizers)."""
    data = DataSection(**{**experiment(domains, MIXES["a"], task_dir)["data"], "tokenizer": "gpt2"})
    pipeline = build_pipeline(data, dp_size=1, dp_rank=0, microbatch_size=2)
    try:
        source = pipeline.source
        expected = {
            ds.name: sum(len(t.encode()) for t in source.heldout_documents(d))
            for d, ds in enumerate(source.datasets)
        }
    finally:
        pipeline.close()
    assert runs["a"].eval is not None and runs["a"].eval["bytes"] == expected


def test_tasks_are_recorded_per_item_and_sent_to_mlflow(
    runs: dict[str, api.RunResult], work: Path
) -> None:
    for result in runs.values():
        lines = read_jsonl(RunFolder(result.folder).titan_dir / RUN_SUBDIR / TASKS_FILE)
        by_task = {t: [r for r in lines if r["task"] == t] for t in ("tiny_mc", "tiny_ppl")}
        assert [r["item"] for r in by_task["tiny_mc"]] == list(range(len(MC_ITEMS)))
        assert [r["item"] for r in by_task["tiny_ppl"]] == list(range(len(PPL_TEXTS)))
        assert all(r["step"] == STEPS for r in lines)
        assert all(r["metrics"]["acc"] in (0.0, 1.0) for r in by_task["tiny_mc"])
        assert result.eval is not None
        accuracy = result.eval["tasks"]["tiny_mc"]["acc"]
        assert accuracy == pytest.approx(
            sum(r["metrics"]["acc"] for r in by_task["tiny_mc"]) / len(MC_ITEMS)
        )
        client = MlflowClient(tracking_uri=resolve_uri(None, work))
        metrics = client.get_run(result.mlflow_run_id).data.metrics
        assert metrics[task_metric("tiny_mc", "acc")] == pytest.approx(accuracy)
        assert task_metric("tiny_ppl", "bits_per_byte") in metrics


@pytest.mark.parametrize(
    ("decide_on", "score"),
    [
        (["task:tiny_mc"], "-acc of task tiny_mc"),
        (["task:tiny_ppl"], "bits per byte of task tiny_ppl"),
    ],
)
def test_compare_decides_on_a_task_paired_over_items(
    runs: dict[str, api.RunResult], work: Path, decide_on: list[str], score: str
) -> None:
    verdict = compare(work, runs, decide_on)
    assert verdict["accepted"], verdict["refusals"]
    assert verdict["decided_on"] == [
        f"{decide_on[0]}:{'acc' if 'mc' in score else 'bits_per_byte'}"
    ]
    assert verdict["score"].startswith(score)
    (pair,) = verdict["pairs"]
    items = len(MC_ITEMS) if "mc" in score else len(PPL_TEXTS)
    assert pair["documents"] == items and pair["seeds"] == 1
    assert pair["decision"] == "cannot_tell" and "1 seed" in pair["method"]
    assert len({row["mixture"] for row in verdict["rows"]}) == 2
    assert verdict["score"] in verdict["markdown"]  # the report says what was decided on


def test_compare_names_a_missing_task_metric(runs: dict[str, api.RunResult], work: Path) -> None:
    with pytest.raises(ValueError, match=r"no per-item metric 'f1'.*acc, acc_norm"):
        compare(work, runs, ["task:tiny_mc:f1"])


def test_an_unknown_task_is_refused_at_plan_time(
    domains: dict[str, list[Path]], task_dir: Path
) -> None:
    config = experiment(domains, MIXES["a"], task_dir)
    config["eval"]["tasks"] = ["tiny_mc", "no_such_task"]
    with pytest.raises(ConfigError, match=r"unknown lm-eval task\(s\) 'no_such_task'"):
        api.plan(config, dp=1)


def test_a_model_smaller_than_the_vocabulary_is_refused_at_plan_time(
    domains: dict[str, list[Path]], task_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    config = experiment(domains, MIXES["a"], task_dir)
    config["model"] = {"module": "tests.support.titan_configs", "config": "zephon_mini_gpt2_vocab"}
    with pytest.raises(
        ExperimentError, match=rf"vocabulary \(50257 ids\) is smaller.*{GPT_NEOX_VOCAB}"
    ):
        api.plan(config, dp=1)
