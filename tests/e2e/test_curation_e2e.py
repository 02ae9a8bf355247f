"""Curation on real TorchTitan training: the shared corpus's ``docs`` domain raw against a
copy filtered by datatrove's FineWeb quality filter, as variants of one contract
(``data.compared: dataset:docs``), 2 seeds each, scored on a fixed evaluation set that no
variant trains on; the same two versions without the declaration are refused, naming
``data.datasets.docs``."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.run import api
from pipeline import Dataset
from pipeline.processing import parse_chain
from tests.support.cli import zephon_in_process
from tests.support.experiments import scored_experiment
from tests.support.helpers import write_jsonl

pytestmark = pytest.mark.timeout(1800)

STEPS = 4
EQUAL = {"code": 1.0, "docs": 1.0, "unicode": 1.0}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, domains: dict[str, list[Path]]) -> Path:
    """``filtered/docs.jsonl`` (what FineWeb's filter keeps of docs) and ``eval.jsonl`` (12
    docs records, evenly spaced: the fixed yardstick)."""
    work = tmp_path_factory.mktemp("curation-e2e")
    docs = Dataset("docs", [str(p) for p in domains["docs"]])
    texts = docs.read_texts(range(docs.num_records))
    chain = parse_chain(["fineweb_quality"])
    kept = [t for t in texts if chain.apply(t, "docs")[0] is not None]
    assert 0.2 * len(texts) < len(kept) < 0.9 * len(texts)  # a real filter: it drops some
    write_jsonl(work / "filtered.jsonl", kept)
    write_jsonl(work / "eval.jsonl", [texts[k * len(texts) // 12] for k in range(12)])
    return work


def experiment(domains: dict[str, list[Path]], work: Path, docs: str, seed: int, **data: Any):
    """The shared corpus with ``docs`` raw or filtered, the eval set, one seed block."""
    config = scored_experiment(domains, EQUAL, steps=STEPS, seed=seed, shuffle_seed=seed, **data)
    if docs == "filtered":
        config["data"]["datasets"]["docs"] = [str(work / "filtered.jsonl")]
    config["data"]["eval_sets"] = {"docs_eval": [str(work / "eval.jsonl")]}
    config["train"]["seed"] = seed
    config["resources"]["max_procs"] = 1
    return config


@pytest.fixture(scope="module")
def runs(work: Path, domains: dict[str, list[Path]]) -> dict[str, api.RunResult]:
    """raw and filtered x seeds 0 and 1, declared; raw and filtered seed 0, undeclared."""
    configs = {
        f"{docs}-s{seed}": experiment(domains, work, docs, seed, compared="dataset:docs")
        for docs in ("raw", "filtered")
        for seed in (0, 1)
    }
    configs |= {f"{docs}-plain": experiment(domains, work, docs, 0) for docs in ("raw", "filtered")}
    cwd = os.getcwd()
    os.chdir(work)  # the embedded store is ./mlflow.db
    try:
        with ThreadPoolExecutor(2) as pool:  # dp 1, a core each
            futures = {
                name: pool.submit(api.run, config, dp=1, run_name=name, fresh=True)
                for name, config in configs.items()
            }
            return {name: future.result() for name, future in futures.items()}
    finally:
        os.chdir(cwd)


def compare(work: Path, runs: dict[str, api.RunResult], *names: str, code: int) -> dict:
    ids = [runs[n].mlflow_run_id or "" for n in names]
    cli = zephon_in_process(work, "compare", *ids, "--decide-on", "docs_eval", "--json")
    assert cli.returncode == code, cli.stdout + cli.stderr
    return json.loads(cli.stdout)


def test_dataset_versions_are_compared_on_the_fixed_eval_set(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    verdict = compare(work, runs, "raw-s0", "raw-s1", "filtered-s0", "filtered-s1", code=0)
    assert verdict["accepted"] and verdict["decided_on"] == ["docs_eval"]
    assert "docs_eval" in verdict["domains"]  # scored by name, beside the held-out domains
    rows = verdict["rows"]
    assert len(rows) == 2 and all(r["replicates"] == 2 and r["seeds"] == 2 for r in rows)
    labels = sorted(r["mixture"] for r in rows)  # each variant named by its docs version
    assert all(label.startswith("docs@") for label in labels), labels
    assert str(work / "filtered.jsonl") in "".join(labels)
    assert len(verdict["pairs"]) == 1
    assert verdict["pairs"][0]["decision"] in ("a_better", "b_better", "cannot_tell")
    # What each run read and removed, per dataset: the runs' own step records, summed.
    assert len(verdict["data_read"]) == 4
    for name, datasets in verdict["data_read"].items():
        assert set(datasets) == {"code", "docs", "unicode"}, name
        assert all(counts["records_read"] > 0 for counts in datasets.values()), name
        steps = RunFolder(runs[name].folder).steps().values()  # the guard's sums of them
        for dataset, counts in datasets.items():
            assert counts["records_read"] == sum(
                s.get("records_read", {}).get(dataset, 0) for s in steps
            ), (name, dataset)
            repeated = sum(s.get("repeated", {}).get(dataset, 0) for s in steps)
            assert counts["unique_records"] == counts["records_read"] - repeated
            assert verdict["decontaminated"][name][dataset] == sum(
                s.get("removed", {}).get(dataset, {}).get("decontaminate", 0) for s in steps
            ), (name, dataset)


def test_each_run_records_what_it_read_and_removed(runs: dict[str, api.RunResult]) -> None:
    """steps.jsonl: records read per dataset, summed over the ranks, every step; removals by
    the step that removed them (only decontamination here: no chain)."""
    for name in ("raw-s0", "filtered-s1"):
        steps = RunFolder(runs[name].folder).steps()
        assert sorted(steps) == list(range(1, STEPS + 1))
        read = {d: sum(s.get("records_read", {}).get(d, 0) for s in steps.values()) for d in EQUAL}
        assert all(n > 0 for n in read.values()), (name, read)
        removing = {k for s in steps.values() for r in s.get("removed", {}).values() for k in r}
        assert removing <= {"decontaminate"}


def test_the_same_versions_undeclared_are_refused_naming_the_setting(
    work: Path, runs: dict[str, api.RunResult]
) -> None:
    verdict = compare(work, runs, "raw-plain", "filtered-plain", code=3)
    contract = [r for r in verdict["refusals"] if r["code"] == "contract_mismatch"]
    assert contract and "data.datasets.docs" in contract[0]["detail"]["settings"]
    assert "declare data.compared=dataset:docs" in contract[0]["message"]
