"""``data.compared``: dataset versions and processing chains as variants, with the data
contract holding everything else, and the guard naming what differs when undeclared."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExperimentError
from orchestrator.experiment import fingerprints, load_experiment, validate
from orchestrator.guard.rules.configuration import contract_mismatch_refusal
from pipeline import fingerprint
from tests.support.guard_runs import make_run
from tests.support.helpers import write_jsonl


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``raw/`` web (60 records), ``filtered/`` (its longer half), ``code/`` and an eval set."""
    root = tmp_path_factory.mktemp("curation")
    web = [f"web page {i}: " + "words of the page. " * (1 + i % 7) for i in range(60)]
    for folder, texts in (("raw", web), ("filtered", [t for t in web if len(t) > 60])):
        (root / folder).mkdir()
        write_jsonl(root / folder / "part-0.jsonl", texts)
    (root / "code").mkdir()
    write_jsonl(root / "code" / "part-0.jsonl", [f"def f{i}(): return {i}\n" for i in range(40)])
    write_jsonl(root / "eval.jsonl", [f"a fixed evaluation document {i}." for i in range(10)])
    return root


def experiment(root: Path, web: str = "raw", **data: Any) -> dict[str, Any]:
    return {
        "data": {
            "datasets": {
                "web": [str(root / web / "*.jsonl")],
                "code": [str(root / "code/*.jsonl")],
            },
            "eval_sets": {"fixed": [str(root / "eval.jsonl")]},
            "cache_dir": str(root / "cache"),
            **data,
        }
    }


def prints(root: Path, web: str = "raw", **data: Any):
    return fingerprints(load_experiment(experiment(root, web, **data)))


def refusal_text(a, b) -> str:
    """The guard's contract refusal of two runs with these fingerprints ("" if none)."""
    ra = make_run("a", contract=a.contract)
    rb = make_run("b", contract=b.contract)
    refusal = contract_mismatch_refusal(ra, rb, {"id-a": "a", "id-b": "b"}, ())
    return "" if refusal is None else refusal.message


def test_dataset_versions_are_variants_of_one_contract_when_declared(corpus: Path) -> None:
    raw = prints(corpus, "raw", compared="dataset:web")
    filtered = prints(corpus, "filtered", compared="dataset:web")
    assert raw.contract_fingerprint == filtered.contract_fingerprint
    assert raw.variant != filtered.variant
    version = filtered.varied["data.datasets.web"]
    assert version["paths"] == [str(corpus / "filtered/*.jsonl")]
    assert version["fingerprint"] != raw.varied["data.datasets.web"]["fingerprint"]
    assert refusal_text(raw, filtered) == ""
    # The eval set is in the contract: its content fingerprint, scored by name.
    assert [e["name"] for e in raw.contract["eval_sets"]] == ["fixed"]


def test_undeclared_dataset_versions_are_refused_naming_the_setting(corpus: Path) -> None:
    raw, filtered = prints(corpus, "raw"), prints(corpus, "filtered")
    assert raw.contract_fingerprint != filtered.contract_fingerprint
    message = refusal_text(raw, filtered)
    assert "in data.datasets.web:" in message
    assert "declare data.compared=dataset:web" in message


def test_a_declared_axis_still_refuses_anything_else(corpus: Path) -> None:
    a = prints(corpus, "raw", compared="dataset:web")
    b = prints(corpus, "filtered", compared="dataset:web", seq_len=64)
    message = refusal_text(a, b)
    assert "more than the mixture and data.datasets.web" in message
    assert "data.seq_len" in message and "data.datasets.web:" not in message


def test_processing_chains_are_variants_when_declared(corpus: Path) -> None:
    chain = [{"step": "length", "min_chars": 60, "datasets": ["web"]}]
    none = prints(corpus, compared="processing")
    some = prints(corpus, compared="processing", process=chain)
    assert none.contract_fingerprint == some.contract_fingerprint
    assert none.variant != some.variant
    assert some.varied["data.process"][0]["step"] == "length"
    assert "in data.process:" in refusal_text(prints(corpus), prints(corpus, process=chain))


def test_editing_a_user_filter_changes_the_contract(corpus: Path, tmp_path: Path) -> None:
    module = tmp_path / "lab_filters.py"
    module.write_text("def keep(text):\n    return 'page 1' not in text\n")
    sys.path.insert(0, str(tmp_path))
    try:
        before = prints(corpus, process=["lab_filters:keep"])
        module.write_text(module.read_text() + "# stricter soon\n")
        sys.modules.pop("lab_filters")
        after = prints(corpus, process=["lab_filters:keep"])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("lab_filters", None)
    assert before.contract_fingerprint != after.contract_fingerprint
    assert "in data.process:" in refusal_text(before, after)


def test_a_mixture_experiment_keeps_the_contract_and_variant_it_always_had(corpus: Path) -> None:
    plain = fingerprints(load_experiment({"data": {**experiment(corpus)["data"], "eval_sets": {}}}))
    assert not {"compared", "process", "eval_sets"} & set(plain.contract)
    assert plain.varied == {}
    assert plain.variant == fingerprint(
        {"contract": plain.contract_fingerprint, "mixture": plain.mixture}
    )


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"compared": "dataset:nope"}, "no dataset 'nope'; use one of ['code', 'web']"),
        ({"compared": "datasets"}, "use mixture, processing or dataset:NAME"),
        ({"process": ["gopher_qualty"]}, "data.process: process entry 0: process step="),
        ({"process": [{"step": "length", "datasets": ["wbe"]}]}, "unknown dataset(s) ['wbe']"),
        ({"eval_sets": {"web": ["/nowhere/*.jsonl"]}}, "data.eval_sets.web has a training"),
        ({"eval_sets": {"fixed": ["/nowhere/*.jsonl"]}}, "'/nowhere/*.jsonl' matches no file"),
    ],
)
def test_wrong_curation_settings_are_refused_before_any_work(
    corpus: Path, data: dict[str, Any], problem: str
) -> None:
    config = experiment(corpus)
    config["data"].update(data)
    with pytest.raises(ExperimentError) as error:
        validate(load_experiment(config))
    assert any(problem in p for p in error.value.problems), error.value.problems


def test_a_dataset_comparison_needs_a_yardstick_that_does_not_move(corpus: Path) -> None:
    config = {
        "data": {"datasets": {"web": [str(corpus / "raw/*.jsonl")]}, "compared": "dataset:web"}
    }
    with pytest.raises(ExperimentError, match="which move with its version"):
        validate(load_experiment(config))
