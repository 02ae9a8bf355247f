"""Reading runs for the guard (through the tracker) and logging its verdict as a run."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.evaluation import DEFAULT_METRIC, EvalRecord, MetricScores
from orchestrator.experiment.run_record import ExperimentRecord
from orchestrator.experiment.runfolder import read_jsonl
from orchestrator.tracking.mlflow_names import (
    ARTIFACT_DIR,
    ARTIFACT_EVAL,
    ARTIFACT_EXPERIMENT,
    ARTIFACT_STEPS,
    ARTIFACT_TASKS,
    TAG_BEST,
    TAG_COMPARED,
    TAG_CONTRACT,
    TAG_DECISIONS,
    TAG_DP_HISTORY,
    TAG_DP_SIZE,
    TAG_INIT,
    TAG_LOOK,
    TAG_LOOK_SEEDS,
    TAG_NOTE,
    TAG_RECIPE,
    TAG_RUN_FOLDER,
    TAG_SEQUENCE,
    TAG_STATUS,
    TAG_VARIANT,
    TAG_VERDICT,
    flatten,
)
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.store_reader import runs_everywhere

if TYPE_CHECKING:
    from orchestrator.tracking.tracker import Tracker

from orchestrator.guard.comparison import AGGREGATE, Comparison, RunSummary, ordered_runs
from orchestrator.guard.plot import plot
from orchestrator.guard.report import comparison_markdown


def _dp_sizes(tags: dict[str, str], steps: list[dict[str, Any]]) -> list[int]:
    for key in (TAG_DP_HISTORY, TAG_DP_SIZE):
        text = tags.get(key, "")
        sizes = [int(p) for p in text.split(",") if p.strip().isdigit()]
        if sizes:
            return sizes
    sizes = []
    for record in steps:
        size = record.get("dp_size")
        if isinstance(size, int) and (not sizes or sizes[-1] != size):
            sizes.append(size)
    return sizes


def _recipe_fields(experiment: ExperimentRecord) -> dict[str, Any]:
    """The recorded recipe, flattened, with the steps a resume extended it at."""
    if not experiment.recipe:
        return {}
    fields = flatten(dict(experiment.recipe))
    fields["extended_at_steps"] = [e.at_step for e in experiment.extended]
    return fields


def load_runs(tracker: Tracker, run_ids: list[str]) -> list[RunSummary]:
    """Read ``run_ids`` from ``tracker``'s store into :class:`RunSummary` objects, in order.

    Tags give the variant, contract and recipe fingerprints, initial checkpoint, status
    and dp sizes; ``zephon/experiment.json`` the contract, mixture, recipe and planned
    steps (and the fingerprints, if the tags are missing);
    ``zephon/steps.jsonl`` the digests, ``zephon/eval.jsonl`` the scores (per dataset and
    per held-out document) and ``zephon/tasks.jsonl`` the task scores per item. Missing
    artifacts leave the fields empty, so :func:`check` refuses the run with a reason
    instead of this function failing. An unknown run id raises ``ValueError``.
    """
    summaries = []
    for run_id in run_ids:
        with tempfile.TemporaryDirectory(prefix="zephon-compare-") as tmp:
            stored = tracker.download_run(run_id, ARTIFACT_DIR, Path(tmp))
            try:
                text = (Path(tmp) / ARTIFACT_EXPERIMENT).read_text()
                experiment = ExperimentRecord.from_dict(json.loads(text))
            except (OSError, ValueError):  # missing or damaged: check() refuses the run
                experiment = ExperimentRecord()
            steps = read_jsonl(Path(tmp) / ARTIFACT_STEPS)
            evals_raw = read_jsonl(Path(tmp) / ARTIFACT_EVAL)
            tasks_raw = read_jsonl(Path(tmp) / ARTIFACT_TASKS)
        tags = stored.tags
        digests = {
            int(r["step"]): str(r["global_digest"])
            for r in steps
            if "step" in r and r.get("global_digest")
        }
        shards_read: dict[str, dict[str, dict[str, str]]] = {}
        records_read: dict[str, int] = {}
        overlapping: dict[str, int] = {}
        repeated: dict[str, int] = {}
        ran_out: dict[str, int] = {}
        removed: dict[str, dict[str, int]] = {}
        for record in steps:
            for name, shards in (record.get("shards_read") or {}).items():
                shards_read.setdefault(str(name), {}).update(shards)
            for kind, totals in (
                ("records_read", records_read),
                ("overlapping", overlapping),
                ("repeated", repeated),
                ("ran_out", ran_out),
            ):
                for name, count in (record.get(kind) or {}).items():
                    totals[name] = totals.get(name, 0) + int(count)
            for name, by_step in (record.get("removed") or {}).items():
                totals = removed.setdefault(name, {})
                for step_name, count in by_step.items():
                    totals[step_name] = totals.get(step_name, 0) + int(count)
        evals: dict[int, dict[str, float]] = {}
        documents: dict[int, dict[str, dict[str, list[float]]]] = {}
        held_out: dict[int, dict[str, MetricScores]] = {}
        higher_is_better: dict[str, dict[str, bool]] = {}
        for line in evals_raw:
            if "step" not in line:
                continue
            record = EvalRecord.from_json(line)
            bpb = record.metrics[DEFAULT_METRIC]
            evals[record.step] = dict(bpb.scores)
            if bpb.aggregate is not None:  # else refused: the record is damaged
                evals[record.step][AGGREGATE] = bpb.aggregate
            if bpb.documents:
                documents[record.step] = {
                    domain: {"bits": docs.values, "bytes": docs.weights}
                    for domain, docs in bpb.documents.items()
                }
            held_out[record.step] = {
                name: scores for name, scores in record.metrics.items() if name != DEFAULT_METRIC
            }
            for task, flags in record.higher_is_better.items():
                higher_is_better.setdefault(task, {}).update(flags)
        task_items: dict[int, dict[str, dict[int, dict[str, float]]]] = {}
        for line in tasks_raw:
            by_task = task_items.setdefault(int(line["step"]), {})
            by_task.setdefault(str(line["task"]), {})[int(line["item"])] = line["metrics"]
        summaries.append(
            RunSummary(
                run_id=run_id,
                # the run folder's name: unique, and what resume and the reports name
                name=Path(tags[TAG_RUN_FOLDER]).name if tags.get(TAG_RUN_FOLDER) else stored.name,
                variant=tags.get(TAG_VARIANT) or experiment.variant,
                contract_fingerprint=tags.get(TAG_CONTRACT) or experiment.contract_fingerprint,
                contract=dict(experiment.contract),
                mixture={str(k): float(v) for k, v in experiment.mixture.items()},
                digests=digests,
                evals=evals,
                documents=documents,
                held_out=held_out,
                task_items=task_items,
                task_higher_is_better=higher_is_better,
                dp_sizes=_dp_sizes(tags, steps),
                recipe_fingerprint=tags.get(TAG_RECIPE) or experiment.recipe_fingerprint or "",
                recipe=_recipe_fields(experiment),
                init_sha256=tags.get(TAG_INIT) or experiment.init_sha256 or "",
                status=tags.get(TAG_STATUS, ""),
                planned_steps=experiment.planned_steps,
                parameters=experiment.parameters,
                folder=tags.get(TAG_RUN_FOLDER, ""),
                shards_read=shards_read,
                varied=dict(experiment.varied),
                records_read=records_read,
                overlapping=overlapping,
                repeated=repeated,
                ran_out=ran_out,
                data_config=dict(experiment.data_settings),
                device_seconds=None
                if stored.seconds is None
                else stored.seconds * max(_dp_sizes(tags, steps) or [1]),
                removed=removed,
            )
        )
    return summaries


def _decision_lines(comparison: Comparison, limit: int = 4000) -> str:
    """:data:`TAG_DECISIONS`: one line per pair, cut at ``limit`` characters (MLflow's tags are
    short; ``comparison.json`` has every pair)."""
    lines = [
        f"{p['a_mixture']} vs {p['b_mixture']}: {p['decision']} {p['difference']:+.4f} "
        f"[{p['interval'][0]:+.4f}, {p['interval'][1]:+.4f}]"
        for p in comparison.pairs
    ]
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 40] + "\n... (all pairs: comparison.json)"


def comparison_name(run_ids: Iterable[str]) -> str:
    """``compare-<8 hex>``: a short hash of the sorted run ids (same runs, same name)."""
    digest = hashlib.sha256(",".join(sorted(run_ids)).encode()).hexdigest()
    return f"compare-{digest[:8]}"


def count_looks(tracker: Tracker, comparison: Comparison) -> None:
    """Number ``comparison`` in its sequence: its earlier looks are the tracked comparisons
    (in any experiment) with its sequence and fewer seeds; one per seed count is counted."""
    seeds = len(comparison.seeds)
    earlier: dict[int, str] = {}
    for run in runs_everywhere(tracker.uri, f"tags.`{TAG_SEQUENCE}` = '{comparison.sequence}'"):
        looked = int(run.data.tags.get(TAG_LOOK_SEEDS, "0"))
        if looked < seeds:
            earlier.setdefault(looked, run.info.run_id)
    comparison.earlier_looks = [
        {"comparison_run_id": run_id, "seeds": n} for n, run_id in sorted(earlier.items())
    ]
    comparison.look = 1 + len(earlier)


def log_comparison(
    tracker: Tracker,
    comparison: Comparison,
    *,
    runs: list[RunSummary],
    parent_run_id: str | None = None,
    workdir: Path,
    into_run_id: str | None = None,
) -> str:
    """Log ``comparison`` as a run of ``tracker``'s experiment; return its id.

    The run is named :func:`comparison_name`, tagged ``TAG_KIND=comparison``,
    ``TAG_VERDICT`` (accepted/refused), ``TAG_COMPARED`` (run ids, comma-separated), when
    accepted ``TAG_BEST`` and ``TAG_DECISIONS`` (the pairs' decisions), and
    ``mlflow.parentRunId`` if ``parent_run_id`` is given; its description is the markdown
    report. Artifacts: ``comparison.json``, ``comparison.md`` and, if accepted,
    ``comparison.png``, written first under ``workdir/<run name>/``. The run ends FINISHED
    whatever the verdict (FAILED only if logging itself fails). With ``into_run_id`` the
    verdict tags, description and artifacts go to that existing run instead (a sweep's
    parent), which is left as it is.
    """
    ids = [r.run_id for r in ordered_runs(runs)]
    name = comparison_name(ids)
    markdown = comparison_markdown(comparison)
    tags = {
        TAG_VERDICT: "accepted" if comparison.accepted else "refused",
        TAG_COMPARED: ",".join(ids),
        TAG_NOTE: markdown,
    }
    if comparison.accepted:
        tags[TAG_BEST] = comparison.best_row.mixture if comparison.best_row else "none"
        tags[TAG_DECISIONS] = _decision_lines(comparison)
        tags[TAG_SEQUENCE] = comparison.sequence
        tags[TAG_LOOK] = str(comparison.look)
        tags[TAG_LOOK_SEEDS] = str(len(comparison.seeds))
    if into_run_id:
        run_id = into_run_id
        tracker.tag_run(run_id, tags)
    else:
        run_id = tracker.new_run(
            name, kind=RunKind.COMPARISON, tags=tags, parent_run_id=parent_run_id
        )
    try:
        folder = Path(workdir) / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "comparison.json").write_text(
            json.dumps(comparison.to_json(), indent=2, sort_keys=True) + "\n"
        )
        (folder / "comparison.md").write_text(markdown)
        files = [folder / "comparison.json", folder / "comparison.md"]
        if comparison.accepted:
            files.append(plot(comparison, runs, folder / "comparison.png"))
        tracker.attach_files(run_id, files)
    except BaseException:
        if not into_run_id:
            tracker.end_run(run_id, MlflowStatus.FAILED)
        raise
    if not into_run_id:
        tracker.end_run(run_id, MlflowStatus.FINISHED)
    return run_id
