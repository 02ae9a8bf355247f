"""Every rule applied to a set of runs (:func:`apply_rules`): all the refusals, and where the
runs can be scored."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.guard.comparison import (
    SEED_FIELDS,
    Refusal,
    RefusalCode,
    RunSummary,
    ordered_runs,
)
from orchestrator.guard.rules.common_eval import common_eval_step, unpaired_documents_refusal
from orchestrator.guard.rules.configuration import (
    contract_mismatch_refusal,
    init_mismatch_refusal,
    recipe_mismatch_refusal,
)
from orchestrator.guard.rules.data_read import diverged_data_refusal, shard_changed_refusals
from orchestrator.guard.rules.run_records import split_runs_without_data, unfinished_refusal
from orchestrator.guard.rules.scored_documents import trained_on_scored_refusals
from orchestrator.guard.rules.variants import run_labels, runs_by_variant, seed_design


@dataclass
class RulesOutcome:
    """What the rules found: the refusals, and where the runs can be scored."""

    refusals: list[Refusal]
    """Every reason to refuse (empty: the comparison is sound)."""
    eval_step: int | None
    """The last held-out eval step every run evaluated (None: there is none)."""
    domains: list[str]
    """The held-out domains every run was scored on at ``eval_step``, sorted."""
    common_steps: int
    """Fewest digest steps any two compared replicates shared (0 if no variant had two)."""


def apply_rules(runs: list[RunSummary]) -> RulesOutcome:
    """Apply every rule to ``runs``: all refusals (not only the first), the common eval step
    and its domains, and how many steps the replicates were cross-checked on."""
    label = run_labels(runs)
    refusals: list[Refusal] = []
    if len(runs) < 2:
        refusals.append(
            Refusal(
                RefusalCode.TOO_FEW_RUNS,
                f"a comparison needs at least two runs, got {len(runs)}"
                f"{' (' + ', '.join(label.values()) + ')' if runs else ''}; add runs of other "
                "mixtures (or replicates) to compare against.",
                [r.run_id for r in runs],
                {"count": len(runs)},
            )
        )
    no_data, usable = split_runs_without_data(ordered_runs(runs), label)
    refusals += no_data
    refusals += [r for r in (unfinished_refusal(run, label) for run in usable) if r]
    paired, unpaired = seed_design(usable)
    refusals += [unpaired] if unpaired else []
    ignore = SEED_FIELDS if paired else ()
    groups = runs_by_variant(usable)
    common_steps: list[int] = []
    for group in groups.values():
        for run in group[1:]:
            refusal = diverged_data_refusal(group[0], run, label)
            if refusal:
                refusals.append(refusal)
            else:
                common_steps.append(len(set(group[0].digests) & set(run.digests)))
    heads = [group[0] for group in groups.values()]
    pairs = [(heads[0], head) for head in heads[1:]] if heads else []
    pairs += [(group[0], run) for group in groups.values() for run in group[1:]]
    refusals += [
        r for r in (contract_mismatch_refusal(ref, run, label, ignore) for ref, run in pairs) if r
    ]
    refusals += [
        r
        for r in (recipe_mismatch_refusal(usable[0], run, label, ignore) for run in usable[1:])
        if r
    ]
    refusals += shard_changed_refusals(usable, label)
    refusals += trained_on_scored_refusals(usable, label)
    by_seed: dict[str, list[RunSummary]] = {}
    for run in usable:
        by_seed.setdefault(run.seed, []).append(run)
    for block in by_seed.values():
        refusals += [
            r for r in (init_mismatch_refusal(block[0], run, label) for run in block[1:]) if r
        ]
    scored = usable or ordered_runs(runs)  # runs refused for no_data need no second reason
    step, domains, refusal = common_eval_step(scored, label) if scored else (None, [], None)
    if refusal is None and step is not None:
        refusal = unpaired_documents_refusal(scored, step, label)
    if refusal:
        refusals.append(refusal)
    return RulesOutcome(
        refusals=refusals,
        eval_step=step,
        domains=domains,
        common_steps=min(common_steps, default=0),
    )


def check(runs: list[RunSummary]) -> list[Refusal]:
    """Every reason to refuse comparing ``runs`` (empty: the comparison is sound)."""
    return apply_rules(runs).refusals
