"""A sweep's parent MLflow run: started (or reopened to continue the sweep), the guard's
verdict over the sweep's runs logged into it, ended with the sweep.

Design: docs/design/sweeps_sweeper.md
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import ExperimentError
from orchestrator.guard.decision_policy import DEFAULT_POLICY, DecisionPolicy
from orchestrator.guard.ladder import ladder, ladder_markdown
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.tracking.mlflow_names import TAG_KIND, TAG_NOTE, TAG_SWEEP, TAG_VERDICT
from orchestrator.tracking.mlflow_status import MlflowStatus
from orchestrator.tracking.run_kind import RunKind
from orchestrator.tracking.store import param_value
from orchestrator.tracking.tracker import Tracker
from orchestrator.tracking.uris import reachable_uri, resolve_uri

log = logging.getLogger(__name__)


@dataclass
class ParentRun:
    """The sweep's parent MLflow run (None id: tracking is off and allowed to be)."""

    uri: str
    experiment: str
    run_id: str | None

    @classmethod
    def start(cls, base: Any, name: str, params: dict[str, Any]) -> ParentRun:
        """Create the parent run; TrackingUnavailable unless ``tracking.offline_ok``."""
        t = base.tracking
        uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
        if uri is None:
            log.warning("tracking unavailable: the sweep has no parent run; compare later")
            return cls(resolve_uri(t.uri, Path.cwd()), t.experiment, None)
        run_id = Tracker(uri, t.experiment).new_run(
            name, kind=RunKind.SWEEP, tags={TAG_SWEEP: name}, params=params
        )
        return cls(uri, t.experiment, run_id)

    @classmethod
    def reopen(cls, base: Any, name: str, params: dict[str, Any]) -> ParentRun:
        """The parent run of the sweep ``name``, RUNNING again; ExperimentError if there is
        none, or if it was started with other jobs (``params`` differ)."""
        t = base.tracking
        uri = reachable_uri(t.uri, t.offline_ok, Path.cwd())
        if uri is None:
            raise ExperimentError(
                [f"hydra.sweeper.resume={name}: the tracking store is unreachable"]
            )
        tracker = Tracker(uri, t.experiment)
        found = tracker.find_runs(
            f"tags.{TAG_KIND} = '{RunKind.SWEEP}' and tags.`{TAG_SWEEP}` = '{name}'"
        )
        if not found:
            raise ExperimentError(
                [
                    f"hydra.sweeper.resume={name}: no such sweep in MLflow experiment "
                    f"{t.experiment!r} of {uri}; a sweep's name is its parent run's name"
                ]
            )
        then = found[0].data.params
        now = {key: param_value(value) for key, value in params.items()}
        differing = [
            f"{key}: {then.get(key)} then, {now.get(key)} now"
            for key in sorted(now.keys() | then.keys())
            if now.get(key) != then.get(key)
        ]
        if differing:
            raise ExperimentError(
                [
                    f"hydra.sweeper.resume={name}: the sweep was started with other jobs "
                    f"({'; '.join(differing)}); continue it with the arguments it was started with"
                ]
            )
        tracker.reopen_run(found[0].info.run_id)
        return cls(uri, t.experiment, found[0].info.run_id)

    def compare(
        self,
        outcomes: list[dict[str, Any]],
        sweep_dir: Path,
        *,
        policy: DecisionPolicy = DEFAULT_POLICY,
        models: list[str] | None = None,
    ) -> dict[str, Any] | None:
        """The guard over the sweep's tracked runs under ``policy``, one comparison per
        combination of the other sweeps, logged into the parent run (one combination) or into
        child comparison runs of it (several: a sweep that also crosses e.g. ``train.steps``
        never ranks runs of different recipes). Seed replicates of a combination are compared
        together; ``models``: the sweep's model sizes, whose verdicts are lined up per
        setting (:func:`ladders`)."""
        groups: dict[str, list[str]] = {}
        for o in outcomes:
            if o.get("mlflow_run_id"):
                groups.setdefault(" ".join(o["other"]), []).append(o["mlflow_run_id"])
        if self.run_id is None or not groups:
            return None
        try:
            if len(groups) == 1:
                return compare_tracked(
                    next(iter(groups.values())),
                    tracking_uri=self.uri,
                    experiment=self.experiment,
                    into_run_id=self.run_id,
                    workdir=sweep_dir / "comparison",
                    policy=policy,
                )
            verdicts = {
                combination: compare_tracked(
                    run_ids,
                    tracking_uri=self.uri,
                    experiment=self.experiment,
                    parent_run_id=self.run_id,
                    workdir=sweep_dir / "comparison" / str(number),
                    policy=policy,
                )
                for number, (combination, run_ids) in enumerate(groups.items())
            }
        except Exception as e:  # the sweep's runs are kept; the verdict can be redone later
            log.exception("comparison failed")
            return {"accepted": False, "refusals": [], "error": f"comparison failed: {e}"}
        return self._per_combination(verdicts, models or [])

    def _per_combination(
        self, verdicts: dict[str, dict[str, Any]], models: list[str]
    ) -> dict[str, Any]:
        """One verdict of the per-combination comparisons, tagged on the parent run; with
        model sizes, each setting's sizes side by side (:func:`ladders`)."""
        sections = [
            f"### {combination or 'The base settings'}: compared on its own\n\n"
            f"{verdict.get('markdown', '')}"
            for combination, verdict in verdicts.items()
        ]
        found = ladders(verdicts, models)
        sections += [ladder_markdown(result) for result in found.values()]
        accepted = all(v.get("accepted") for v in verdicts.values())
        markdown = "\n".join(sections)
        assert self.run_id is not None
        Tracker(self.uri, self.experiment).tag_run(
            self.run_id, {TAG_VERDICT: "accepted" if accepted else "refused", TAG_NOTE: markdown}
        )
        return {
            "accepted": accepted,
            "refusals": [r for v in verdicts.values() for r in v.get("refusals", [])],
            "markdown": markdown,
            "comparisons": verdicts,
            **({"ladders": found} if found else {}),
        }

    def finish(self, status: MlflowStatus) -> None:
        """End the parent run: ``FINISHED``, ``FAILED`` or ``KILLED`` (interrupted)."""
        if self.run_id is None:
            return
        Tracker(self.uri, self.experiment).end_run(self.run_id, status)


def ladders(verdicts: dict[str, dict[str, Any]], models: list[str]) -> dict[str, dict[str, Any]]:
    """Per setting of the other sweeps (a combination without its ``model=...``), the
    :func:`~orchestrator.guard.ladder.ladder` of its sizes' verdicts, in ``models`` order;
    {} without two or more model sizes."""
    if len(models) < 2:
        return {}
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for combination, verdict in verdicts.items():
        words = combination.split(" ")
        size = next(w.removeprefix("model=") for w in words if w.startswith("model="))
        rest = " ".join(w for w in words if not w.startswith("model="))
        grouped.setdefault(rest, {})[size] = verdict
    return {
        rest: ladder({m: by_size[m] for m in models if m in by_size})
        for rest, by_size in grouped.items()
    }
