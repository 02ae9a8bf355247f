"""Rules on how the runs were set up: one data contract but for the mixture
(``contract_mismatch``), one recipe (``recipe_mismatch``) and, within a seed, one initial
checkpoint (``init_mismatch``)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.experiment.variant_axis import AXIS_FIELD, parse_axis
from orchestrator.guard.comparison import SHORT, Refusal, RefusalCode, RunSummary
from orchestrator.guard.rules.variants import contract_fields

ABSENT = "<absent>"
"""Value shown for a contract field one of two runs does not have."""


def contract_mismatch_refusal(
    ref: RunSummary, run: RunSummary, label: dict[str, str], ignore: tuple[str, ...]
) -> Refusal | None:
    """``contract_mismatch`` if two runs' contracts differ in more than the mixture (and the
    ``ignore`` fields), else None."""
    a, b = label[ref.run_id], label[run.run_id]
    fields = _differing_fields(
        contract_fields(ref.contract, ignore), contract_fields(run.contract, ignore), a, b
    )
    if fields:
        parts = _field_differences(fields, a, b, len(fields))
        fixes = ", ".join(f"{k}={_field_value_text(v[a])}" for k, v in list(fields.items())[:3])
        more = f" (and {len(fields) - 3} more fields)" if len(fields) > 3 else ""
        same = "variant" if ref.variant == run.variant else "comparison"
        settings = sorted({experiment_setting(key) for key in fields})
        return Refusal(
            RefusalCode.CONTRACT_MISMATCH,
            f"{a} and {b} differ in more than {_compared_text(ref)} — in "
            f"{', '.join(settings)}: {parts}.{_staged_note(fields)}{_axis_hint(settings)} "
            f"Scores of this {same} would mix up the variants' effect with these changes; "
            "compare runs with the same contract fingerprint, or re-run "
            f"{b} with {fixes}{more}.",
            [ref.run_id, run.run_id],
            {"fields": fields, "settings": settings},
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


def recipe_mismatch_refusal(
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


def init_mismatch_refusal(
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


_SETTINGS = {
    "eval_sets": "data.eval_sets",
    "process": "data.process",
    AXIS_FIELD: "data.compared",
    "max_length": "data.seq_len",
    "shuffle.seed": "data.shuffle_seed",
    "shuffle.buffer_size": "data.shuffle_buffer",
    "order.version": "data.order",
}
"""Contract fields whose experiment setting has another name."""


def experiment_setting(field: str) -> str:
    """The experiment setting a dotted contract field comes from: ``datasets.web.fingerprint``
    and ``tokens_per_byte.web`` -> ``data.datasets.web``, ``process.steps.0.step`` ->
    ``data.process``; other fields as ``data.<field>``."""
    parts = field.split(".")
    if parts[0] in ("datasets", "tokens_per_byte") and len(parts) > 1:
        return f"data.datasets.{parts[1]}"
    return _SETTINGS.get(field) or _SETTINGS.get(parts[0]) or f"data.{parts[0]}"


def _compared_text(run: RunSummary) -> str:
    """What the runs may differ in: the mixture, and the declared axis's setting."""
    axis = run.contract.get(AXIS_FIELD)
    setting = None if axis is None else parse_axis(str(axis)).setting
    return "the mixture" if setting is None else f"the mixture and {setting}"


def _axis_hint(settings: list[str]) -> str:
    """How to declare that variants differ in a dataset's version or in the processing."""
    for setting in settings:
        if setting.startswith("data.datasets."):
            name = setting.removeprefix("data.datasets.")
            return (
                f" If the variants are versions of dataset {name!r} (raw and filtered), declare "
                f"data.compared=dataset:{name} and give a fixed yardstick (data.eval_sets)."
            )
        if setting == "data.process":
            return " If the variants are processing chains, declare data.compared=processing."
    return ""


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
