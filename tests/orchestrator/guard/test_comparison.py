"""The guard's data model (orchestrator.guard.comparison) as plain JSON."""

from __future__ import annotations

import json

from orchestrator.guard import Comparison, RefusalCode, compare
from tests.support.guard_runs import MIX_B, four_runs, make_contract, make_run

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
        "trained_on_scored",
    ]


def test_comparison_json_round_trips_for_refusals() -> None:
    result = compare([make_run("a"), make_run("b", MIX_B, contract=make_contract(seed=3))])
    assert isinstance(result, Comparison)
    payload = result.to_json()
    assert json.loads(json.dumps(payload)) == payload
    assert payload["refusals"][0]["detail"]["fields"]["seed"] == {"a": 0, "b": 3}
