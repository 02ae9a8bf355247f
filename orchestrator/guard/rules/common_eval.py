"""The rule that the runs were scored alike (``no_common_eval``): one common eval step, the
same held-out domains and the same held-out documents."""

from __future__ import annotations

from orchestrator.experiment.variant_axis import AXIS_FIELD, parse_axis
from orchestrator.guard.comparison import AGGREGATE, Refusal, RefusalCode, RunSummary


def moving_domains(runs: list[RunSummary]) -> set[str]:
    """Held-out domains that move with the variants: with ``data.compared=dataset:NAME``,
    NAME's held-out documents are each version's own, so they are not compared."""
    axes = {str(r.contract.get(AXIS_FIELD)) for r in runs if r.contract.get(AXIS_FIELD)}
    return {a.dataset for a in map(parse_axis, axes) if a.dataset is not None}


def common_eval_step(
    runs: list[RunSummary], label: dict[str, str]
) -> tuple[int | None, list[str], Refusal | None]:
    """The last eval step common to all runs, its domains (but those that move with the
    variants, :func:`moving_domains`), or the refusal saying why none."""
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
    moving = moving_domains(runs)
    return step, [d for d in first if d not in moving], None


def unpaired_documents_refusal(
    runs: list[RunSummary], step: int, label: dict[str, str]
) -> Refusal | None:
    """``no_common_eval`` unless every run scored the same held-out documents at ``step``."""
    without = [label[r.run_id] for r in runs if step not in r.documents]
    ref, moving = runs[0], moving_domains(runs)

    def sizes(run: RunSummary) -> dict[str, list[float]]:
        return {d: v["bytes"] for d, v in run.documents.get(step, {}).items() if d not in moving}

    other = [label[r.run_id] for r in runs if not without and sizes(r) != sizes(ref)]
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
