"""The training precision rule (orchestrator/machine/precision.py): forced values pass, CUDA keeps
TorchTitan's bfloat16, a CPU gets bfloat16 only when it measured bfloat16 matmuls no slower
than float32, and the measurement is made once per machine and shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.machine import precision
from orchestrator.machine.precision import cpu_bfloat16_measurement, resolve_precision


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path))
    return tmp_path


def test_forced_precisions_and_cuda_ignore_the_cpu(home: Path) -> None:
    assert resolve_precision("float32", "cpu") == "float32"
    assert resolve_precision("bfloat16", "cpu") == "bfloat16"
    assert resolve_precision("auto", "cuda") == "bfloat16"
    assert not (home / precision.CACHE_FILE).exists()  # nothing measured for these
    with pytest.raises(ValueError, match="use one of auto, float32, bfloat16"):
        resolve_precision("fp16", "cpu")


def test_auto_on_cpu_follows_the_measurement_of_this_machine(home: Path) -> None:
    measured = cpu_bfloat16_measurement()
    assert measured["float32_s"] > 0 and measured["bfloat16_s"] > 0
    fast = measured["bfloat16_s"] <= measured["float32_s"]
    assert measured["bfloat16_fast"] is fast
    assert resolve_precision("auto", "cpu") == ("bfloat16" if fast else "float32")


def test_the_measurement_is_made_once_and_shared(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = cpu_bfloat16_measurement()

    def measure_again() -> dict:
        raise AssertionError("measured twice: runs on one machine could disagree")

    monkeypatch.setattr(precision, "_measure_cpu_precision", measure_again)
    assert cpu_bfloat16_measurement() == first
    cached = json.loads((home / precision.CACHE_FILE).read_text())
    assert list(cached.values()) == [first]


def test_a_slow_bfloat16_gives_float32_and_a_fast_one_bfloat16(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule itself, on the timings of the two kinds of CPU seen (AVX2 vs AMX)."""
    for bf16_s, fp32_s, want in ((0.12, 0.004, "float32"), (0.002, 0.004, "bfloat16")):
        (home / precision.CACHE_FILE).unlink(missing_ok=True)
        timing = {"float32_s": fp32_s, "bfloat16_s": bf16_s}
        monkeypatch.setattr(precision, "_time_matmuls", lambda t=timing: dict(t))
        assert resolve_precision("auto", "cpu") == want
