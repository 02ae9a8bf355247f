"""Experiments end to end: real TorchTitan training (``zephon_mini``, a small llama3 with
the corpus's own 1,024-token BPE; CPU, gloo, torchrun), the real embedded MLflow store,
held-out evaluation and the comparison guard.

Runs (4 steps, or 2 where said; checkpoints and evaluation every 2 steps; the dp-1 runs
two at a time, a core each):

    a-dp2   variant A (code .5 docs .3 unicode .2) on 2 processes
    a-dp1   variant A on 1 process
    b-dp2   variant B (code 0 docs .5 unicode .5) on 2 processes, interrupted (SIGTERM to
            `zephon run`) after its step-2 checkpoint, resumed with `zephon resume --dp 1`
    b-dp1   variant B on 1 process
    a-short variant A trained 2 steps on 1 process (another schedule, scored at step 2)
    and, each compared with a-short and 2 steps long:
    a-lr    variant A with another learning rate (train.lr) on 1 process
    a-init  variant A with another init seed (train.seed=7) on 1 process
    a-layers  variant A on a 3-layer model (tests.support.titan_configs) on 1 process

The guard refuses each confounded run next to the honest ones, naming the field; b-dp2
is compared while it is interrupted (refused as unfinished). A changed data contract
(data.seed) is refused in tests/e2e/test_sweeps_e2e.py. A hidden TorchTitan data
flag (``--dataloader.spec`` in model.args) is refused before anything starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow import MlflowClient

from orchestrator.errors import ExperimentError
from orchestrator.evaluation import EvalRecord, EvalSource
from orchestrator.experiment import DataSection, write_data_spec
from orchestrator.experiment.runfolder import EVAL_FILE, RunFolder
from orchestrator.run import api
from orchestrator.titan.runlog import RUN_SUBDIR, read_jsonl
from orchestrator.tracking.mlflow_names import (
    METRIC_EVAL_AGGREGATE,
    METRIC_LOSS,
    TAG_DATA_FINGERPRINT,
    TAG_DP_HISTORY,
    TAG_INIT,
    TAG_PRECISION,
    TAG_RECIPE,
    TAG_VARIANT,
    eval_metric,
)
from orchestrator.tracking.uris import resolve_uri
from tests.support import REPO
from tests.support.cli import zephon_in_process
from tests.support.experiments import scored_experiment

pytestmark = pytest.mark.timeout(1800)

MIX_A = {"code": 0.5, "docs": 0.3, "unicode": 0.2}
MIX_B = {"code": 0.0, "docs": 0.5, "unicode": 0.5}
"""No code: far from A, so the two variants' data differ from step 1 on."""
STEPS = 4


def experiment(domains: dict[str, list[Path]], mixture: dict[str, float], **data: Any) -> dict:
    """A tiny experiment over the shared test corpus, ``STEPS`` long."""
    return scored_experiment(domains, mixture, steps=STEPS, **data)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("orchestrator-e2e")


def zephon(work: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The ``zephon`` CLI in ``work`` (where the embedded MLflow store lives)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def write_config(work: Path, name: str, config: dict) -> Path:
    path = work / f"{name}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def runs(work: Path, domains: dict[str, list[Path]]) -> dict[str, api.RunResult]:
    """The runs of the module docstring (b-dp2 through the CLI, interrupted and resumed)."""
    a = experiment(domains, MIX_A)
    short = {**a, "train": {**a["train"], "steps": 2}}
    side_by_side = {  # dp 1, two at a time, a core each
        "a-dp1": a,
        "b-dp1": experiment(domains, MIX_B),
        "a-short": short,
        "a-lr": {**short, "train": {**short["train"], "lr": 2e-3}},
        "a-init": {**short, "train": {**short["train"], "seed": 7}},
        "a-layers": {
            **short,
            "model": {"module": "tests.support.titan_configs", "config": "zephon_mini_deep"},
        },
    }
    cwd = os.getcwd()
    os.chdir(work)  # the embedded store is ./mlflow.db
    try:
        with pytest.MonkeyPatch.context() as patch:  # trainers import tests.support.titan_configs
            patch.setenv(
                "PYTHONPATH",
                os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            )
            results = {"a-dp2": api.run(a, dp=2, run_name="a-dp2")}
            with ThreadPoolExecutor(2) as pool:
                futures = {
                    name: pool.submit(api.run, on_one_core(config), dp=1, run_name=name, fresh=True)
                    for name, config in side_by_side.items()
                }
                results |= {name: future.result() for name, future in futures.items()}
    finally:
        os.chdir(cwd)
    results["b-dp2"] = interrupted_then_resumed(work, experiment(domains, MIX_B), results["a-dp2"])
    return results


def on_one_core(config: dict) -> dict:
    return {**config, "resources": {**config["resources"], "max_procs": 1}}


def interrupted_then_resumed(work: Path, config: dict, other: api.RunResult) -> api.RunResult:
    """`zephon run --dp 2`, SIGTERM once step 3 has data (the step-2 checkpoint exists),
    `zephon compare` with ``other`` (refused: unfinished), then `zephon resume --dp 1`."""
    path = write_config(work, "b", config)
    folder = RunFolder(work / "runs" / "b-dp2")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "orchestrator.cli", "run", "-c", str(path), "--dp", "2"]
    agent = subprocess.Popen(
        [*command, "--name", "b-dp2", "--fresh", "--json"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while 3 not in folder.steps() and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # a step of this model takes ~0.5 s: SIGTERM must land within step 4
    assert agent.poll() is None, f"the run ended before it could be interrupted: {agent.stderr}"
    agent.send_signal(signal.SIGTERM)
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 130, f"exit {agent.returncode}\n{out}\n{err}"
    interrupted = json.loads(out)
    assert interrupted["status"] == "interrupted"
    assert folder.last_checkpoint_step() == 2
    # nothing left running, no traceback, one line with the command that continues it
    alive = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(folder.path) in " ".join(p.info["cmdline"] or [])
    ]
    assert not alive, [p.info["cmdline"] for p in alive]
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    assert re.search(rf"b-dp2: interrupted at step [34]/{STEPS}", err), err
    assert f"resume {folder.path}" in err
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    assert client.get_run(interrupted["mlflow_run_id"]).info.status == "KILLED"
    unfinished = api.RunResult(**interrupted)
    (reason,) = refusals(work, other, unfinished)
    assert reason["code"] == "unfinished" and reason["runs"] == [unfinished.mlflow_run_id]
    assert reason["detail"]["status"] == "interrupted"
    assert reason["detail"]["planned_steps"] == STEPS and reason["detail"]["steps"] < STEPS
    assert reason["detail"]["command"] == f"zephon resume {folder.path.resolve()}"
    resumed = zephon(work, "resume", str(folder.path), "--dp", "1", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return api.RunResult(**json.loads(resumed.stdout))


def test_runs_succeed_with_fingerprints_and_eval(
    runs: dict[str, api.RunResult], domains: dict[str, list[Path]]
) -> None:
    for name, result in runs.items():
        steps = STEPS if name in ("a-dp2", "a-dp1", "b-dp2", "b-dp1") else 2
        assert result.status == "succeeded", f"{name}: {result.messages}"
        assert result.steps == steps and result.tracking == "synced"
        assert result.eval is not None and result.eval["step"] == steps
        assert set(result.eval["bpb"]) == set(domains)
        assert 0 < result.eval["aggregate_bpb"] < 20
    a2, a1, b1 = runs["a-dp2"], runs["a-dp1"], runs["b-dp1"]
    assert a2.variant == a1.variant != b1.variant
    assert a2.contract_fingerprint == b1.contract_fingerprint  # same data but the mix
    # one recipe and one initial checkpoint for every honest run, on any dp
    honest = [runs[n] for n in ("a-dp2", "a-dp1", "b-dp2", "b-dp1")]
    assert len({r.recipe_fingerprint for r in honest}) == 1
    inits = {RunFolder(r.folder).experiment().init_sha256 for r in honest}
    assert len(inits) == 1
    for name in ("a-lr", "a-short", "a-init", "a-layers"):
        assert runs[name].variant == a2.variant  # same data ...
        assert runs[name].recipe_fingerprint != a2.recipe_fingerprint  # ... another recipe


def test_every_run_scores_its_initial_model_once(runs: dict[str, api.RunResult]) -> None:
    """Step 0 is the initial checkpoint's score: the same for every run of one recipe and
    contract whatever its mixture or dp size, and scored once though b-dp2 was resumed.
    b-dp2 (the same dp as a-dp2, after it) reuses a-dp2's step-0 record, number for number."""
    honest = [RunFolder(runs[n].folder) for n in ("a-dp2", "a-dp1", "b-dp2", "b-dp1")]
    initial = [folder.evals()[0]["aggregate_bpb"] for folder in honest]
    assert max(initial) - min(initial) < 1e-4, initial
    first, reused = (EvalRecord.from_json(f.evals()[0]) for f in (honest[0], honest[2]))
    assert reused.made is EvalSource.REUSED
    assert dataclasses.replace(reused, seconds=first.seconds, made=first.made) == first
    assert all(folder.evals()[STEPS]["aggregate_bpb"] < initial[0] for folder in honest)
    resumed = read_jsonl(honest[2].titan_dir / RUN_SUBDIR / EVAL_FILE)
    assert [r["step"] for r in resumed].count(0) == 1


def test_data_is_identical_across_dp_sizes_and_a_resume(runs: dict[str, api.RunResult]) -> None:
    a2, a1 = RunFolder(runs["a-dp2"].folder), RunFolder(runs["a-dp1"].folder)
    b2, b1 = RunFolder(runs["b-dp2"].folder), RunFolder(runs["b-dp1"].folder)
    assert a2.digests() == a1.digests() and len(a2.digests()) == STEPS
    assert b2.digests() == b1.digests()  # b-dp2 ran steps 1-2 on 2 processes, 3-4 on 1
    assert runs["b-dp2"].dp_sizes == [2, 1]
    assert a2.digests() != b1.digests()
    # held-out sets depend on the contract, not the mixture or dp: same bytes per domain
    assert a2.evals()[STEPS]["bytes"] == b1.evals()[STEPS]["bytes"] == b2.evals()[STEPS]["bytes"]


def test_mlflow_holds_params_tags_metrics_and_digests(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    b2 = runs["b-dp2"]
    run = client.get_run(b2.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[TAG_DP_HISTORY] == "2,1"  # the resume continued the same MLflow run
    assert run.data.tags[TAG_VARIANT] == b2.variant
    assert run.data.tags[TAG_DATA_FINGERPRINT] == b2.data_fingerprint
    assert float(run.data.params["mix.docs"]) == pytest.approx(0.5)
    precision = RunFolder(b2.folder).experiment().precision
    assert precision in ("float32", "bfloat16")
    assert run.data.tags[TAG_PRECISION] == run.data.params["train.precision"] == precision
    losses = client.get_metric_history(b2.mlflow_run_id, METRIC_LOSS)
    assert sorted(m.step for m in losses) == list(range(1, STEPS + 1))  # once each, resume too
    evals = client.get_metric_history(b2.mlflow_run_id, eval_metric("code"))
    assert sorted(m.step for m in evals) == [0, 2, 4]  # the initial model too, once
    for name in (eval_metric("code"), eval_metric("docs", "accuracy"), METRIC_EVAL_AGGREGATE):
        initial = [  # b-dp2's step 0 was reused from a-dp2's: MLflow has the same numbers
            [m.value for m in client.get_metric_history(r.mlflow_run_id, name) if m.step == 0]
            for r in (runs["a-dp2"], b2)
        ]
        assert len(initial[0]) == 1 and initial[0] == initial[1], name
    artifacts = {a.path for a in client.list_artifacts(b2.mlflow_run_id, "zephon")}
    assert {"zephon/steps.jsonl", "zephon/experiment.json", "zephon/eval.jsonl"} <= artifacts


def test_compare_accepts_two_variants_on_two_dp_sizes(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    ids = [runs[n].mlflow_run_id for n in ("a-dp2", "a-dp1", "b-dp2", "b-dp1")]
    cli = zephon_in_process(work, "compare", *ids, "--json")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    verdict = json.loads(cli.stdout)
    assert verdict["accepted"] and verdict["eval_step"] == STEPS
    rows = verdict["rows"]
    assert len(rows) == 2 and all(r["replicates"] == 2 for r in rows)
    assert {r["dp_sizes"] for r in rows} == {"1,2"}
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    for row in rows:
        scores = [client.get_run(i).data.metrics[METRIC_EVAL_AGGREGATE] for i in row["run_ids"]]
        assert row["aggregate_bpb"] == pytest.approx(sum(scores) / len(scores))
    artifacts = {a.path for a in client.list_artifacts(verdict["comparison_run_id"])}
    assert {"comparison.json", "comparison.md", "comparison.png"} <= artifacts


def test_every_run_records_next_token_accuracy_and_compare_decides_on_it(
    work: Path, runs: dict[str, api.RunResult], domains: dict[str, list[Path]]
) -> None:
    """The second held-out metric comes from the same logits: per domain, per document, in
    MLflow, and the guard decides on it with --decide-on accuracy."""
    a2, a1 = runs["a-dp2"], runs["a-dp1"]
    for result in (a2, a1):
        record = EvalRecord.from_json(RunFolder(result.folder).evals()[STEPS])
        accuracy = record.metrics["accuracy"]
        assert set(accuracy.scores) == set(domains)
        assert all(0.0 <= x <= 1.0 for x in accuracy.scores.values())
        tokens = {d: sum(docs.weights) for d, docs in accuracy.documents.items()}
        assert tokens == record.tokens  # weighted by the scored tokens
    first, second = (EvalRecord.from_json(RunFolder(r.folder).evals()[STEPS]) for r in (a2, a1))
    for domain in domains:  # same data on dp 2 and dp 1: about the same model, same documents
        assert first.metrics["accuracy"].scores[domain] == pytest.approx(
            second.metrics["accuracy"].scores[domain], abs=0.05
        )
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    logged = client.get_run(a2.mlflow_run_id).data.metrics
    assert logged[eval_metric("code", "accuracy")] == pytest.approx(
        first.metrics["accuracy"].scores["code"]
    )
    ids = [runs[n].mlflow_run_id for n in ("a-dp2", "a-dp1", "b-dp2", "b-dp1")]
    cli = zephon_in_process(work, "compare", *ids, "--decide-on", "accuracy", "--json")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    verdict = json.loads(cli.stdout)
    assert verdict["decided_on"] == [f"accuracy:{d}" for d in sorted(domains)]
    assert "next-token accuracy" in verdict["score"] and len(verdict["pairs"]) == 1


def refusals(work: Path, *runs: api.RunResult) -> list[dict[str, Any]]:
    """``zephon compare`` of ``runs``, which must refuse (exit 3); its reasons."""
    cli = zephon_in_process(work, "compare", *(r.mlflow_run_id or "" for r in runs), "--json")
    assert cli.returncode == 3, cli.stdout + cli.stderr
    return json.loads(cli.stdout)["refusals"]


@pytest.mark.parametrize(
    ("name", "reference", "field", "values"),
    [
        ("a-short", "a-dp1", "training.steps", (STEPS, 2)),
        ("a-lr", "a-short", "optimizer.param_groups.0.optimizer_kwargs.lr", (0.0008, 0.002)),
        ("a-init", "a-short", "debug.seed", (42, 7)),
        ("a-layers", "a-short", "model_spec.model.layers.2.attention.dim", ("<absent>", 64)),
    ],
)
def test_compare_refuses_another_recipe_naming_the_field(
    work: Path,
    runs: dict[str, api.RunResult],
    name: str,
    reference: str,
    field: str,
    values: tuple,
) -> None:
    """Accepted as replicates before recipes were compared: same variant, same digests."""
    replicates = [runs[reference]] + ([runs["a-dp2"]] if reference == "a-dp1" else [])
    reasons = refusals(work, *replicates, runs[name])
    assert [r["code"] for r in reasons] == ["recipe_mismatch"]
    fields = reasons[0]["detail"]["fields"]
    assert fields[field] == {reference: values[0], name: values[1]}
    assert field in reasons[0]["message"]


def test_mlflow_tags_name_the_recipe_and_the_initial_weights(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    for name in ("a-dp2", "a-init"):
        result = runs[name]
        tags = client.get_run(result.mlflow_run_id).data.tags
        record = RunFolder(result.folder).experiment()
        assert tags[TAG_RECIPE] == result.recipe_fingerprint == record.recipe_fingerprint
        assert tags[TAG_INIT] == record.init_sha256
    a, other = (RunFolder(runs[n].folder).experiment() for n in ("a-dp2", "a-init"))
    assert a.init_sha256 != other.init_sha256


def test_hidden_torchtitan_data_flag_is_refused_before_launch(
    work: Path, domains: dict[str, list[Path]]
) -> None:
    hidden = experiment(domains, MIX_A)
    shuffled = work / "hidden-data.json"  # the trainer's data config, but another shuffle seed
    write_data_spec(shuffled, DataSection(**hidden["data"], shuffle_seed=5))
    hidden["model"]["args"] = ["--dataloader.spec", str(shuffled)]
    with pytest.raises(ExperimentError, match=r"model.args sets --dataloader.spec"):
        api.plan(hidden)


def test_verify_elastic_reports_every_digest(work: Path, domains: dict[str, list[Path]]) -> None:
    config = experiment(domains, MIX_A)
    config["eval"] = {"enable": False}
    path = write_config(work, "verify", config)
    cli = zephon(work, "verify-elastic", "-c", str(path), "--dp", "1", "--resume-dp", "2", "--json")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    report = json.loads(cli.stdout)
    assert report["ok"] and report["matched_steps"] == STEPS and report["split_step"] == 2
