"""Run one measurement in a fresh Python process.

Every repetition of every variant runs in its own process, so that none inherits
another's threads, worker pools, allocator state or page cache warm-up of its own
objects, and so that the process's peak RSS is that variant's. The parent calls
:func:`run_in_child`; the child (``python -m benchmarks.child KIND PARAMS WORKLOAD OUT``)
runs the measurement function of ``KIND`` on the workload with ``PARAMS`` and writes a
JSON result to ``OUT``: ``{"ok": true, "result": ..., "peak_rss_mb": {"process": ...,
"tree": ...}}`` or ``{"ok": false, "error": ...}``. ``process`` is the child's own peak
(``getrusage``), ``tree`` the peak summed RSS of the child and its workers (sampled).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT
from benchmarks.timing import Throughput, TreeMemory, peak_rss_mb
from benchmarks.workload import Workload

STDERR_TAIL = 2000


def _import_measurements() -> dict[str, Callable[..., Any]]:
    """Measurement functions by kind (imported here: the parent never needs them)."""
    from benchmarks import baselines, lanes  # deferred: baselines imports torch

    return {
        "raw": baselines.measure_raw,
        "dataloader": baselines.measure_dataloader,
        "torchtitan": baselines.measure_torchtitan,
        "torchtitan_prepare": baselines.prepare_torchtitan,
        "pipeline": lanes.measure_pipeline,
        "restore": lanes.measure_restore,
    }


def _to_jsonable(result: Any) -> Any:
    if isinstance(result, Throughput):
        return {**asdict(result), "tokens_per_s": result.tokens_per_s}
    return result


def run_in_child(
    kind: str, params: dict[str, Any], workload_path: Path, timeout_s: float
) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; return its JSON output (see module)."""
    with tempfile.TemporaryDirectory(prefix="zephon-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.child", kind, json.dumps(params)]
        cmd += [str(workload_path), str(out)]
        try:
            proc = subprocess.run(
                cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"timed out after {timeout_s:.0f} s"}
        if out.is_file():
            return json.loads(out.read_text())
        return {
            "ok": False,
            "error": f"exit code {proc.returncode}: {proc.stderr[-STDERR_TAIL:].strip()}",
        }


def main(argv: list[str] | None = None) -> int:
    """Child entry point; returns the exit code (1 when the measurement raised)."""
    kind, params, workload_path, out = argv if argv is not None else sys.argv[1:]
    try:
        measure = _import_measurements()[kind]
        with TreeMemory() as tree:
            result = measure(Workload.load(Path(workload_path)), **json.loads(params))
        peak = {"process": peak_rss_mb(), "tree": tree.peak_mb}
        payload = {"ok": True, "result": _to_jsonable(result), "peak_rss_mb": peak}
        code = 0
    except Exception as exc:
        lines = traceback.format_exception(exc)
        payload = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": lines[-6:]}
        code = 1
    Path(out).write_text(json.dumps(payload))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
