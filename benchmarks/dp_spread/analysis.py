"""What the runs show: :func:`collect` reads one finished run, :func:`analyse` compares them.

Global batches. Zephon: ``titan/zephon/steps.jsonl`` global digests, per step. Both
loaders: each rank records the sha256 of every sequence it hands to the trainer
(``rows.dp<rank>.jsonl``); a step's global batch is the multiset of its ranks'
sequences, compared across dp sizes.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.dp_spread.design import GLOBAL_BATCH, ROWS_FILE
from orchestrator.experiment.runfolder import EVAL_FILE, RUN_SUBDIR, RunFolder, read_jsonl

LOSS = "loss_metrics/global_avg_loss"
RELOOPED = "is being re-looped"
"""What the stock loader logs when a rank's share of the dataset runs out and restarts."""


def _step_batches(folder: Path, dp: int, steps: int) -> list[list[str]]:
    """Per step, the sorted sequence hashes of the global batch (all ranks' pulls)."""
    per_rank = [read_jsonl(folder / ROWS_FILE.format(rank=rank)) for rank in range(dp)]
    pulls = {len(p) for p in per_rank}
    assert len(pulls) == 1, f"{folder}: ranks made different numbers of pulls: {pulls}"
    per_step = pulls.pop() // steps
    assert per_step * steps == len(per_rank[0]), f"{folder}: pulls do not divide into steps"
    batches = []
    for step in range(steps):
        rows = [
            row
            for records in per_rank
            for record in records[step * per_step : (step + 1) * per_step]
            for row in record["rows"]
        ]
        assert len(rows) == GLOBAL_BATCH, f"{folder}: step {step + 1} has {len(rows)} sequences"
        batches.append(sorted(rows))
    return batches


def collect(run: dict[str, Any], loader: str, dp: int, steps: int) -> dict[str, Any]:
    """Scores, eval repeats, per-step global batches and final loss of one finished run
    (``run`` as :func:`benchmarks.dp_spread.launch.train` returns it).

    Keys starting with ``_`` are for :func:`analyse` only, not for the report.
    """
    folder = RunFolder(run["folder"])
    # Both evaluations of the last step: RunFolder.evals() keeps one per step.
    evals = [r for r in read_jsonl(folder.titan_dir / RUN_SUBDIR / EVAL_FILE) if r["step"] == steps]
    assert len(evals) >= 2, f"{folder}: expected 2 evaluations at step {steps}, got {len(evals)}"
    first, second = evals[0], evals[1]
    noise = {d: abs(second["bpb"][d] - first["bpb"][d]) for d in first["bpb"]}
    noise["aggregate"] = abs(second["aggregate_bpb"] - first["aggregate_bpb"])
    batches = _step_batches(folder.path, dp, steps)
    losses = {step: m[LOSS] for step, m in folder.metrics().items() if LOSS in m}
    result = {
        **run,
        "loader": loader,
        "dp": dp,
        "bpb": first["bpb"],
        "aggregate_bpb": first["aggregate_bpb"],
        "eval_repeat": {"bpb": second["bpb"], "aggregate_bpb": second["aggregate_bpb"]},
        "eval_noise": noise,
        "eval_tokens": first["tokens"],
        "eval_bytes": first["bytes"],
        "final_loss": losses.get(steps),
        "stock_data_relooped": RELOOPED in folder.log_path.read_text(),
        "losses": [losses.get(s) for s in range(1, steps + 1)],
        "batch_digests": [hashlib.sha256("".join(rows).encode()).hexdigest() for rows in batches],
        "_batches": batches,
    }
    if loader == "zephon":
        digests = folder.digests()
        result["zephon_digests"] = [digests.get(s) for s in range(1, steps + 1)]
    return result


def spread(values: list[float]) -> float:
    """Max - min of ``values``: how far a score moves across dp sizes."""
    return max(values) - min(values)


def _compare_global_batches(
    reference: dict[str, Any], other: dict[str, Any], loader: str
) -> dict[str, Any]:
    """How far two runs of one loader trained on the same global batches."""
    same_step = sum(a == b for a, b in zip(reference["_batches"], other["_batches"], strict=True))
    ref_rows = Counter(r for rows in reference["_batches"] for r in rows)
    other_rows = Counter(r for rows in other["_batches"] for r in rows)
    shared = sum((ref_rows & other_rows).values())
    entry = {
        "steps_with_same_global_batch": same_step,
        "sequences_shared_at_any_step": shared / sum(ref_rows.values()),
    }
    if loader == "zephon":
        entry["steps_with_same_zephon_digest"] = sum(
            a is not None and a == b
            for a, b in zip(reference["zephon_digests"], other["zephon_digests"], strict=True)
        )
    return entry


def analyse(runs: dict[str, list[dict[str, Any]]], steps: int) -> dict[str, Any]:
    """Per loader (``runs``: its :func:`collect` results, smallest dp first): scores, spreads
    across dp, eval noise, global batch agreement with the smallest dp; and the ratio of
    the stock loader's aggregate spread to Zephon's (None when Zephon's is 0)."""
    summary: dict[str, Any] = {}
    for loader, results in runs.items():
        domains = sorted(results[0]["bpb"])
        reference = results[0]
        agreement = {
            f"dp{reference['dp']}_vs_dp{other['dp']}": _compare_global_batches(
                reference, other, loader
            )
            for other in results[1:]
        }
        all_agree = all(e["steps_with_same_global_batch"] == steps for e in agreement.values())
        if loader == "zephon":
            all_agree = all_agree and all(
                e["steps_with_same_zephon_digest"] == steps for e in agreement.values()
            )
        aggregates = [r["aggregate_bpb"] for r in results]
        summary[loader] = {
            "dps": [r["dp"] for r in results],
            "aggregate_bpb": aggregates,
            "bpb": {d: [r["bpb"][d] for r in results] for d in domains},
            "first_loss": [r["losses"][0] for r in results],
            "final_loss": [r["final_loss"] for r in results],
            "spread": {
                "aggregate": spread(aggregates),
                **{d: spread([r["bpb"][d] for r in results]) for d in domains},
            },
            "eval_noise": {
                key: max(r["eval_noise"][key] for r in results) for key in ["aggregate", *domains]
            },
            "global_batches_agree": all_agree,
            "agreement": agreement,
        }
    stock, zephon = summary.get("stock"), summary.get("zephon")
    if stock and zephon:
        z = zephon["spread"]["aggregate"]
        summary["spread_ratio"] = stock["spread"]["aggregate"] / z if z > 0 else None
    return summary
