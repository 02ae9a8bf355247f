"""The comparison guard's refusal rules: every reason not to compare a set of runs.

:func:`check` lists them (empty: the runs differ only in their data mixture);
:func:`apply_rules` also returns what scoring needs (the common eval step and its domains).
The rules and why each exists: ``docs/design/guard.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.experiment.runfolder import RunStatus
from orchestrator.guard.comparison import (
    AGGREGATE,
    SEED_FIELDS,
    SHORT,
    Refusal,
    RefusalCode,
    RunSummary,
    mixture_label,
    ordered_runs,
)
from orchestrator.tracking.names import flatten
from pipeline.dataset import ShardIdentity

ABSENT = "<absent>"
"""Value shown for a contract field one of two runs does not have."""


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


def _run_labels(runs: list[RunSummary]) -> dict[str, str]:
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


def _contract_fields(contract: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The contract's dotted fields but for the mixture and the ``ignore`` fields."""
    flat = flatten({k: v for k, v in contract.items() if k != "mixture"})
    return {
        k: v
        for k, v in flat.items()
        if k != "mixture" and not k.startswith("mixture.") and k not in ignore
    }


def arm_key(run: RunSummary) -> str:
    """What a variant is across seeds: its contract but for the seeds, and its mixture."""
    return json.dumps(
        [_contract_fields(run.contract, SEED_FIELDS), mixture_label(run.mixture)], sort_keys=True
    )


def runs_by_arm(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """:func:`arm_key` -> its runs (the variant across seeds), in :func:`ordered_runs` order."""
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(arm_key(run), []).append(run)
    return groups


def _seed_design(runs: list[RunSummary]) -> tuple[bool, Refusal | None]:
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
    missing = {
        mixture_label(arms[arm][0].mixture): sorted(set(every) - set(bs))
        for arm, bs in incomplete.items()
    }
    listed = "; ".join(f"{mix} lacks {', '.join(seeds)}" for mix, seeds in missing.items())
    return True, Refusal(
        RefusalCode.UNPAIRED_SEEDS,
        f"the runs use {len(every)} seed blocks but not every variant ran under each ({listed}): "
        "a variant's score under one seed would be compared with another's under another seed. "
        "Run the missing seeds (hydra.sweeper.replicate_seeds) or leave those runs out.",
        [r.run_id for arm in incomplete for r in arms[arm]],
        {"seeds": every, "missing": missing},
    )


def _runs_by_variant(runs: list[RunSummary]) -> dict[str, list[RunSummary]]:
    """Variant -> its runs, in :func:`ordered_runs` order."""
    groups: dict[str, list[RunSummary]] = {}
    for run in ordered_runs(runs):
        groups.setdefault(run.variant, []).append(run)
    return groups


def _split_runs_without_data(
    runs: list[RunSummary], label: dict[str, str]
) -> tuple[list[Refusal], list[RunSummary]]:
    """A ``no_data`` refusal per run without digests, contract or recipe, and the other runs."""
    refusals: list[Refusal] = []
    usable: list[RunSummary] = []
    for run in runs:
        missing = []
        if not run.digests:
            missing.append("no per-step batch digests (zephon/steps.jsonl)")
        if not run.contract or not run.variant:
            missing.append("no data contract / variant (zephon/experiment.json)")
        elif not run.recipe_fingerprint:
            missing.append("no recipe (recorded before Zephon compared recipes)")
        if missing:
            refusals.append(
                Refusal(
                    RefusalCode.NO_DATA,
                    f"{label[run.run_id]} has {' and '.join(missing)}, so its data cannot be "
                    "checked; let it finish at least one step and sync its tracking, or leave it "
                    "out of the comparison.",
                    [run.run_id],
                    {"run": label[run.run_id], "missing": missing},
                )
            )
        else:
            usable.append(run)
    return refusals, usable


def _diverged_data_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str]
) -> Refusal | None:
    """``diverged_data`` if two runs of one variant saw different data, else None."""
    a, b = label[ref.run_id], label[run.run_id]
    common = sorted(set(ref.digests) & set(run.digests))
    if not common:
        return Refusal(
            RefusalCode.DIVERGED_DATA,
            f"{a} and {b} are the same variant but have no common steps "
            f"({a}: steps {_step_span(ref.digests)}, {b}: steps {_step_span(run.digests)}), so "
            "their data cannot be cross-checked; let both run past a common step, or leave one "
            "out.",
            [ref.run_id, run.run_id],
            {"step": None, "reason": "no common steps"},
        )
    for step in common:
        if ref.digests[step] != run.digests[step]:
            da, db = ref.digests[step][:SHORT], run.digests[step][:SHORT]
            return Refusal(
                RefusalCode.DIVERGED_DATA,
                f"{a} and {b} are the same variant but their data differs from step {step} on "
                f"(global batch digest {da} vs {db}): the infrastructure changed the data, which "
                "the contract forbids — check the dataset files and the zephon version of both "
                "runs, then re-run one of them.",
                [ref.run_id, run.run_id],
                {"step": step, "digests": {a: ref.digests[step], b: run.digests[step]}},
            )
    return None


def _step_span(digests: dict[int, str]) -> str:
    """``"1-10"``: the first and last step with a digest, or ``"none"``."""
    return f"{min(digests)}-{max(digests)}" if digests else "none"


def _contract_mismatch_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str], ignore: tuple[str, ...]
) -> Refusal | None:
    """``contract_mismatch`` if two runs' contracts differ in more than the mixture (and the
    ``ignore`` fields), else None."""
    a, b = label[ref.run_id], label[run.run_id]
    fields = _differing_fields(
        _contract_fields(ref.contract, ignore), _contract_fields(run.contract, ignore), a, b
    )
    if fields:
        parts = _field_differences(fields, a, b, len(fields))
        fixes = ", ".join(f"{k}={_field_value_text(v[a])}" for k, v in list(fields.items())[:3])
        more = f" (and {len(fields) - 3} more fields)" if len(fields) > 3 else ""
        same = "variant" if ref.variant == run.variant else "comparison"
        return Refusal(
            RefusalCode.CONTRACT_MISMATCH,
            f"{a} and {b} differ in more than the mixture — {parts}.{_staged_note(fields)} "
            f"Scores of this {same} would mix up the mixture's effect with these changes; "
            "compare runs with the same contract fingerprint, or re-run "
            f"{b} with {fixes}{more}.",
            [ref.run_id, run.run_id],
            {"fields": fields},
        )
    if ref.contract_fingerprint != run.contract_fingerprint and ref.seed == run.seed:
        ca, cb = ref.contract_fingerprint[:SHORT], run.contract_fingerprint[:SHORT]
        return Refusal(
            RefusalCode.CONTRACT_MISMATCH,
            f"{a} and {b} record equal contracts but different contract_fingerprint ({ca} ({a}) vs "
            f"{cb} ({b})): the fingerprint was computed differently (another zephon version?) or a "
            "record was edited; re-run one of them with the other's zephon version.",
            [ref.run_id, run.run_id],
            {
                "fields": {
                    "contract_fingerprint": {
                        a: ref.contract_fingerprint,
                        b: run.contract_fingerprint,
                    }
                }
            },
        )
    return None


def _unfinished_refusal(run: RunSummary, label: dict[str, str]) -> Refusal | None:
    """``unfinished`` if ``run`` did not complete its schedule, else None."""
    done = max(run.digests, default=0)
    planned = run.planned_steps
    if run.status == RunStatus.SUCCEEDED and (planned is None or done >= planned):
        return None
    name = label[run.run_id]
    state = run.status or "unknown"
    finish = f"zephon resume {run.folder}" if run.folder else "zephon resume <its run folder>"
    return Refusal(
        RefusalCode.UNFINISHED,
        f"{name} did not finish its schedule ({state}, {done} of "
        f"{planned if planned is not None else '?'} steps): its scores are not those of its "
        f"recipe. Finish it ({finish}), or leave it out of the comparison.",
        [run.run_id],
        {"run": name, "status": state, "steps": done, "planned_steps": planned, "command": finish},
    )


def _recipe_mismatch_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str], ignore: tuple[str, ...]
) -> Refusal | None:
    """``recipe_mismatch`` if two runs did not train alike (but for the ``ignore`` fields)."""
    a, b = label[ref.run_id], label[run.run_id]
    fields = _differing_fields(
        {k: v for k, v in ref.recipe.items() if k not in ignore},
        {k: v for k, v in run.recipe.items() if k not in ignore},
        a,
        b,
    )
    if fields:
        parts = _field_differences(fields, a, b, 6)
        more = f" (and {len(fields) - 6} more fields)" if len(fields) > 6 else ""
        return Refusal(
            RefusalCode.RECIPE_MISMATCH,
            f"{a} and {b} were trained with different recipes — {parts}{more}. Their scores "
            "would mix the mixture's effect with these changes; compare runs of one recipe "
            "(same model, optimizer, schedule, steps, seed and versions), or re-run one of them "
            "with the other's settings.",
            [ref.run_id, run.run_id],
            {"fields": fields},
        )
    return None


def _init_mismatch_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str]
) -> Refusal | None:
    """``init_mismatch`` if two runs of one recipe (and seed) started from different weights."""
    if ref.recipe_fingerprint != run.recipe_fingerprint or ref.init_sha256 == run.init_sha256:
        return None
    a, b = label[ref.run_id], label[run.run_id]
    ia, ib = ref.init_sha256[:SHORT] or ABSENT, run.init_sha256[:SHORT] or ABSENT
    return Refusal(
        RefusalCode.INIT_MISMATCH,
        f"{a} and {b} have one recipe but started from different initial weights (initial "
        f"checkpoint {ia} ({a}) vs {ib} ({b})): made on machines with different torch "
        "builds, or one was made before Zephon shared initial checkpoints; re-run one of "
        "them where the other's initial checkpoint is.",
        [ref.run_id, run.run_id],
        {"fields": {"init_sha256": {a: ref.init_sha256, b: run.init_sha256}}},
    )


def _shard_changed_refusals(runs: list[RunSummary], label: dict[str, str]) -> list[Refusal]:
    """``shard_changed`` for each run that read a shard with other content than the first run
    (in run order) that read it: the file was edited between the runs."""
    first: dict[tuple[str, str], tuple[RunSummary, dict[str, str]]] = {}
    refusals = []
    for run in runs:
        for name, shards in sorted(run.shards_read.items()):
            for shard, entry in sorted(shards.items(), key=lambda item: int(item[0])):
                ref, seen = first.setdefault((name, shard), (run, entry))
                if seen.get("sha256") == entry.get("sha256"):
                    continue
                a, b = label[ref.run_id], label[run.run_id]
                identities = {a: _shard_identity(seen), b: _shard_identity(entry)}
                if identities[a] != identities[b]:
                    cause = (
                        f"One run hashed the file's bytes, the other read it by range and "
                        f"identified it by its server's ETag ({identities}), so their "
                        "contents cannot be compared; re-run one of them with the other's "
                        "io_options['remote_read']."
                    )
                else:
                    cause = (
                        "The file was changed between the runs; restore it and re-run the run "
                        "made on the changed file, or compare only runs made on one version of "
                        "the data."
                    )
                refusals.append(
                    Refusal(
                        RefusalCode.SHARD_CHANGED,
                        f"{a} and {b} read different content for shard {entry.get('file')} "
                        f"(#{shard}) of dataset {name!r}: sha256 "
                        f"{str(seen.get('sha256'))[:SHORT]} ({a}) vs "
                        f"{str(entry.get('sha256'))[:SHORT]} ({b}). {cause}",
                        [ref.run_id, run.run_id],
                        {
                            "dataset": name,
                            "shard": int(shard),
                            "file": entry.get("file"),
                            "sha256": {a: seen.get("sha256"), b: entry.get("sha256")},
                        },
                    )
                )
                break  # one refusal per run and dataset names the first changed shard
    return refusals


def _shard_identity(entry: dict[str, str]) -> str:
    """What a recorded shard fingerprint hashes (runs before range reads recorded content)."""
    return entry.get("identity", str(ShardIdentity.CONTENT))


def _staged_note(fields: dict[str, dict[str, Any]]) -> str:
    """For runs of staged mixtures whose other phases differ: which phases and datasets
    (``phases.<k>.mixture.<dataset>`` fields), and why they are not the compared mixture."""
    differing: dict[str, list[str]] = {}
    for key in fields:
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "phases" and parts[2] == "mixture":
            differing.setdefault(parts[1], []).append(parts[3])
    if not differing:
        return ""
    listed = "; ".join(f"phase {k}: {', '.join(names)}" for k, names in differing.items())
    return (
        f" Their staged mixtures differ outside the compared phase ({listed}): only the phase "
        "named by data.compared_phase may differ between compared runs."
    )


def _differing_fields(
    fa: dict[str, Any], fb: dict[str, Any], a: str, b: str
) -> dict[str, dict[str, Any]]:
    """Dotted field -> ``{a: value, b: value}`` for every field where two flat dicts differ."""
    return {
        key: {a: fa.get(key, ABSENT), b: fb.get(key, ABSENT)}
        for key in sorted(set(fa) | set(fb))
        if fa.get(key, ABSENT) != fb.get(key, ABSENT)
    }


def _field_differences(fields: dict[str, dict[str, Any]], a: str, b: str, limit: int) -> str:
    """``"seed: 0 (a) vs 1 (b); ..."`` for the first ``limit`` of :func:`_differing_fields`."""
    return "; ".join(
        f"{k}: {_field_value_text(v[a])} ({a}) vs {_field_value_text(v[b])} ({b})"
        for k, v in list(fields.items())[:limit]
    )


def _field_value_text(value: Any) -> str:
    """A field's value as JSON, or :data:`ABSENT` as it is."""
    return value if value == ABSENT else json.dumps(value)


def _common_eval_step(
    runs: list[RunSummary], label: dict[str, str]
) -> tuple[int | None, list[str], Refusal | None]:
    """The last eval step common to all runs, its domains, or the refusal saying why none."""
    ids = [r.run_id for r in runs]
    without = [label[r.run_id] for r in runs if not r.evals]
    if without:
        return (
            None,
            [],
            Refusal(
                RefusalCode.NO_COMMON_EVAL,
                f"no eval step is common to all runs: {', '.join(without)} "
                f"{'has' if len(without) == 1 else 'have'} no held-out eval scores "
                "(zephon/eval.jsonl); run the eval on them or leave them out.",
                ids,
                {"runs_without_eval": without},
            ),
        )
    common = set.intersection(*(set(r.evals) for r in runs))
    if not common:
        steps = {label[r.run_id]: sorted(r.evals) for r in runs}
        listed = "; ".join(f"{k}: {v}" for k, v in steps.items())
        return (
            None,
            [],
            Refusal(
                RefusalCode.NO_COMMON_EVAL,
                f"no eval step is common to all runs ({listed}); evaluate every run at the same "
                "step (same eval interval and training length), then compare again.",
                ids,
                {"eval_steps": steps},
            ),
        )
    step = max(common)
    domains = {label[r.run_id]: sorted(k for k in r.evals[step] if k != AGGREGATE) for r in runs}
    first = next(iter(domains.values()))
    missing_aggregate = [label[r.run_id] for r in runs if AGGREGATE not in r.evals[step]]
    if any(d != first for d in domains.values()) or missing_aggregate:
        return (
            step,
            [],
            Refusal(
                RefusalCode.NO_COMMON_EVAL,
                f"at eval step {step} the runs were scored on different held-out domains "
                f"({'; '.join(f'{k}: {v}' for k, v in domains.items())}"
                f"{'; no aggregate: ' + ', '.join(missing_aggregate) if missing_aggregate else ''}), "
                "so their aggregates are not comparable; evaluate all runs with the same eval spec.",
                ids,
                {"step": step, "domains": domains},
            ),
        )
    return step, first, None


def _unpaired_documents_refusal(
    runs: list[RunSummary], step: int, label: dict[str, str]
) -> Refusal | None:
    """``no_common_eval`` unless every run scored the same held-out documents at ``step``."""
    without = [label[r.run_id] for r in runs if step not in r.documents]
    ref = runs[0]
    sizes = {d: v["bytes"] for d, v in ref.documents.get(step, {}).items()}
    other = [
        label[r.run_id]
        for r in runs
        if not without and {d: v["bytes"] for d, v in r.documents[step].items()} != sizes
    ]
    if not without and not other:
        return None
    if without:
        message = (
            f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} no per-document "
            f"held-out scores at eval step {step} (recorded since Zephon decides between "
            "variants), so no difference between variants can be tested; re-run them."
        )
    else:
        message = (
            f"{', '.join(other)} scored other held-out text than {label[ref.run_id]} at eval "
            f"step {step} (document sizes differ), so their scores cannot be paired document "
            "by document; evaluate all runs with the same held-out documents."
        )
    detail = (
        {"runs_without_documents": without} if without else {"runs_with_other_documents": other}
    )
    return Refusal(
        RefusalCode.NO_COMMON_EVAL, message, [r.run_id for r in runs], {"step": step, **detail}
    )


def apply_rules(runs: list[RunSummary]) -> RulesOutcome:
    """Apply every rule to ``runs``: all refusals (not only the first), the common eval step
    and its domains, and how many steps the replicates were cross-checked on."""
    label = _run_labels(runs)
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
    no_data, usable = _split_runs_without_data(ordered_runs(runs), label)
    refusals += no_data
    refusals += [r for r in (_unfinished_refusal(run, label) for run in usable) if r]
    paired, unpaired = _seed_design(usable)
    refusals += [unpaired] if unpaired else []
    ignore = SEED_FIELDS if paired else ()
    groups = _runs_by_variant(usable)
    common_steps: list[int] = []
    for group in groups.values():
        for run in group[1:]:
            refusal = _diverged_data_refusal(group[0], run, label)
            if refusal:
                refusals.append(refusal)
            else:
                common_steps.append(len(set(group[0].digests) & set(run.digests)))
    heads = [group[0] for group in groups.values()]
    pairs = [(heads[0], head) for head in heads[1:]] if heads else []
    pairs += [(group[0], run) for group in groups.values() for run in group[1:]]
    refusals += [
        r for r in (_contract_mismatch_refusal(ref, run, label, ignore) for ref, run in pairs) if r
    ]
    refusals += [
        r
        for r in (_recipe_mismatch_refusal(usable[0], run, label, ignore) for run in usable[1:])
        if r
    ]
    refusals += _shard_changed_refusals(usable, label)
    by_seed: dict[str, list[RunSummary]] = {}
    for run in usable:
        by_seed.setdefault(run.seed, []).append(run)
    for block in by_seed.values():
        refusals += [
            r for r in (_init_mismatch_refusal(block[0], run, label) for run in block[1:]) if r
        ]
    scored = usable or ordered_runs(runs)  # runs refused for no_data need no second reason
    step, domains, refusal = _common_eval_step(scored, label) if scored else (None, [], None)
    if refusal is None and step is not None:
        refusal = _unpaired_documents_refusal(scored, step, label)
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
