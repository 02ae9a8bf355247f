"""RunSummary objects as the guard reads them, built in memory for its tests: contracts,
recipes, digests and held-out scores of variants and their replicates."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from orchestrator.guard import Refusal, RefusalCode, RunSummary
from orchestrator.tracking.mlflow_names import flatten

DOMAINS = ("code", "docs", "i18n")
MIX_A = {"code": 0.5, "docs": 0.3, "i18n": 0.2}
MIX_B = {"code": 0.2, "docs": 0.3, "i18n": 0.5}


def sha(*parts: object) -> str:
    """A sha256 hex digest of ``parts`` as JSON: a stand-in fingerprint or digest."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def make_contract(**changes: object) -> dict:
    """A data contract over :data:`DOMAINS`, with top-level ``changes``."""
    contract = {
        "datasets": [
            {
                "name": d,
                "fingerprint": sha("dataset", d),
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
    """Step -> global batch digest of ``variant``'s data (the same for its replicates)."""
    return {s: sha("batch", variant, s) for s in range(1, steps + 1)}


def evals_for(base: float, steps: tuple[int, ...] = (5, 10)) -> dict[int, dict[str, float]]:
    """Step -> held-out bits per byte: ``base + 0.1 i - 0.01 step`` for the i-th domain."""
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
    k = int(sha("noise", name)[:4], 16) / 65536 * 4.0
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
    """A finished run of ``mixture`` as the guard reads one, consistent unless changed."""
    contract = make_contract() if contract is None else contract
    recipe = make_recipe() if recipe is None else recipe
    evals = evals_for(base) if evals is None else evals
    fingerprint = sha("contract", contract)
    variant = sha("variant", fingerprint, sorted(mixture.items()))
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
        recipe_fingerprint=sha("recipe", recipe),
        recipe=recipe,
        init_sha256=sha("init", init),
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
    """The refusals' codes, in order."""
    return [r.code for r in refusals]


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
