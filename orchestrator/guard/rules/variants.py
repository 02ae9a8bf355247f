"""How the compared runs group: readable labels, variants across seeds, and the seed design
(the ``unpaired_seeds`` rule)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.experiment.variant_axis import varied_identity
from orchestrator.guard.comparison import (
    SEED_FIELDS,
    Refusal,
    RefusalCode,
    RunSummary,
    mixture_label,
    ordered_runs,
)
from orchestrator.tracking.mlflow_names import flatten


def run_labels(runs: list[RunSummary]) -> dict[str, str]:
    """Run id -> a readable, unique label: the name, with a short id where names repeat."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.name] = counts.get(run.name, 0) + 1
    return {
        r.run_id: r.name
        if counts[r.name] == 1 and r.name
        else f"{r.name or 'run'} ({r.run_id[:8]})"
        for r in runs
    }


def contract_fields(contract: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The contract's dotted fields but for the mixture and the ``ignore`` fields."""
    flat = flatten({k: v for k, v in contract.items() if k != "mixture"})
    return {
        k: v
        for k, v in flat.items()
        if k != "mixture" and not k.startswith("mixture.") and k not in ignore
    }


def arm_key(run: RunSummary) -> str:
    """What a variant is across seeds: its contract but for the seeds, its mixture and what
    else it varies (``data.compared``)."""
    return json.dumps(
        [
            contract_fields(run.contract, SEED_FIELDS),
            mixture_label(run.mixture),
            varied_identity(run.varied),
        ],
        sort_keys=True,
    )


def runs_by_arm(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """:func:`arm_key` -> its runs (the variant across seeds), in :func:`ordered_runs` order."""
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(arm_key(run), []).append(run)
    return groups


def runs_by_variant(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """Variant -> its runs, in :func:`ordered_runs` order."""
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(run.variant, []).append(run)
    return groups


def seed_design(runs: list[RunSummary]) -> tuple[bool, Refusal | None]:
    """Whether the runs form a paired seed design (seeds may then differ), or why not.

    Paired: two or more variants, one of them run under two or more seed blocks, and
    every variant under every block, so each variant has a partner of the same seed.
    Blocks that are not complete are ``unpaired_seeds``. Without a variant replicated
    over seeds, or with a single variant, the seed fields are compared like any other.
    """
    arms = runs_by_arm(runs)
    blocks = {arm: sorted({r.seed for r in group}) for arm, group in arms.items()}
    every = sorted({b for bs in blocks.values() for b in bs})
    if len(arms) < 2 or max((len(bs) for bs in blocks.values()), default=0) < 2:
        return False, None  # no variant replicated over seeds: seeds are ordinary fields
    incomplete = {arm: bs for arm, bs in blocks.items() if bs != every}
    if not incomplete:
        return True, None
    missing = {arms[arm][0].label: sorted(set(every) - set(bs)) for arm, bs in incomplete.items()}
    listed = "; ".join(f"{mix} lacks {', '.join(seeds)}" for mix, seeds in missing.items())
    return True, Refusal(
        RefusalCode.UNPAIRED_SEEDS,
        f"the runs use {len(every)} seed blocks but not every variant ran under each ({listed}): "
        "a variant's score under one seed would be compared with another's under another seed. "
        "Run the missing seeds (hydra.sweeper.replicate_seeds) or leave those runs out.",
        [r.run_id for arm in incomplete for r in arms[arm]],
        {"seeds": every, "missing": missing},
    )
