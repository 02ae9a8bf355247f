"""Rules on each run alone: it recorded what the guard checks (``no_data``) and it finished
its schedule (``unfinished``)."""

from __future__ import annotations

from orchestrator.experiment.run_record import RunStatus
from orchestrator.guard.comparison import Refusal, RefusalCode, RunSummary


def split_runs_without_data(
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


def unfinished_refusal(run: RunSummary, label: dict[str, str]) -> Refusal | None:
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
