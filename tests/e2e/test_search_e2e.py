"""A real mix search (``hydra.sweeper.mix.search``) on the shared test corpus: the initial
design and a round of fit -> propose -> run of ``zephon_mini`` (2 steps, CPU), every round
judged by the guard, then the confirmation; interrupted (SIGINT) in round 1 and continued.
A second round would repeat the first's steps (tests/sweeps/test_search.py: the trajectory).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from orchestrator.experiment.runfolder import RunFolder
from orchestrator.search.confirmation import confirmation_confidence
from orchestrator.search.run_observations import observations_from_runs
from orchestrator.tracking.uris import resolve_uri
from sweeps.search import proposal_from_inputs
from sweeps.search_report import PREDICTIONS_PLOT, TRAJECTORY_PLOT
from sweeps.summary import SWEEP_FILE
from tests.support import REPO
from tests.support.cli import zephon_in_process
from tests.support.sweeps import multirun_command, tiny_sweep_overrides
from tests.support.titan_run import corpus

pytestmark = pytest.mark.timeout(1500)

UNICODE_MAX = 0.5


def wait_for_round_one(work: Path, agent: subprocess.Popen[str]) -> tuple[Path, dict]:
    """The search's state file once round 1 is launched and its run reached step 1."""
    deadline = time.monotonic() + 900
    while agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.3)
        for path in (work / "runs").glob("*.search.json"):
            state = json.loads(path.read_text())
            if len(state["rounds"]) < 2:
                continue
            name = path.name.removesuffix(".search.json")
            folder = RunFolder(work / "runs" / f"{name}-{state['rounds'][1]['first_job']:03d}")
            if folder.exists() and 1 in folder.steps():
                return path, state
    raise AssertionError(f"round 1 never started:\n{agent.stderr.read() if agent.stderr else ''}")


def test_a_search_runs_its_rounds_and_continues_after_an_interrupt_to_the_same_proposals(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("search-e2e")
    built = corpus(tmp_path_factory.getbasetemp())
    command, sweep_dir = multirun_command(
        work,
        "search",
        "hydra/launcher=zephon",
        *tiny_sweep_overrides(built),
        "hydra.sweeper.mix.search={rounds: 1, per_round: 1, initial: 2, seed: 3, stop: false}",
        f"hydra.sweeper.mix.max={{unicode: {UNICODE_MAX}}}",
        "hydra.sweeper.replicate_dp=[1]",
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent = subprocess.Popen(
        command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    state_path, before = wait_for_round_one(work, agent)
    agent.send_signal(signal.SIGINT)
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 130, f"exit {agent.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err + out
    name = state_path.name.removesuffix(".search.json")
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if name in " ".join(p.info["cmdline"] or [])
    ]
    continued = shlex.split(err.split("continue the sweep with: ", 1)[1].splitlines()[0])
    resumed = subprocess.run(
        continued, cwd=work, capture_output=True, text=True, timeout=1200, env=env
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-5000:]

    summary = json.loads((sweep_dir / SWEEP_FILE).read_text())
    rounds = summary["search"]["rounds"]
    # Continued from the round it was in: the mixtures proposed before the interrupt ran.
    assert rounds[1]["mixtures"] == before["rounds"][1]["mixtures"]
    assert rounds[0]["mixtures"][0] == {"code": 0.334, "docs": 0.333, "unicode": 0.333}
    assert len(rounds) == 2 or rounds[-1]["proposal"]["stop"]["stop"]
    assert all(r["accepted"] for r in rounds), [r["refusals"] for r in rounds]
    mixtures = [m for r in rounds for m in r["mixtures"]]
    mixtures.append(summary["search"]["recommended"]["mixture"])
    for mixture in mixtures:
        assert mixture["unicode"] <= UNICODE_MAX and sum(mixture.values()) == pytest.approx(1)
        assert all(round(w * 1000) == pytest.approx(w * 1000) for w in mixture.values())

    # The same seed proposes the same mixtures: each round's proposal redone from its inputs.
    uri = resolve_uri(None, work)
    for number, record in enumerate(rounds):
        inputs = record["proposal_inputs"]
        observations = observations_from_runs(inputs["run_ids"], tracking_uri=uri)
        again = proposal_from_inputs(inputs, observations).to_json()
        assert again["proposals"] == record["proposal"]["proposals"]
        if number + 1 < len(rounds):
            assert rounds[number + 1]["mixtures"] == [
                p["mixture"] for p in record["proposal"]["proposals"]
            ]

    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(summary["parent_run_id"])
    assert parent.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(parent.info.run_id, "search.best_observed")]
    assert steps == list(range(len(rounds)))
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {TRAJECTORY_PLOT, PREDICTIONS_PLOT, state_path.name} <= artifacts
    for record in rounds:  # one child comparison per round, under the parent
        child = client.get_run(record["comparison_run_id"])
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    confirmation = summary["comparison"]
    assert confirmation["accepted"]
    # A false winner at most 5% of the time over all of the recommendation's comparisons.
    assert confirmation["confidence"] == pytest.approx(
        confirmation_confidence(len(confirmation["rows"]) - 1)
    )
    assert {d["decision"] for d in confirmation["pairs"]} <= {"a_better", "b_better", "cannot_tell"}
    assert "== search" in resumed.stdout and "recommended:" in resumed.stdout

    # An agent's next steps: the sweep's runs fitted again, and the next mixtures, from the
    # command line (the repetition cap comes from the runs' own experiment).
    for command in (
        ["fit", "--sweep", name],
        ["propose", "--sweep", name, "--n", "1", "--max", f"unicode={UNICODE_MAX}"],
    ):
        answered = zephon_in_process(work, *command, "--json")
        assert answered.returncode == 0, answered.stdout[-2000:] + answered.stderr[-3000:]
        report = json.loads(answered.stdout)
        assert report["runs"] == len(summary["jobs"])
        assert report["domains"] == ["code", "docs", "unicode"]
    assert report["proposals"][0]["mixture"]["unicode"] <= UNICODE_MAX
    assert report["bounds"]["max"]["unicode"] <= UNICODE_MAX
