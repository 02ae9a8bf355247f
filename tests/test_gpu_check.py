"""``scripts/gpu_check.sh``: its CPU half runs here (CPU processes stand in for GPUs), so the
script cannot rot while no GPU is around; on a machine without GPUs the GPU mode fails at
once, saying why."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.support import REPO
from tests.support.titan_run import corpus, corpus_tokenizer

pytestmark = pytest.mark.timeout(1200)


def gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        timeout=1100,
        # Its set-up would copy the gpt2 file into tiktoken's cache, by default in the
        # system's temporary folder; Zephon reads its own copy.
        env={**os.environ, "TIKTOKEN_CACHE_DIR": ""},
    )


def test_the_cpu_half_passes_every_check(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path / "check"
    # the shared corpus's small tokenizer: the script's steps, at half the arithmetic of gpt2
    tokenizer = corpus_tokenizer(corpus(tmp_path_factory.getbasetemp()))
    done = gpu_check("--cpu", "--out", str(out), "--tokenizer", tokenizer)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    names = [c["name"] for c in report["checks"]]
    assert names == ["devices", "precision", "elastic", "sweep", "guard", "scores"]
    assert report["ok"] and all(c["ok"] for c in report["checks"]), report["checks"]
    checks = {c["name"]: c["details"] for c in report["checks"]}
    assert checks["elastic"]["dp2_to_dp1"]["matched_steps"] == 4
    assert len(checks["sweep"]["runs"]) == 4  # two mixes, each on dp 1 and dp 2
    assert checks["guard"]["accepted"] and len(checks["guard"]["rows"]) == 2
    assert max(checks["scores"]["relative_difference"].values()) <= 0.02
    summary = (out / "gpu_check.md").read_text()
    assert "# GPU check: passed" in summary and "| elastic |" in summary
    for line in ("[gpu-check] sweep: a two-mix sweep", "[gpu-check] scores: ok"):
        assert line in done.stdout
    left = [
        p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])
    ]
    assert not left, [p.info["cmdline"] for p in left]


def test_without_a_gpu_the_gpu_mode_fails_saying_why(tmp_path: Path) -> None:
    done = gpu_check("--out", str(tmp_path / "check"))
    assert done.returncode == 1
    assert "asked for cuda devices, found cpu" in done.stdout and "setup.sh" in done.stdout
    report = json.loads((tmp_path / "check" / "gpu_check.json").read_text())
    assert not report["ok"] and [c["name"] for c in report["checks"]] == ["devices"]


def test_a_used_out_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "gpu_check.json").write_text("{}")
    done = gpu_check("--cpu", "--out", str(tmp_path / "old"))
    assert done.returncode == 2 and "is not empty: give a new folder" in done.stderr
