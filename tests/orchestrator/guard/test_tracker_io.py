"""Runs read from MLflow and a verdict logged back (orchestrator.guard.tracker_io): the
round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.guard import (
    RefusalCode,
    RunSummary,
    compare,
    comparison_markdown,
    load_runs,
    log_comparison,
    mixture_label,
)
from orchestrator.tracking.mlflow_names import (
    ARTIFACT_DIR,
    TAG_BEST,
    TAG_COMPARED,
    TAG_CONTRACT,
    TAG_DECISIONS,
    TAG_DP_HISTORY,
    TAG_INIT,
    TAG_KIND,
    TAG_RECIPE,
    TAG_STATUS,
    TAG_SWEEP,
    TAG_VARIANT,
    TAG_VERDICT,
)
from orchestrator.tracking.store_reader import training_run_ids
from orchestrator.tracking.tracker import Tracker
from tests.support.guard_runs import MIX_A, MIX_B, RECIPE, codes, four_runs


def _log_training_run(client, experiment_id: str, run: RunSummary, tmp: Path, sweep: str) -> str:
    created = client.create_run(
        experiment_id,
        run_name=run.name,
        tags={
            TAG_KIND: "run",
            TAG_VARIANT: run.variant,
            TAG_CONTRACT: run.contract_fingerprint,
            TAG_DP_HISTORY: ",".join(map(str, run.dp_sizes)),
            TAG_SWEEP: sweep,
            TAG_RECIPE: run.recipe_fingerprint,
            TAG_INIT: run.init_sha256,
            TAG_STATUS: run.status,
        },
    )
    run_id = created.info.run_id
    folder = tmp / run.name / ARTIFACT_DIR
    folder.mkdir(parents=True)
    (folder / "experiment.json").write_text(
        json.dumps(
            {
                "config": {"train": {"steps": run.planned_steps}},
                "contract": run.contract,
                "mixture": run.mixture,
                "contract_fingerprint": run.contract_fingerprint,
                "variant": run.variant,
                "recipe": RECIPE,
                "recipe_fingerprint": run.recipe_fingerprint,
            }
        )
    )
    steps = [
        {"step": s, "global_digest": d, "dp_size": run.dp_sizes[-1]}
        for s, d in sorted(run.digests.items())
    ]
    for record, name in zip(steps, sorted(run.shards_read), strict=False):
        record["shards_read"] = {name: run.shards_read[name]}  # as the trainer: when read
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (folder / "eval.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "step": s,
                    "bpb": {k: v for k, v in scores.items() if k != "aggregate"},
                    "aggregate_bpb": scores["aggregate"],
                    "documents": run.documents[s],
                }
            )
            + "\n"
            for s, scores in sorted(run.evals.items())
        )
    )
    client.log_artifacts(run_id, str(folder), ARTIFACT_DIR)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def test_mlflow_round_trip(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment_id = client.create_experiment(
        "mixes", artifact_location=(tmp_path / "artifacts").as_uri()
    )
    originals = four_runs()
    for run in originals:  # shards read, recorded at the steps that first read them
        run.shards_read = {
            "web": {"3": {"file": "part-3.jsonl", "sha256": "a" * 64}},
            "code": {"0": {"file": "code.jsonl", "sha256": "c" * 64}},
        }
    ids = [
        _log_training_run(client, experiment_id, r, tmp_path / "src", "sweep-1") for r in originals
    ]
    # a run with no artifacts at all, outside the sweep
    bare = client.create_run(experiment_id, run_name="bare", tags={TAG_KIND: "run"}).info.run_id
    client.create_run(experiment_id, run_name="noise", tags={TAG_KIND: "comparison"})

    uri = client.tracking_uri
    found = training_run_ids(uri, experiment="mixes", sweep="sweep-1")
    assert found == ids  # ordered by run name: a-1, a-2, b-1, b-2
    assert set(training_run_ids(uri, experiment="mixes")) == {*ids, bare}
    with pytest.raises(ValueError, match="no training runs"):
        training_run_ids(uri, experiment="mixes", sweep="nope")
    with pytest.raises(ValueError, match="no MLflow experiment"):
        training_run_ids(uri, experiment="missing")

    tracker = Tracker(uri, "comparisons")
    loaded = load_runs(tracker, found)
    for got, want in zip(loaded, originals, strict=True):
        assert (got.name, got.variant, got.contract_fingerprint) == (
            want.name,
            want.variant,
            want.contract_fingerprint,
        )
        assert got.contract == want.contract and got.mixture == want.mixture
        assert got.digests == want.digests and got.dp_sizes == want.dp_sizes
        assert got.evals == want.evals  # JSON round-trips floats exactly
        assert got.documents == want.documents
        assert (got.recipe, got.recipe_fingerprint, got.init_sha256, got.status) == (
            want.recipe,
            want.recipe_fingerprint,
            want.init_sha256,
            want.status,
        )
        assert (got.planned_steps, got.folder) == (10, "")  # no run-folder tag logged here
        assert got.shards_read == want.shards_read
    result = compare(loaded)
    assert result.accepted, result.refusals
    expected = compare(originals).rows
    assert [{k: v for k, v in row.to_json().items() if k != "run_ids"} for row in result.rows] == [
        {k: v for k, v in row.to_json().items() if k != "run_ids"} for row in expected
    ]

    parent = client.create_run(experiment_id, run_name="sweep-parent").info.run_id
    cmp_id = log_comparison(
        tracker,
        result,
        runs=loaded,
        parent_run_id=parent,
        workdir=tmp_path / "work",
    )
    cmp_run = client.get_run(cmp_id)
    assert cmp_run.info.status == "FINISHED"
    assert cmp_run.info.run_name.startswith("compare-")
    tags = cmp_run.data.tags
    assert tags[TAG_KIND] == "comparison" and tags[TAG_VERDICT] == "accepted"
    assert tags[TAG_COMPARED].split(",") == ids
    assert tags["mlflow.parentRunId"] == parent
    artifacts = {a.path for a in client.list_artifacts(cmp_id)}
    assert artifacts == {"comparison.json", "comparison.md", "comparison.png"}
    logged = json.loads(
        Path(client.download_artifacts(cmp_id, "comparison.json", str(tmp_path / "dl"))).read_text()
    )
    assert logged["verdict"] == "accepted" and logged["eval_step"] == 10
    assert logged["pairs"] == result.to_json()["pairs"] and logged["pairs"][0]["decision"]
    assert tags[TAG_BEST] == "none"  # one seed decides nothing
    assert tags[TAG_DECISIONS].startswith(
        f"{mixture_label(MIX_B)} vs {mixture_label(MIX_A)}: cannot_tell -0.1100 ["
    )

    # the bare run loads without crashing and is refused with reasons
    (bare_summary,) = load_runs(tracker, [bare])
    assert bare_summary.digests == {} and bare_summary.evals == {}
    refused = compare([*loaded, bare_summary])
    assert not refused.accepted
    assert RefusalCode.NO_DATA in codes(refused.refusals)
    refused_id = log_comparison(
        tracker, refused, runs=[*loaded, bare_summary], workdir=tmp_path / "w2"
    )
    refused_run = client.get_run(refused_id)
    assert refused_run.info.status == "FINISHED"
    assert refused_run.data.tags[TAG_VERDICT] == "refused"
    assert TAG_BEST not in refused_run.data.tags
    assert "mlflow.parentRunId" not in refused_run.data.tags
    assert {a.path for a in client.list_artifacts(refused_id)} == {
        "comparison.json",
        "comparison.md",
    }
    with pytest.raises(ValueError, match="no MLflow run"):
        load_runs(tracker, ["0" * 32])


def test_a_comparison_with_a_seed_added_is_numbered_the_next_look_of_its_sequence(
    tmp_path: Path,
) -> None:
    """A and B compared at 2 seeds and logged; the same variants at 3 seeds find that look,
    in another experiment too, and name themselves look 2; other variants start their own."""
    from orchestrator.guard.decisions import LookPlan
    from orchestrator.guard.tracker_io import count_looks
    from tests.support.guard_runs import MIX_A, MIX_B, seeded

    def runs(seeds: int, mixtures: tuple = (MIX_A, MIX_B)) -> list[RunSummary]:
        return [
            seeded(f"{k}-s{s}", mix, s, 1.0 + 0.01 * s + 0.05 * k)
            for k, mix in enumerate(mixtures)
            for s in range(seeds)
        ]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = compare(runs(2))
    count_looks(Tracker(uri, "sweeps"), first)
    assert first.look == 1 and not first.earlier_looks
    first_id = log_comparison(Tracker(uri, "sweeps"), first, runs=runs(2), workdir=tmp_path)
    second = compare(runs(3))
    assert second.sequence == first.sequence
    plan = LookPlan()  # each look decides at its seed count's share of the budget
    assert (first.look_level, second.look_level) == pytest.approx((plan.level(2), plan.level(3)))
    count_looks(Tracker(uri, "zephon"), second)
    assert second.look == 2
    assert second.earlier_looks == [{"comparison_run_id": first_id, "seeds": 2}]
    report = comparison_markdown(second)
    assert "look 2 of its sequence" in report and first_id in report
    assert second.to_json()["look"]["number"] == 2
    other = compare(runs(3, (MIX_A, {"code": 1.0})))
    count_looks(Tracker(uri, "zephon"), other)
    assert other.sequence != first.sequence and other.look == 1
