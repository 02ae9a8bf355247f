"""Real Hydra multiruns of ``zephon-run``: the mix sweeper, the zephon launcher, the stock
basic launcher, hydra-submitit-launcher, real TorchTitan training (``zephon_mini``, a
6.6 M-parameter llama3, CPU) and the embedded MLflow store.

Sweeps (2 steps a run, evaluated at step 2; ~20 s a run on 2 cores):

    replicated   2 mixes x dp {1, 2}, zephon launcher (runs in parallel on the free cores)
    rerun        the same 2 mixes again, Hydra's basic launcher, dp chosen by the run
    paired       3 mixes (code_a only, code_b only: one distribution; unicode only) x seeds 0, 1:
                 A/A cannot be told apart, A/B is decided (on the code held-out sets)
    interrupted  the 2 mixes at dp 1, SIGINT after step 1, then continued
    submitit     3 mixes through hydra-submitit-launcher's local mode, dry runs
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow import MlflowClient

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.guard.decisions import LookPlan
from orchestrator.tracking.mlflow_names import (
    TAG_BEST,
    TAG_DECISIONS,
    TAG_KIND,
    TAG_SWEEP,
    TAG_VERDICT,
)
from orchestrator.tracking.uris import resolve_uri
from pipeline import Dataset
from sweeps.summary import SWEEP_FILE
from tests.support import REPO
from tests.support.cli import zephon_in_process
from tests.support.helpers import write_jsonl
from tests.support.sweeps import (
    datasets_override,
    mixes_override,
    multirun,
    tiny_sweep_overrides,
    tokenizer_override,
)
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sweeps-e2e")


@pytest.fixture(scope="module")
def domains(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return sorted(corpus(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def base_overrides(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The shared test corpus as data.datasets with its small tokenizer, and a 2-step
    schedule."""
    return tiny_sweep_overrides(corpus(tmp_path_factory.getbasetemp()))


TWO = ((1.0, 1.0, 1.0), (0.0, 0.0, 1.0))


def summary(sweep_dir: Path) -> dict[str, Any]:
    return json.loads((sweep_dir / SWEEP_FILE).read_text())


def fingerprints(result: dict[str, Any]) -> dict[str, set[str]]:
    """Canonical mixture -> the data fingerprints of its runs."""
    out: dict[str, set[str]] = {}
    for job in result["jobs"]:
        key = json.dumps(job["mixture"], sort_keys=True)
        out.setdefault(key, set()).add(job["data_fingerprint"])
    return out


def replicated_sweep(
    work: Path, domains: list[str], base_overrides: list[str], name: str
) -> dict[str, Any]:
    """The two mixes, each on dp 1 and dp 2, as the sweep ``name``."""
    process, sweep_dir = multirun(
        work,
        name,
        "hydra/launcher=zephon",
        *base_overrides,
        mixes_override(domains, *TWO),
        "hydra.sweeper.replicate_dp=[1,2]",
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return {"summary": summary(sweep_dir), "stdout": process.stdout}


@pytest.fixture(scope="module")
def replicated(work: Path, domains: list[str], base_overrides: list[str]) -> dict[str, Any]:
    return replicated_sweep(work, domains, base_overrides, "replicated")


def test_sweep_logs_parent_children_and_the_accepted_comparison(
    work: Path, replicated: dict[str, Any]
) -> None:
    result = replicated["summary"]
    jobs = result["jobs"]
    assert len(jobs) == 4 and all(j["status"] == "succeeded" for j in jobs)
    assert sorted(j["dp_sizes"][0] for j in jobs) == [1, 1, 2, 2]
    assert "Comparison accepted" in replicated["stdout"]
    assert "mlflow ui --backend-store-uri sqlite:" in replicated["stdout"]

    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    parent = client.get_run(result["parent_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[TAG_KIND] == "sweep" and parent.data.tags[TAG_VERDICT] == "accepted"
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    assert {c.info.run_id for c in children} == {j["mlflow_run_id"] for j in jobs}
    assert all(c.data.tags[TAG_SWEEP] == result["sweep"] for c in children)
    assert all(c.info.status == "FINISHED" for c in children)

    verdict = result["comparison"]
    assert verdict["accepted"] and len(verdict["rows"]) == 2
    assert all(r["replicates"] == 2 and r["dp_sizes"] == "1,2" for r in verdict["rows"])
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.json", "comparison.md", "comparison.png"} <= artifacts
    png = Path(client.download_artifacts(parent.info.run_id, "comparison.png", str(work)))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_a_replicated_sweep_submitted_again_is_answered_at_each_dp_size(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    """replicate_dp=[1,2] again, unchanged: every job is answered by the first sweep's run
    of its mixture at its own dp size; nothing trains, and the verdict is the same."""
    before = set((work / "runs").iterdir())
    again = replicated_sweep(work, domains, base_overrides, "replicated-again")["summary"]
    assert set((work / "runs").iterdir()) == before  # no run folder made
    first = {j["run_name"]: j for j in replicated["summary"]["jobs"]}
    for job in again["jobs"]:
        answer = first[job["answered_from"]]
        assert (answer["variant"], answer["dp_sizes"]) == (job["variant"], job["dp_sizes"])
    assert len({j["answered_from"] for j in again["jobs"]}) == 4
    verdict, earlier = again["comparison"], replicated["summary"]["comparison"]
    assert verdict["pairs"] == earlier["pairs"] and verdict["rows"] == earlier["rows"]


def test_rerun_with_the_basic_launcher_reproduces_the_fingerprints(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    process, sweep_dir = multirun(  # fresh: trained again, not answered from the first sweep
        work, "rerun", *base_overrides, mixes_override(domains, *TWO), "fresh=true"
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    rerun = summary(sweep_dir)
    assert len(rerun["jobs"]) == 2 and rerun["comparison"] is not None
    first = fingerprints(replicated["summary"])
    assert all(len(prints) == 1 for prints in first.values())  # dp 1 and 2 agree
    assert fingerprints(rerun) == first
    assert len({p for prints in first.values() for p in prints}) == 2  # mixes differ


def third_domain(built: dict[str, list[Path]]) -> str:
    """The corpus's domain other than code and docs (``unicode``)."""
    (third,) = set(built) - {"code", "docs"}
    return third


@pytest.fixture(scope="module")
def twin_code(work: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """code_a and code_b: the corpus's code records split in two alternately (one
    distribution, other documents), and the corpus's third domain (``unicode``)."""
    built = corpus(tmp_path_factory.getbasetemp())
    code = Dataset("code", built["code"])
    texts = code.read_texts(list(range(code.num_records)))
    halves = {
        name: write_jsonl(work / f"{name}.jsonl", texts[half::2])
        for half, name in enumerate(("code_a", "code_b"))
    }
    third = third_domain(built)
    return {**{name: [path] for name, path in halves.items()}, third: built[third]}


def paired_sweep(
    work: Path, twin_code: dict[str, list[Path]], name: str, seeds: str
) -> dict[str, Any]:
    """Three mixes under ``seeds``, one run each on dp 1 (two at once): code_a only, code_b
    only (the A/A pair: the same distribution) and the third domain (``unicode``) only."""
    domains = sorted(twin_code)  # code_a, code_b, unicode
    process, sweep_dir = multirun(
        work,
        name,
        "hydra/launcher=zephon",
        datasets_override(twin_code),
        tokenizer_override(corpus(work.parent)),
        "model=mini",
        "data.holdout_bytes=4096",
        "data.holdout_docs=8",
        "train=smoke",
        "train.steps=2",
        "eval.interval=2",
        "resources.dp=1",
        mixes_override(domains, (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)),
        f"hydra.sweeper.replicate_seeds={seeds}",
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return {"summary": summary(sweep_dir), "stdout": process.stdout}


@pytest.fixture(scope="module")
def paired(work: Path, twin_code: dict[str, list[Path]]) -> dict[str, Any]:
    """The paired sweep under seeds 0 and 1."""
    return paired_sweep(work, twin_code, "paired", "[0,1]")


def test_a_seed_added_makes_the_sweeps_comparison_look_2_of_its_sequence(
    work: Path, twin_code: dict[str, list[Path]], paired: dict[str, Any]
) -> None:
    """The paired sweep again with seed 2 added: seeds 0 and 1 are answered, seed 2 trains,
    and the comparison finds the first as its earlier look and decides at 3 seeds' share."""
    again = paired_sweep(work, twin_code, "paired-3-seeds", "[0,1,2]")
    third = again["summary"]
    jobs = third["jobs"]
    assert sorted(bool(j.get("answered_from")) for j in jobs) == [False] * 3 + [True] * 6
    verdict, first = third["comparison"], paired["summary"]["comparison"]
    assert verdict["accepted"] and verdict["design"] == "sequential"
    assert first["look"]["number"] == 1 and first["look"]["seeds"] == 2
    look = verdict["look"]
    assert (look["number"], look["seeds"], look["sequence"]) == (2, 3, first["look"]["sequence"])
    assert [e["seeds"] for e in look["earlier"]] == [2]
    assert look["level"] == pytest.approx(LookPlan().level(3))
    assert "look 2 of its sequence" in again["stdout"]


def by_mixtures(
    pairs: list[dict[str, Any]], names: list[str]
) -> dict[tuple[str, str], dict[str, Any]]:
    """(dataset trained on, dataset trained on) -> pair, for mixes of one of ``names``."""
    only = {f"{d}=1.000": d for d in names}

    def trained(mixture: str) -> str:
        return next(d for key, d in only.items() if key in mixture)

    return {(trained(p["a_mixture"]), trained(p["b_mixture"])): p for p in pairs}


def test_paired_seeds_decide_a_b_and_cannot_tell_a_a(
    work: Path, twin_code: dict[str, list[Path]], paired: dict[str, Any]
) -> None:
    names = sorted(twin_code)  # code_a, code_b, unicode
    (third,) = set(names) - {"code_a", "code_b"}
    result = paired["summary"]
    jobs = result["jobs"]
    assert (
        sorted((j["seed"], j["status"]) for j in jobs)
        == [(0, "succeeded")] * 3 + [(1, "succeeded")] * 3
    )
    for job in jobs:  # the held-out budget holds: 8 documents a dataset, 4096 bytes at most
        evals = RunFolder(Path(job["folder"])).evals()
        assert sorted(evals) == [0, 2]  # the initial model, and the end
        record = evals[2]
        assert {d: len(v["bytes"]) for d, v in record["documents"].items()} == dict.fromkeys(
            names, 8
        )
        assert all(0 < sum(v["bytes"]) <= 4096 for v in record["documents"].values())
        assert record["bytes"] == {d: sum(v["bytes"]) for d, v in record["documents"].items()}
        assert record["seconds"] > 0
    verdict = result["comparison"]
    assert verdict["accepted"], verdict.get("refusals")
    assert len(verdict["seeds"]) == 2 and all(r["seeds"] == 2 for r in verdict["rows"])
    pairs = by_mixtures(verdict["pairs"], names)
    twins = pairs.get(("code_a", "code_b")) or pairs[("code_b", "code_a")]
    assert twins["decision"] == "cannot_tell", twins  # A/A: one distribution
    lo, hi = twins["interval"]
    assert lo < 0 < hi and "2 seeds" in twins["method"]

    # A/B on the code held-out sets: training on code beats training on unicode, decided
    process = zephon_in_process(
        work, "compare", "--sweep", result["sweep"], "--decide-on", "code_a,code_b", "--json"
    )
    assert process.returncode == 0, process.stderr[-3000:]
    on_code = json.loads(process.stdout)
    assert on_code["decided_on"] == ["code_a", "code_b"]
    for twin in ("code_a", "code_b"):
        pair = by_mixtures(on_code["pairs"], names)[(twin, third)]
        assert pair["decision"] == "a_better" and pair["interval"][1] < 0, pair
    assert (
        on_code["rows"][-1]["mixture"].endswith(f"{third}=1.000")
        and on_code["rows"][-1]["tier"] == 2
    )

    # the decisions are in the markdown and in MLflow: the parent run's tags and artifact
    assert "### Decisions" in paired["stdout"] and "**cannot_tell**" in paired["stdout"]
    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    parent = client.get_run(result["parent_run_id"])
    assert "cannot_tell" in parent.data.tags[TAG_DECISIONS]
    assert parent.data.tags[TAG_BEST] in {"none", *(r["mixture"] for r in verdict["rows"])}
    assert "### Decisions" in parent.data.tags["mlflow.note.content"]
    logged = json.loads(
        Path(
            client.download_artifacts(parent.info.run_id, "comparison.json", str(work / "dl"))
        ).read_text()
    )
    assert logged["pairs"] == verdict["pairs"]
    comparison_run = client.get_run(on_code["comparison_run_id"])
    assert "a_better" in comparison_run.data.tags[TAG_DECISIONS]


def test_invalid_sweeps_are_refused_before_anything_launches(
    tmp_path: Path, domains: list[str], base_overrides: list[str]
) -> None:
    unknown, _ = multirun(
        tmp_path, "unknown", *base_overrides, "hydra.sweeper.mix.explicit=[{web:1.0}]"
    )
    assert unknown.returncode == 2 and "web" in unknown.stderr, unknown.stderr
    bounds, _ = multirun(
        tmp_path,
        "bounds",
        *base_overrides,
        "hydra.sweeper.mix.grid_resolution=0.5",
        f"hydra.sweeper.mix.min={{{domains[0]}:0.6,{domains[1]}:0.6}}",
    )
    assert bounds.returncode == 2 and "no valid mix" in bounds.stderr, bounds.stderr
    dp, _ = multirun(
        tmp_path,
        "dp",
        *base_overrides,
        "hydra.sweeper.mix.grid_resolution=0.5",
        "hydra.sweeper.replicate_dp=[1,3]",
    )
    assert dp.returncode == 2 and "dp=3 does not divide data.lanes=4" in dp.stderr, dp.stderr
    assert "Traceback" not in unknown.stderr + bounds.stderr + dp.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_hydra_submitit_launcher_runs_the_jobs(
    tmp_path: Path, domains: list[str], base_overrides: list[str]
) -> None:
    """Slurm's launcher in its local mode (jobs pickled to submitit subprocesses); dry runs."""
    process, sweep_dir = multirun(
        tmp_path,
        "submitit",
        "hydra/launcher=submitit_local",
        "dry_run=true",
        *base_overrides,
        mixes_override(domains, *TWO, (0.0, 1.0, 1.0)),
    )
    assert process.returncode == 0, process.stderr[-5000:]
    jobs = summary(sweep_dir)["jobs"]
    assert [j["status"] for j in jobs] == ["succeeded"] * 3
    assert len({j["variant"] for j in jobs}) == 3
    assert list(sweep_dir.glob(".submitit/*/*_result.pkl"))


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if text in line:
            found.append(line)
    return found


def test_an_interrupted_sweep_stops_everything_and_continues_to_the_same_data(
    work: Path, domains: list[str], base_overrides: list[str], replicated: dict[str, Any]
) -> None:
    """SIGINT after the first step of a two-job sweep (zephon launcher, both jobs at once):
    nothing left running, runs interrupted and KILLED, exit 130, no traceback; the printed
    command continues the sweep to the data of the uninterrupted one, one MLflow run a job."""
    sweep_dir = work / "multirun" / "interrupted"
    before = set((work / "runs").iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweep = [sys.executable, "-m", "sweeps.app", "-m", "hydra/sweeper=zephon_mix"]
    sweep += [f"hydra.sweep.dir={sweep_dir}", "hydra/launcher=zephon", *base_overrides]
    sweep += [mixes_override(domains, *TWO), "hydra.sweeper.replicate_dp=[1]", "fresh=true"]
    agent = subprocess.Popen(
        sweep, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 600
    started: list[RunFolder] = []
    while not started and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        new = [RunFolder(p) for p in set((work / "runs").iterdir()) - before]
        started = [f for f in new if f.exists() and 1 in f.steps()]
    assert agent.poll() is None, f"the sweep ended before step 1 was seen:\n{agent.stderr}"
    agent.send_signal(signal.SIGINT)
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 130, f"exit {agent.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err + out
    name = started[0].name.rsplit("-", 1)[0]
    folders = [RunFolder(p) for p in sorted((work / "runs").glob(f"{name}-*"))]
    assert not processes_naming(str(work / "runs" / name))
    statuses = {f.name: f.state().status for f in folders}
    assert statuses[started[0].name] == "interrupted"
    assert set(statuses.values()) <= {"interrupted", "succeeded"}
    for folder in folders:
        if statuses[folder.name] == "interrupted":
            assert f"{folder.name}: interrupted at step" in err
            assert f"resume {folder.path.absolute()}" in err
    continue_line = next(line for line in err.splitlines() if "continue the sweep with: " in line)
    command = shlex.split(continue_line.split("continue the sweep with: ", 1)[1])

    client = MlflowClient(tracking_uri=resolve_uri(None, work))
    experiment = client.get_experiment_by_name("zephon")
    parents = client.search_runs(
        [experiment.experiment_id], f"tags.{TAG_KIND} = 'sweep' and tags.`{TAG_SWEEP}` = '{name}'"
    )
    assert len(parents) == 1 and parents[0].info.status == "KILLED"
    killed = {f.state().mlflow_run_id for f in folders if statuses[f.name] == "interrupted"}
    assert {client.get_run(i).info.status for i in killed} == {"KILLED"}

    resumed = subprocess.run(
        command, cwd=work, capture_output=True, text=True, timeout=1200, env=env
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]
    result = summary(sweep_dir)
    assert result["sweep"] == name and result["parent_run_id"] == parents[0].info.run_id
    reference = fingerprints(replicated["summary"])
    assert fingerprints(result) == {k: v for k, v in reference.items() if k in fingerprints(result)}
    assert len(fingerprints(result)) == 2
    children = client.search_runs(
        [experiment.experiment_id], f"tags.`{TAG_SWEEP}` = '{name}' and tags.{TAG_KIND} = 'run'"
    )
    assert sorted(c.info.run_id for c in children) == sorted(
        j["mlflow_run_id"] for j in result["jobs"]
    )
    assert {c.info.status for c in children} == {"FINISHED"}
    assert client.get_run(parents[0].info.run_id).info.status == "FINISHED"
