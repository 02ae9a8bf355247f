"""The fault matrix: one run killed (SIGKILL) at many points of its training and resumed after
each, then held against an uninterrupted run of the same experiment.

Each kill point is a failpoint (:mod:`orchestrator.failpoints`): the process that reaches it
holds there and says so, and this harness then SIGKILLs the ``zephon`` command's process
group, as an out-of-memory kill or a lost machine would: no handler runs. ``zephon resume``
starts the next launch, armed at the next point; it stops what the kill left of the last
launch, passes over a torn checkpoint and sets a damaged one aside. After the last point a
plain ``zephon resume`` finishes the run. The run must then hold every step's digest
exactly once, equal to the uninterrupted run's, in ``steps.jsonl`` and in MLflow, and every
eval exactly once, with no process of it left.

    python -m benchmarks.fault_matrix   # the full matrix -> benchmarks/results/fault_matrix.*

Its test (``tests/e2e/test_fault_matrix.py``) runs a short chain of the same harness.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchmarks.machine import REPO_ROOT
from benchmarks.publish import RESULTS, publish
from orchestrator.experiment.checkpoint_manifest import MANIFEST_FILE
from orchestrator.experiment.runfolder import (
    EVAL_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
    read_jsonl,
)
from orchestrator.failpoints import FAILPOINT_ENV, HELD_ENV, Failpoint
from orchestrator.tracking.metric_units import TITAN_LOSS
from orchestrator.tracking.mlflow_names import METRIC_EVAL_AGGREGATE, METRIC_LOSS
from orchestrator.tracking.store import client_for

LAUNCH_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class KillPoint:
    """A failpoint at a step; ``damage`` first damages the run's newest whole checkpoint."""

    point: Failpoint
    step: int
    damage: bool = False

    def __str__(self) -> str:
        return f"{self.point}@{self.step}" + (" after damaging a checkpoint" if self.damage else "")


@dataclass
class Launch:
    """One command of the chain: the point it was armed at, and what came of it."""

    armed: str
    held: bool
    returncode: int | None
    seconds: float
    messages: list[str] = field(default_factory=list)


def every_point(steps: int, *, checkpoint_every: int, eval_every: int) -> list[KillPoint]:
    """Every kill point of a run of ``steps`` in the order training reaches them (a step,
    its line, its checkpoint written then whole, its eval), the last sync of MLflow last;
    the checkpoint before the last step's is damaged before the resume that follows it."""
    points = []
    for step in range(1, steps + 1):
        points += [KillPoint(Failpoint.STEP, step), KillPoint(Failpoint.STEP_LOGGED, step)]
        if step % checkpoint_every == 0:
            points += [
                KillPoint(Failpoint.CHECKPOINT_WRITTEN, step),
                KillPoint(Failpoint.CHECKPOINT_SAVED, step),
            ]
        if step % eval_every == 0:
            points.append(KillPoint(Failpoint.EVAL, step))
    points.append(KillPoint(Failpoint.TRACKING_SENT, steps, damage=True))
    return points


def zephon(*args: str) -> list[str]:
    """The ``zephon`` command line of this interpreter."""
    return [sys.executable, "-m", "orchestrator.cli", *args]


def killed_at(command: list[str], point: str, *, cwd: Path, env: dict[str, str]) -> Launch:
    """Run ``command`` armed at ``point``; SIGKILL its process group once it holds there."""
    held = Path(tempfile.mkdtemp(dir=cwd)) / "held"
    started = time.monotonic()
    agent = subprocess.Popen(
        command,
        cwd=cwd,
        env={**env, FAILPOINT_ENV: point, HELD_ENV: str(held)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = started + LAUNCH_TIMEOUT_S
    while not held.exists() and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    reached = held.exists()
    if agent.poll() is None:
        os.killpg(agent.pid, signal.SIGKILL)
    _, err = agent.communicate()
    held.unlink(missing_ok=True)
    held.parent.rmdir()
    lines = [line for line in err.decode(errors="replace").splitlines() if "[zephon]" in line]
    return Launch(point, reached, agent.returncode, time.monotonic() - started, lines)


def damage_newest_checkpoint(folder: RunFolder) -> Path:
    """Flip bytes in the middle of the largest shard of ``folder``'s newest whole checkpoint
    (its size stays: only its manifest can tell)."""
    step = folder.last_checkpoint_step()
    assert step is not None, f"{folder.path} has no whole checkpoint to damage"
    checkpoint = folder.checkpoint_dir / f"step-{step}"
    shards = [
        p
        for p in checkpoint.rglob("*")
        if p.is_file() and p.name not in (".metadata", MANIFEST_FILE)
    ]
    shard = max(shards, key=lambda p: p.stat().st_size)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    shard.write_bytes(bytes(data))
    return shard


def run_chain(
    start: list[str],
    folder: RunFolder,
    points: Sequence[KillPoint],
    *,
    cwd: Path,
    env: dict[str, str],
) -> tuple[list[Launch], dict[str, Any]]:
    """``start`` killed at ``points[0]``, ``zephon resume`` killed at each later point (a
    checkpoint damaged first where it says), then a last plain resume: the launches, and
    the last resume's JSON result."""
    launches = [killed_at(start, str(points[0].point) + f"@{points[0].step}", cwd=cwd, env=env)]
    resume = zephon("resume", str(folder.path), "--json")
    for point in points[1:]:
        if point.damage and folder.last_checkpoint_step() is not None:
            damage_newest_checkpoint(folder)
        launches.append(killed_at(resume, f"{point.point}@{point.step}", cwd=cwd, env=env))
    started = time.monotonic()
    last = subprocess.run(
        resume, cwd=cwd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    result = json.loads(last.stdout)
    launches.append(
        Launch("", False, last.returncode, time.monotonic() - started, result.get("messages", []))
    )
    return launches, result


def _line_steps(path: Path) -> Counter[int]:
    return Counter(record["step"] for record in read_jsonl(path))


def _losses(folder: RunFolder) -> dict[int, float]:
    return {s: m[TITAN_LOSS] for s, m in folder.metrics().items() if TITAN_LOSS in m}


def _history_steps(client: Any, run_id: str, key: str) -> Counter[int]:
    return Counter(m.step for m in client.get_metric_history(run_id, key))


@dataclass
class Findings:
    """What a faulted run holds against the uninterrupted one (all zero but ``steps``)."""

    steps: int
    steps_lost: int
    steps_duplicated: int
    digests_differing: int
    losses_differing: int
    """Steps whose loss differs from the uninterrupted run's by more than 1e-5 (relative):
    weights loaded wrong."""
    evals_lost: int
    evals_duplicated: int
    mlflow_losses_lost: int
    mlflow_losses_duplicated: int
    mlflow_evals_lost: int
    mlflow_evals_duplicated: int
    processes_left: int

    def failures(self) -> dict[str, int]:
        """The counts that are not zero but ``steps``: what went wrong."""
        return {k: v for k, v in asdict(self).items() if v and k != "steps"}


def findings(folder: RunFolder, reference: RunFolder) -> Findings:
    """``folder``'s run held against ``reference``'s (same experiment, never killed)."""
    expected = reference.digests()
    trained = _losses(folder)
    lines = _line_steps(folder.titan_dir / RUN_SUBDIR / STEPS_FILE)
    digests = folder.digests()
    evals = _line_steps(folder.titan_dir / RUN_SUBDIR / EVAL_FILE)
    expected_evals = set(reference.evals())
    state = folder.state()
    assert state.tracking_uri and state.mlflow_run_id, f"{folder.path} has no MLflow run"
    client = client_for(state.tracking_uri)
    run_id = state.mlflow_run_id
    losses = _history_steps(client, run_id, METRIC_LOSS)
    scored = _history_steps(client, run_id, METRIC_EVAL_AGGREGATE)
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(folder.path) in " ".join(p.info["cmdline"] or ())
    ]
    return Findings(
        steps=len(expected),
        steps_lost=len(set(expected) - set(lines)),
        steps_duplicated=sum(n - 1 for n in lines.values()),
        digests_differing=sum(digests.get(s) != d for s, d in expected.items() if s in digests),
        losses_differing=sum(
            not math.isclose(trained[s], theirs, rel_tol=1e-5)
            for s, theirs in _losses(reference).items()
            if s in trained
        ),
        evals_lost=len(expected_evals - set(evals)),
        evals_duplicated=sum(n - 1 for n in evals.values()),
        mlflow_losses_lost=len(set(expected) - set(losses)),
        mlflow_losses_duplicated=sum(n - 1 for n in losses.values()),
        mlflow_evals_lost=len(expected_evals - set(scored)),
        mlflow_evals_duplicated=sum(n - 1 for n in scored.values()),
        processes_left=len(left),
    )


def fallbacks(launches: Collection[Launch]) -> int:
    """How many checkpoints the resumes set aside as damaged."""
    return sum("is damaged" in line for launch in launches for line in launch.messages)


# -- the full matrix ---------------------------------------------------------------------------

MATRIX_STEPS = 8
MATRIX_OVERRIDES = (
    "model=mini",
    "train=smoke",
    f"train.steps={MATRIX_STEPS}",
    "train.checkpoint_interval=2",
    "eval.interval=2",
    "resources.dp=1",
)


def main(argv: list[str] | None = None) -> None:
    """Run the full matrix in a scratch folder; publish its counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    points = every_point(MATRIX_STEPS, checkpoint_every=2, eval_every=2)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as scratch:
        work = Path(scratch)
        hydra = [str(Path(sys.executable).with_name("zephon-run")), *MATRIX_OVERRIDES]
        subprocess.run(
            [*hydra, "run_name=reference"], cwd=work, env=env, check=True, capture_output=True
        )
        reference = RunFolder(work / "runs" / "reference")
        folder = RunFolder(work / "runs" / "faulted")
        start = [*hydra, "run_name=faulted", "fresh=true"]
        launches, result = run_chain(start, folder, points, cwd=work, env=env)
        found = findings(folder, reference)
    report = {
        "kill_points": [str(p) for p in points],
        "launches": [asdict(launch) for launch in launches],
        "findings": asdict(found),
        "held": sum(launch.held for launch in launches),
        "fallbacks": fallbacks(launches),
        "status": result["status"],
    }
    publish(args.results, "fault_matrix", report, _markdown(report))


def _markdown(report: dict[str, Any]) -> str:
    found = report["findings"]
    rows = "\n".join(
        f"| {launch['armed'] or '(none: the run finishes)'} | {'yes' if launch['held'] else 'no'} "
        f"| {launch['seconds']:.1f} |"
        for launch in report["launches"]
    )
    counts = "\n".join(f"| {name} | {value} |" for name, value in found.items())
    return (
        "# The fault matrix\n\n"
        f"{len(report['kill_points'])} kill points, {report['held']} held and killed, "
        f"{len(report['launches']) - 1} resumes, {report['fallbacks']} damaged checkpoint(s) "
        f"set aside; the run ended {report['status']}.\n\n"
        "| armed at | held and killed | seconds |\n|---|---|---:|\n"
        f"{rows}\n\n| against the uninterrupted run | count |\n|---|---:|\n{counts}\n"
    )


if __name__ == "__main__":
    main()
