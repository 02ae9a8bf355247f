"""The every-core-busy benchmark (benchmarks/cores.py): its log reading, and one real start-up
measurement through ``zephon-run`` (no timing asserted, only the order of the phases)."""

from __future__ import annotations

import datetime
from pathlib import Path

from benchmarks.cores import measure_startup, titan_times
from orchestrator.run.warm_start import WARM_LOG_LINE


def test_titan_times_reads_the_training_start_and_the_first_and_last_steps(tmp_path: Path) -> None:
    def line(seconds: float, text: str) -> str:
        stamp = datetime.datetime(2026, 12, 2, 15, 0, 0) + datetime.timedelta(seconds=seconds)
        return f"[titan] {stamp:%Y-%m-%d %H:%M:%S},{stamp.microsecond // 1000:03d} - root - INFO - {text}"

    log = tmp_path / "launch.log"
    log.write_text(
        "\n".join(
            [
                "=== launch 2026-12-02 15:00:00",
                line(1.0, "torchtitan version: 0.3.0"),
                line(2.5, "Training starts at step 1"),
                line(3.25, "step:  1  loss: 11.1  grad_norm: 1.4"),
                "a warning line without a stamp",
                line(4.0, "step:  2  loss: 11.0  grad_norm: 1.0"),
                line(6.0, "Training completed"),
            ]
        )
    )
    times = titan_times(log)
    base = datetime.datetime(2026, 12, 2, 15, 0, 0).timestamp()
    assert {k: round(v - base, 3) for k, v in times.items()} == {
        "training_starts": 2.5,
        "first_step": 3.25,
        "last_step": 4.0,
    }


def test_a_warm_dp1_start_up_is_measured_from_the_command(tmp_path: Path) -> None:
    # 2 steps and no evaluation: the phases are what is checked, not the smoke run's length
    measured = measure_startup(
        tmp_path, dp=1, warm=True, name="warm-dp1", overrides=("train.steps=2", "eval=off")
    )
    assert measured["mode"] == "warm" and measured["dp"] == 1
    assert 0 < measured["to_training_start_s"] <= measured["to_first_step_s"] < measured["wall_s"]
    assert 0 < measured["last_step_to_return_s"] < measured["wall_s"]
    log = (tmp_path / "runs" / "warm-dp1" / "launch.log").read_text()
    assert WARM_LOG_LINE in log and "starting torchrun cold" not in log
    assert "Training starts at step 1" in log
