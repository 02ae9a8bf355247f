"""The comparison guard (orchestrator.guard): verdicts on RunSummary objects, and the MLflow round trip."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.guard import (
    Comparison,
    Refusal,
    RefusalCode,
    RunSummary,
    check,
    compare,
    comparison_markdown,
    load_runs,
    log_comparison,
    mixture_label,
    plot,
)
from orchestrator.tracking.names import (
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
    flatten,
)
from orchestrator.tracking.reading import training_run_ids
from orchestrator.tracking.tracker import Tracker

DOMAINS = ("code", "docs", "i18n")
MIX_A = {"code": 0.5, "docs": 0.3, "i18n": 0.2}
MIX_B = {"code": 0.2, "docs": 0.3, "i18n": 0.5}


def _sha(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def make_contract(**changes: object) -> dict:
    contract = {
        "datasets": [
            {
                "name": d,
                "fingerprint": _sha("dataset", d),
                "field": "text",
                "exhausted": "cycle",
                "holdout_bytes": 100_000,
            }
            for d in DOMAINS
        ],
        "tokenizer": {"id": "gpt2", "version": "tiktoken-0.14.0"},
        "seed": 0,
        "max_length": 64,
        "shuffle": {"buffer_size": 64, "seed": 0},
        "global_batch_size": 16,
        "lanes": 8,
        "flush_every": 4,
        "chunk_tokens": 512,
        "tokens_per_byte": dict.fromkeys(DOMAINS, 0.3),
    }
    contract.update(changes)
    return contract


RECIPE = {
    "optimizer": {"param_groups": [{"optimizer_kwargs": {"lr": 8e-4}, "pattern": ".*"}]},
    "lr_scheduler": {"warmup_steps": 2},
    "training": {"steps": 10, "max_norm": 1.0},
    "debug": {"seed": 42},
    "model_spec": {"flavor": "zephon_mini", "model": {"dim": 64}},
    "versions": {"torch": "2.13.0", "torchtitan": "0.3.0", "zephon": "0.1.0"},
}


def make_recipe(**changes: object) -> dict:
    """A flat recipe as ``load_runs`` reads one, with dotted ``changes``."""
    return {**flatten(RECIPE), "extended_at_steps": [], **changes}


def digests_for(variant: str, steps: int = 10) -> dict[int, str]:
    return {s: _sha("batch", variant, s) for s in range(1, steps + 1)}


def evals_for(base: float, steps: tuple[int, ...] = (5, 10)) -> dict[int, dict[str, float]]:
    out = {}
    for s in steps:
        scores = {d: base + 0.1 * i - 0.01 * s for i, d in enumerate(DOMAINS)}
        scores["aggregate"] = sum(scores.values()) / len(scores)
        out[s] = scores
    return out


DOC_BYTES = [120, 340, 560, 200, 780, 410]


def documents_for(
    name: str, evals: dict[int, dict[str, float]]
) -> dict[int, dict[str, dict[str, list[float]]]]:
    """Per-document bits whose bits per byte are ``evals``'s scores, with a per-run pattern
    of document noise that sums to zero (so each dataset's score is unchanged)."""
    k = int(_sha("noise", name)[:4], 16) / 65536 * 4.0
    noise = [k, -k, 0.5 * k, -0.5 * k, 0.0, 0.0]
    return {
        step: {
            d: {
                "bits": [n * x + e for n, e in zip(DOC_BYTES, noise, strict=True)],
                "bytes": list(DOC_BYTES),
            }
            for d, x in scores.items()
            if d != "aggregate"
        }
        for step, scores in evals.items()
    }


def make_run(
    name: str,
    mixture: dict[str, float] = MIX_A,
    *,
    contract: dict | None = None,
    base: float = 1.0,
    dp: list[int] | None = None,
    digests: dict[int, str] | None = None,
    evals: dict[int, dict[str, float]] | None = None,
    recipe: dict | None = None,
    init: str = "init-0",
    status: str = "succeeded",
) -> RunSummary:
    contract = make_contract() if contract is None else contract
    recipe = make_recipe() if recipe is None else recipe
    evals = evals_for(base) if evals is None else evals
    fingerprint = _sha("contract", contract)
    variant = _sha("variant", fingerprint, sorted(mixture.items()))
    return RunSummary(
        run_id=f"id-{name.replace(' ', '-')}",
        name=name,
        variant=variant,
        contract_fingerprint=fingerprint,
        contract=contract,
        mixture=dict(mixture),
        digests=digests_for(variant) if digests is None else digests,
        evals=evals,
        documents=documents_for(name, evals),
        dp_sizes=dp or [1],
        recipe_fingerprint=_sha("recipe", recipe),
        recipe=recipe,
        init_sha256=_sha("init", init),
        status=status,
        planned_steps=max(digests or {}, default=10),
        folder=f"/runs/{name}",
    )


def four_runs() -> list[RunSummary]:
    """Two variants x two replicates, on dp 1 and dp 2; B is better (lower bpb)."""
    return [
        make_run("a-1", MIX_A, base=1.00, dp=[1]),
        make_run("a-2", MIX_A, base=1.02, dp=[2]),
        make_run("b-1", MIX_B, base=0.90, dp=[2, 1]),
        make_run("b-2", MIX_B, base=0.90, dp=[2]),
    ]


def codes(refusals: list[Refusal]) -> list[RefusalCode]:
    return [r.code for r in refusals]


# -- accepted ---------------------------------------------------------------------------------


def test_accepted_rows_means_and_spread(tmp_path: Path) -> None:
    runs = four_runs()
    result = compare(runs)
    assert result.accepted, result.refusals
    assert result.refusals == [] and check(runs) == []
    assert result.eval_step == 10
    assert result.domains == list(DOMAINS)
    assert [row.mixture for row in result.rows] == [
        mixture_label(MIX_B),
        mixture_label(MIX_A),
    ]
    best, second = result.rows
    assert best.rank == 1 and second.rank == 2
    assert mixture_label(MIX_A) == "code=0.500 docs=0.300 i18n=0.200"
    assert best.variant == runs[2].variant[:12] and len(best.variant) == 12
    assert best.replicates == 2 and best.runs == ["b-1", "b-2"]
    assert best.dp_sizes == "1,2" and second.dp_sizes == "1,2"
    # means: base + 0.1*i - 0.1 at step 10
    assert second.bpb["code"] == pytest.approx(1.01 - 0.1)
    assert second.bpb["i18n"] == pytest.approx(1.01 + 0.2 - 0.1)
    assert second.aggregate_bpb == pytest.approx(1.01 + 0.1 - 0.1)
    assert second.aggregate_range == pytest.approx(0.02)
    assert second.aggregate_std == pytest.approx(0.02 / 2**0.5)
    assert best.aggregate_range == pytest.approx(0.0)
    assert best.aggregate_std == pytest.approx(0.0)
    assert result.common_steps == 10

    payload = result.to_json()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["verdict"] == "accepted" and len(payload["rows"]) == 2

    md = comparison_markdown(result)
    assert "accepted" in md and "eval step 10" in md
    assert "all data fingerprints agreed" in md and "every run finished its schedule" in md
    assert f"recipe `{runs[0].recipe_fingerprint[:12]}`" in md
    assert payload["recipe_fingerprint"] == runs[0].recipe_fingerprint
    assert "code=0.200 docs=0.300 i18n=0.500" in md and "b-1, b-2" in md
    assert md.count("\n| ") == 5  # header + two rows, then the decisions' header + one pair
    (pair,) = payload["pairs"]
    assert (pair["a"], pair["b"]) == (best.variant, second.variant)
    assert pair["difference"] == pytest.approx(best.aggregate_bpb - second.aggregate_bpb)
    lo, hi = pair["interval"]
    assert lo < pair["difference"] < hi < 0  # the documents alone would separate them...
    assert pair["decision"] == "cannot_tell"  # ...but one seed leaves training noise unmeasured
    assert "1 seed: training noise not measured, so not decided" in pair["method"]
    assert not best.best and (best.tier, second.tier) == (1, 1)
    assert 0 < best.aggregate_se < 0.1 and "± docs" in md  # the held-out sample's error
    assert payload["best"] is None and payload["smallest_detectable"] is None
    assert "**cannot_tell**" in md and "One seed decides nothing" in md

    png = plot(result, runs, tmp_path / "out" / "cmp.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width > 400 and height > 400


ROW_KEYS = [
    "rank",
    "variant",
    "variant_id",
    "mixture",
    "shares",
    "replicates",
    "seeds",
    "dp_sizes",
    "bpb",
    "aggregate_bpb",
    "aggregate_se",
    "aggregate_range",
    "aggregate_std",
    "dp_range",
    "runs",
    "run_ids",
    "run_aggregates",
    "vs_best",
    "tier",
    "best",
    "initial_bpb",
]
"""The keys of a row in ``comparison.json``, in the order readers of the file know."""


def test_rows_and_refusal_codes_serialise_as_plain_json() -> None:
    payload = compare(four_runs()).to_json()
    assert [list(row) for row in payload["rows"]] == [ROW_KEYS, ROW_KEYS]
    (refusal,) = compare([make_run("only")]).to_json()["refusals"]
    assert list(refusal) == ["code", "message", "runs", "detail"]
    assert refusal["code"] == "too_few_runs" and type(refusal["code"]) is str
    assert [code.value for code in RefusalCode] == [
        "too_few_runs",
        "no_data",
        "diverged_data",
        "contract_mismatch",
        "no_common_eval",
        "unfinished",
        "recipe_mismatch",
        "init_mismatch",
        "unpaired_seeds",
        "shard_changed",
    ]


def test_one_replicate_has_zero_spread() -> None:
    result = compare([make_run("a", MIX_A), make_run("b", MIX_B, base=1.5)])
    assert result.accepted
    assert all(r.aggregate_std == 0.0 and r.aggregate_range == 0.0 for r in result.rows)
    assert [r.runs for r in result.rows] == [["a"], ["b"]]
    assert "no variant had two replicates" in comparison_markdown(result)


def test_plot_refuses_refused_comparison(tmp_path: Path) -> None:
    result = compare([make_run("a")])
    with pytest.raises(ValueError, match="accepted"):
        plot(result, [], tmp_path / "x.png")


# -- refusals ---------------------------------------------------------------------------------


def test_seed_tampered_names_seed_and_both_values() -> None:
    runs = [make_run("run a", MIX_A), make_run("run b", MIX_B, contract=make_contract(seed=1))]
    result = compare(runs)
    assert not result.accepted and result.rows == []
    assert codes(result.refusals) == [RefusalCode.CONTRACT_MISMATCH]
    refusal = result.refusals[0]
    assert refusal.detail["fields"] == {"seed": {"run a": 0, "run b": 1}}
    assert "seed: 0 (run a) vs 1 (run b)" in refusal.message
    assert "re-run run b with seed=0" in refusal.message
    assert refusal.runs == ["id-run-a", "id-run-b"]
    assert "refused" in comparison_markdown(result) and "seed" in comparison_markdown(result)


def test_dataset_fingerprint_tampered_names_dotted_field() -> None:
    contract = make_contract()
    contract["datasets"][0]["fingerprint"] = "f" * 64
    runs = [make_run("a", MIX_A), make_run("b", MIX_B, contract=contract)]
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert list(refusal.detail["fields"]) == ["datasets.code.fingerprint"]
    assert "datasets.code.fingerprint" in refusal.message


def test_nested_and_missing_fields_and_mixture_key_ignored() -> None:
    changed = make_contract(shuffle={"buffer_size": 128, "seed": 0}, mixture={"code": 1.0})
    del changed["flush_every"]
    base = make_contract(mixture={"code": 0.5, "docs": 0.5})
    (refusal,) = check(
        [make_run("a", MIX_A, contract=base), make_run("b", MIX_B, contract=changed)]
    )
    assert set(refusal.detail["fields"]) == {"shuffle.buffer_size", "flush_every"}
    assert refusal.detail["fields"]["flush_every"]["b"] == "<absent>"


def staged_contract(first_phase: dict[str, str]) -> dict:
    """A two-phase contract whose compared phase (1) is the runs' mixture."""
    return make_contract(
        phases=[{"until_tokens": 4096, "mixture": first_phase}, {"until_tokens": None}],
        compared_phase=1,
    )


def test_staged_runs_differing_only_in_the_compared_phase_are_compared() -> None:
    first = {"code": "0.500000", "docs": "0.500000"}
    runs = [
        make_run(name, mix, contract=staged_contract(first))
        for name, mix in (("a", MIX_A), ("b", MIX_B))
    ]
    assert check(runs) == []


def test_staged_runs_whose_other_phase_differs_are_refused_naming_phase_and_dataset() -> None:
    a = make_run("a", MIX_A, contract=staged_contract({"code": "0.500000", "docs": "0.500000"}))
    b = make_run("b", MIX_B, contract=staged_contract({"code": "0.700000", "docs": "0.300000"}))
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert set(refusal.detail["fields"]) == {"phases.0.mixture.code", "phases.0.mixture.docs"}
    assert "outside the compared phase (phase 0: code, docs)" in refusal.message
    assert '"0.500000" (a) vs "0.700000" (b)' in refusal.message


def test_equal_contracts_different_fingerprint_refused() -> None:
    a, b = make_run("a", MIX_A), make_run("b", MIX_B)
    b.contract_fingerprint = "0" * 64
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.CONTRACT_MISMATCH
    assert "contract_fingerprint" in refusal.detail["fields"]
    assert "contract_fingerprint" in refusal.message


def test_same_variant_diverging_at_step_5() -> None:
    a, b = make_run("a", dp=[1]), make_run("a-again", dp=[2])
    b.digests = dict(b.digests)
    for step in range(5, 11):
        b.digests[step] = _sha("other data", step)
    (refusal,) = check([b, a])  # order of input does not matter
    assert refusal.code == RefusalCode.DIVERGED_DATA
    assert refusal.detail["step"] == 5
    assert "step 5" in refusal.message and "re-run one of them" in refusal.message
    assert a.digests[5][:12] in refusal.message and b.digests[5][:12] in refusal.message
    assert refusal.runs == ["id-a", "id-a-again"]


def test_same_variant_without_common_steps() -> None:
    a, b = make_run("a"), make_run("b")
    b.digests = {s + 100: d for s, d in b.digests.items()}
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.DIVERGED_DATA and "no common steps" in refusal.message


def test_shorter_replicate_checked_on_common_steps_only() -> None:
    a, b = make_run("a"), make_run("b", base=1.01)
    b.digests = {s: d for s, d in b.digests.items() if s <= 6}
    assert codes(compare([a, b]).refusals) == [RefusalCode.UNFINISHED]  # not diverged_data


# -- recipes, initial weights, unfinished runs --------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("optimizer.param_groups.0.optimizer_kwargs.lr", 1e-3),  # another learning rate
        ("training.steps", 20),  # another schedule length
        ("debug.seed", 7),  # another init seed
        ("model_spec.model.dim", 128),  # another model size
        ("versions.torch", "2.12.0"),
    ],
)
def test_recipe_change_is_refused_naming_the_field_and_both_values(
    field: str, value: object
) -> None:
    changed = make_run("b", MIX_B, recipe=make_recipe(**{field: value}), base=0.9)
    result = compare([make_run("a"), make_run("a-2", base=1.01), changed])
    assert not result.accepted and codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    (refusal,) = result.refusals
    assert refusal.detail["fields"] == {field: {"a": flatten(RECIPE)[field], "b": value}}
    assert field in refusal.message and json.dumps(value) in refusal.message
    assert refusal.runs == ["id-a", "id-b"]


def test_recipe_change_within_a_variant_is_refused_too() -> None:
    a2 = make_run("a-2", recipe=make_recipe(**{"lr_scheduler.warmup_steps": 5}))
    result = compare([make_run("a"), a2, make_run("b", MIX_B)])
    assert codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    assert list(result.refusals[0].detail["fields"]) == ["lr_scheduler.warmup_steps"]


def test_extended_schedule_counts_as_a_recipe_field() -> None:
    extended = make_run("b", MIX_B, recipe=make_recipe(extended_at_steps=[5]))
    result = compare([make_run("a"), extended])
    assert codes(result.refusals) == [RefusalCode.RECIPE_MISMATCH]
    assert "extended_at_steps" in result.refusals[0].detail["fields"]


def test_same_recipe_other_initial_weights_refused() -> None:
    result = compare([make_run("a"), make_run("b", MIX_B, init="init-made-elsewhere")])
    assert codes(result.refusals) == [RefusalCode.INIT_MISMATCH]
    assert set(result.refusals[0].detail["fields"]["init_sha256"]) == {"a", "b"}


@pytest.mark.parametrize(
    ("status", "steps"), [("interrupted", 10), ("failed", 10), ("running", 10), ("succeeded", 6)]
)
def test_unfinished_run_refused_with_its_state_and_the_command(status: str, steps: int) -> None:
    short = make_run("b", MIX_B, status=status)
    short.digests = {s: d for s, d in short.digests.items() if s <= steps}
    result = compare([make_run("a"), make_run("a-2"), short])
    assert codes(result.refusals) == [RefusalCode.UNFINISHED]
    (refusal,) = result.refusals
    assert refusal.detail == {
        "run": "b",
        "status": status,
        "steps": steps,
        "planned_steps": 10,
        "command": "zephon resume /runs/b",
    }
    assert f"{status}, {steps} of 10 steps" in refusal.message
    assert "zephon resume /runs/b" in refusal.message


def test_run_without_recorded_recipe_has_no_data() -> None:
    old = make_run("b", MIX_B)
    old.recipe_fingerprint, old.recipe = "", {}
    result = compare([make_run("a"), old])
    assert codes(result.refusals) == [RefusalCode.NO_DATA]
    assert "no recipe" in result.refusals[0].message


def test_all_refusals_collected() -> None:
    a1 = make_run("a-1", MIX_A)
    a2 = make_run("a-2", MIX_A)
    a2.digests = {**a2.digests, 7: "bad"}
    b = make_run("b", MIX_B, contract=make_contract(global_batch_size=32))
    empty = make_run("c", MIX_B, digests={})
    no_eval = make_run("d", {"code": 1.0}, evals={})
    result = compare([a1, a2, b, empty, no_eval])
    assert not result.accepted and result.rows == []
    assert sorted(codes(result.refusals)) == [
        RefusalCode.CONTRACT_MISMATCH,
        RefusalCode.DIVERGED_DATA,
        RefusalCode.NO_COMMON_EVAL,
        RefusalCode.NO_DATA,
    ]
    by_code = {r.code: r for r in result.refusals}
    assert by_code[RefusalCode.DIVERGED_DATA].detail["step"] == 7
    assert "global_batch_size" in by_code[RefusalCode.CONTRACT_MISMATCH].detail["fields"]
    assert "c has no per-step batch digests" in by_code[RefusalCode.NO_DATA].message
    assert "d has no held-out eval scores" in by_code[RefusalCode.NO_COMMON_EVAL].message
    md = comparison_markdown(result)
    assert "4 reasons" in md and all(c in md for c in by_code)


def test_no_common_eval_step() -> None:
    runs = [
        make_run("a", MIX_A, evals=evals_for(1.0, (5, 10))),
        make_run("b", MIX_B, evals=evals_for(1.0, (6, 12))),
    ]
    result = compare(runs)
    assert codes(result.refusals) == [RefusalCode.NO_COMMON_EVAL]
    assert result.eval_step is None


def test_last_common_eval_step_is_used() -> None:
    runs = [
        make_run("a", MIX_A, evals=evals_for(1.0, (5, 10, 15))),
        make_run("b", MIX_B, evals=evals_for(1.0, (5, 10))),
    ]
    assert compare(runs).eval_step == 10


def test_different_eval_domains_refused() -> None:
    evals = evals_for(1.0)
    del evals[10]["i18n"]
    result = compare([make_run("a", MIX_A), make_run("b", MIX_B, evals=evals)])
    assert codes(result.refusals) == [RefusalCode.NO_COMMON_EVAL]
    assert "different held-out domains" in result.refusals[0].message


@pytest.mark.parametrize("runs", [[], [make_run("only")]])
def test_too_few_runs(runs: list[RunSummary]) -> None:
    result = compare(runs)
    assert not result.accepted
    assert RefusalCode.TOO_FEW_RUNS in codes(result.refusals)


def test_duplicate_names_get_distinct_labels() -> None:
    a, b = make_run("same"), make_run("same")
    b.run_id = "id-other"
    b.digests = {**b.digests, 3: "x"}
    (refusal,) = check([a, b])
    assert len(refusal.detail["digests"]) == 2


# -- property: the first divergent step is named exactly ----------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    digests=st.lists(st.binary(min_size=4, max_size=8), min_size=1, max_size=40),
    data=st.data(),
)
def test_refusal_names_exactly_the_mutated_step(digests: list[bytes], data: st.DataObject) -> None:
    steps = {i + 1: d.hex() for i, d in enumerate(digests)}
    ref = make_run("r-1", digests=steps)
    copy_ok = make_run("r-2", digests=dict(steps), base=1.01)
    assert compare([ref, copy_ok]).accepted

    k = data.draw(st.integers(1, len(steps)), label="k")
    mutated = dict(steps)
    mutated[k] = mutated[k] + "00"
    tail = data.draw(st.booleans(), label="also later steps")
    if tail:
        for s in range(k + 1, len(steps) + 1):
            mutated[s] = "ff" + mutated[s]
    bad = make_run("r-3", digests=mutated)
    refusals = check([ref, copy_ok, bad])
    assert codes(refusals) == [RefusalCode.DIVERGED_DATA]
    assert refusals[0].detail["step"] == k
    assert f"step {k} " in refusals[0].message
    assert refusals[0].runs == [ref.run_id, bad.run_id]


# -- MLflow round trip --------------------------------------------------------------------------


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
        loaded,
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
    refused_id = log_comparison(tracker, refused, [*loaded, bare_summary], workdir=tmp_path / "w2")
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


def test_comparison_json_round_trips_for_refusals() -> None:
    result = compare([make_run("a"), make_run("b", MIX_B, contract=make_contract(seed=3))])
    assert isinstance(result, Comparison)
    payload = result.to_json()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["refusals"][0]["detail"]["fields"]["seed"] == {"a": 0, "b": 3}


# -- seed replicates ----------------------------------------------------------------------------


def seeded(
    name: str, mixture: dict[str, float], seed: int, base: float, **changes: Any
) -> RunSummary:
    """A run of a seed replicate: plan, shuffle and init seeds all ``seed``."""
    return make_run(
        name,
        mixture,
        contract=make_contract(seed=seed, shuffle={"buffer_size": 64, "seed": seed}),
        recipe=make_recipe(**{"debug.seed": seed}),
        init=f"init-{seed}",
        base=base,
        **changes,
    )


def paired_runs(a: tuple[float, float], b: tuple[float, float]) -> list[RunSummary]:
    """A and B under seeds 0 and 1, with these base scores per seed."""
    return [
        seeded(f"{name}-s{seed}", mixture, seed, bases[seed])
        for name, mixture, bases in (("a", MIX_A, a), ("b", MIX_B, b))
        for seed in (0, 1)
    ]


def test_paired_seeds_are_accepted_and_decided_over_seeds() -> None:
    # B is better than A under both seeds; the seed moves both alike (a shared seed effect).
    runs = paired_runs((1.00, 1.05), (0.80, 0.86))
    result = compare(runs)
    assert result.accepted, result.refusals
    assert len(result.seeds) == 2 and "data 1, shuffle 1, init 1" in result.seeds
    best = result.rows[0]
    assert best.mixture == mixture_label(MIX_B) and best.seeds == 2
    assert best.replicates == 2 and best.runs == ["b-s0", "b-s1"]
    assert best.variant != runs[2].variant[:12]  # one id across the seeds, not seed 0's
    (pair,) = result.pairs
    assert pair["difference"] == pytest.approx(((0.8 - 1.0) + (0.86 - 1.05)) / 2)
    assert pair["seeds"] == 2 and "2 seeds" in pair["method"]
    # two seeds: t with about one degree of freedom, so a wide interval
    assert pair["interval"][1] - pair["interval"][0] > 0.1
    md = comparison_markdown(result)
    assert "2 seed blocks, each run by every variant" in md


def test_unpaired_seeds_are_refused_with_the_missing_blocks() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))[:3]
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.UNPAIRED_SEEDS
    assert refusal.detail["missing"] == {mixture_label(MIX_B): ["data 1, shuffle 1, init 1"]}
    assert "replicate_seeds" in refusal.message and refusal.runs == ["id-b-s0"]


def test_one_variant_under_two_seeds_is_not_a_pairing() -> None:
    refusals = check([seeded("a-s0", MIX_A, 0, 1.0), seeded("a-s1", MIX_A, 1, 1.0)])
    assert codes(refusals) == [RefusalCode.CONTRACT_MISMATCH, RefusalCode.RECIPE_MISMATCH]
    assert set(refusals[0].detail["fields"]) == {"seed", "shuffle.seed"}
    assert set(refusals[1].detail["fields"]) == {"debug.seed"}


def test_paired_seeds_still_check_the_initial_weights_within_a_seed() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))
    runs[3].init_sha256 = "f" * 64
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.INIT_MISMATCH and refusal.runs == ["id-a-s1", "id-b-s1"]


def test_paired_seeds_do_not_excuse_another_field() -> None:
    runs = paired_runs((1.0, 1.0), (0.9, 0.9))
    runs[3].recipe = {**runs[3].recipe, "optimizer.param_groups.0.optimizer_kwargs.lr": 1e-3}
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.RECIPE_MISMATCH
    assert list(refusal.detail["fields"]) == ["optimizer.param_groups.0.optimizer_kwargs.lr"]


def test_threshold_turns_a_small_decided_difference_into_cannot_tell() -> None:
    runs = paired_runs((1.00, 1.05), (0.80, 0.86))
    decided = compare(runs).pairs[0]
    assert decided["decision"] == "a_better"
    (pair,) = compare(runs, threshold=abs(decided["difference"]) + 0.01).pairs
    assert pair["decision"] == "cannot_tell"
    assert pair["detectable"] == pytest.approx(
        decided["detectable"] + abs(decided["difference"]) + 0.01
    )
    with pytest.raises(ValueError, match="threshold"):
        compare(runs, threshold=-1)


def test_other_held_out_text_is_refused() -> None:
    a, b = make_run("a", MIX_A), make_run("b", MIX_B)
    b.documents[10]["code"]["bytes"] = [1] * len(DOC_BYTES)
    (refusal,) = check([a, b])
    assert refusal.code == RefusalCode.NO_COMMON_EVAL and "other held-out text" in refusal.message
    assert refusal.detail == {"step": 10, "runs_with_other_documents": ["b"]}
    a.documents = {}  # recorded before per-document scores
    (refusal,) = check([a, b])
    assert refusal.detail == {"step": 10, "runs_without_documents": ["a"]}
    assert "a has no per-document held-out scores at eval step 10" in refusal.message


def test_decide_on_some_domains_ranks_and_decides_their_mean() -> None:
    # A is worse on code and docs (base 1.0 vs 0.9) but much better on i18n
    a_evals = evals_for(1.0)
    a_evals[10]["i18n"] -= 1.0
    a_evals[10]["aggregate"] = sum(a_evals[10][d] for d in DOMAINS) / 3
    runs = [
        *(seeded(f"a-s{seed}", MIX_A, seed, 1.0, evals=a_evals) for seed in (0, 1)),
        *(seeded(f"b-s{seed}", MIX_B, seed, 0.9) for seed in (0, 1)),
    ]
    assert compare(runs).rows[0].mixture == mixture_label(MIX_A)
    result = compare(runs, decide_on=["code", "docs"])
    assert result.decided_on == ["code", "docs"]
    best = result.rows[0]
    assert best.mixture == mixture_label(MIX_B)
    assert best.aggregate_bpb == pytest.approx((0.9 - 0.1 + 1.0 - 0.1) / 2)
    assert result.pairs[0]["decision"] == "a_better"
    assert "mean over code, docs only" in comparison_markdown(result)
    with pytest.raises(ValueError, match=r"cannot decide on held-out domain\(s\) \['web'\]"):
        compare(runs, decide_on=["web"])


def test_dp_range_is_within_a_seed_and_the_seeds_spread_is_apart() -> None:
    runs = paired_runs((1.0, 1.3), (0.8, 1.1))
    twins = [
        seeded(f"{r.name}-dp2", r.mixture, s % 2, b + 0.001, dp=[2])
        for r, s, b in zip(runs, range(4), (1.0, 1.3, 0.8, 1.1), strict=True)
    ]
    twins = [dataclasses.replace(t, digests=r.digests) for t, r in zip(twins, runs, strict=True)]
    result = compare([*runs, *twins])
    assert result.accepted, result.refusals
    for row in result.rows:
        assert row.replicates == 4 and row.dp_sizes == "1,2"
        assert row.dp_range == pytest.approx(0.001)  # dp 1 vs dp 2 under one seed
        assert row.aggregate_range == pytest.approx(0.301)  # the seeds apart


def test_a_shard_read_with_other_content_is_refused_naming_it() -> None:
    """Order v2 checks content as shards are read: compared runs must agree on every shard
    both of them read (the contract holds only the shards' sizes)."""
    runs = four_runs()
    shard = {"file": "part-0007.jsonl", "sha256": "a" * 64}
    for run in runs:
        run.shards_read = {"web": {"7": dict(shard)}, "code": {"0": {"file": "c", "sha256": "c"}}}
    assert check(runs) == []
    runs[3].shards_read["web"]["9"] = {"file": "part-0009.jsonl", "sha256": "d" * 64}
    assert check(runs) == []  # a shard only one run read is not a difference
    runs[2].shards_read["web"]["7"] = {**shard, "sha256": "b" * 64}
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.SHARD_CHANGED
    assert "part-0007.jsonl" in refusal.message and "'web'" in refusal.message
    assert refusal.detail["shard"] == 7 and refusal.detail["dataset"] == "web"
    assert refusal.runs == [runs[0].run_id, runs[2].run_id]


def test_a_shard_hashed_by_one_run_and_read_by_range_by_another_is_refused_saying_so() -> None:
    """A shard read by range is identified by its server's ETag, not its bytes: the guard
    cannot tell whether the two runs read the same content, and says why."""
    runs = four_runs()
    for run in runs:
        run.shards_read = {"web": {"3": {"file": "part-3.parquet", "sha256": "a" * 64}}}
    runs[1].shards_read["web"]["3"] = {
        "file": "part-3.parquet",
        "sha256": "e" * 64,
        "identity": "remote-version",
    }
    (refusal,) = check(runs)
    assert refusal.code == RefusalCode.SHARD_CHANGED
    assert "by range" in refusal.message and "io_options['remote_read']" in refusal.message
    assert "was changed between the runs" not in refusal.message


def test_the_table_shows_what_training_gained_over_the_initial_model() -> None:
    runs = four_runs()
    scored = [
        dataclasses.replace(
            r,
            evals={0: dict.fromkeys([*DOMAINS, "aggregate"], 4.0), **r.evals},
            documents={
                **documents_for(r.name, {0: dict.fromkeys(DOMAINS, 4.0)}),
                **r.documents,
            },
        )
        for r in runs
    ]
    result = compare(scored)
    assert result.accepted, result.refusals
    for row in result.rows:
        assert row.initial_bpb == dict.fromkeys(DOMAINS, 4.0)
        assert row.gain(DOMAINS[0]) == pytest.approx(1 - row.bpb[DOMAINS[0]] / 4.0)
    markdown = comparison_markdown(result)
    assert "### What training gained (step 0 -> step 10)" in markdown
    top = result.rows[0]
    assert f"4.000 -> {top.bpb[DOMAINS[0]]:.3f} (-{top.gain(DOMAINS[0]):.0%})" in markdown
    # without a step-0 score on every run, no gains are claimed
    partial = compare([scored[0], *runs[1:]])
    assert all(not row.initial_bpb for row in partial.rows)
    assert "What training gained" not in comparison_markdown(partial)
