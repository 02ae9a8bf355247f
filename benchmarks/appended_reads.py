"""What a launch's watch of its run folder costs as the run grows: each tick (about once a
second) reads the trainer's ``steps.jsonl`` and ``metrics.jsonl``; the baseline reads them
whole (:func:`orchestrator.experiment.runfolder.read_jsonl`, as before), Zephon reads on from
where it stopped (:class:`orchestrator.experiment.appended_jsonl.AppendedJsonl`).

``python -m benchmarks.appended_reads`` (``bash scripts/bench.sh --appended-reads``; about
a minute) writes ``benchmarks/results/appended_reads.{json,md}``: per run length, the CPU
seconds of one tick (one step appended, both files read) each way, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import REPO_ROOT, provenance
from benchmarks.publish import RESULTS, publish
from orchestrator.experiment.runfolder import (
    METRICS_FILE,
    RUN_SUBDIR,
    STEPS_FILE,
    RunFolder,
    read_jsonl,
)

STEM = "appended_reads"
LENGTHS = (1_000, 10_000, 100_000)
TICKS = 5


def step_record(step: int) -> dict[str, Any]:
    """A ``steps.jsonl`` line as the trainer writes it after the first step."""
    return {
        "step": step,
        "global_digest": f"{step:064x}",
        "data_fingerprint": f"{step * 7:064x}",
        "tokens": 4096,
        "data_wait_s": 0.000041,
        "dp_size": 2,
        "records_read": {"code": 3, "docs": 2, "unicode": 4},
    }


def metrics_record(step: int) -> dict[str, Any]:
    """A ``metrics.jsonl`` line as TorchTitan's logger writes it."""
    return {
        "step": step,
        "loss_metrics/global_avg_loss": 10.0 / step,
        "loss_metrics/global_max_loss": 20.0 / step,
        "grad_norm": 1.0,
        "throughput_tps": 1650.0,
        "tflops": 0.03,
        "mfu_pct": 0.01,
        "memory/max_active_GiB": 0.71,
        "time_metrics/end_to_end(s)": 0.61,
        "time_metrics/data_loading(s)": 0.0001,
    }


def append(folder: RunFolder, steps: range) -> None:
    """The trainer's lines of ``steps`` appended to both files."""
    for name, record in ((STEPS_FILE, step_record), (METRICS_FILE, metrics_record)):
        path = folder.titan_dir / RUN_SUBDIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.writelines(json.dumps(record(s)) + "\n" for s in steps)


def whole_reads(folder: RunFolder) -> int:
    """The baseline: both files read whole."""
    return sum(
        len(read_jsonl(folder.titan_dir / RUN_SUBDIR / n)) for n in (STEPS_FILE, METRICS_FILE)
    )


def appended_reads(folder: RunFolder) -> int:
    """Zephon's: what the folder's readers have not read yet."""
    return len(folder.steps()) + len(folder.metrics())


def tick_seconds(root: Path, length: int) -> dict[str, float]:
    """CPU seconds of one tick at ``length`` steps, each way (median of :data:`TICKS`)."""
    folder = RunFolder(root / f"run-{length}")
    append(folder, range(1, length + 1))
    appended_reads(folder)  # a launch's first tick reads the earlier segments' lines once
    times: dict[str, list[float]] = {"whole": [], "appended": []}
    for tick in range(TICKS):
        step = length + 1 + tick
        append(folder, range(step, step + 1))
        for way, read in (("whole", whole_reads), ("appended", appended_reads)):
            started = time.process_time()
            read(folder)
            times[way].append(time.process_time() - started)
    return {way: sorted(values)[TICKS // 2] for way, values in times.items()}


def to_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# A launch's watch of its run folder: reads as the run grows",
        "",
        f"`{report['command']}` at commit {report['commit']} on {report['cpu']}, {report['date']}.",
        "",
        "CPU seconds of one tick (one step appended; `steps.jsonl` and `metrics.jsonl` read),",
        f"median of {TICKS} ticks: read whole each time (before) against read on from the last",
        "position (`AppendedJsonl`).",
        "",
        "| steps | read whole, s | read on, s | whole / read on |",
        "|---:|---:|---:|---:|",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['steps']:,} | {row['whole_s']:.4f} | {row['appended_s']:.4f} "
            f"| {row['ratio']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    work = REPO_ROOT / ".zephon"
    work.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        for length in LENGTHS:
            seconds = tick_seconds(Path(scratch), length)
            ratio = seconds["whole"] / max(seconds["appended"], 1e-6)
            rows.append(
                {
                    "steps": length,
                    "whole_s": seconds["whole"],
                    "appended_s": seconds["appended"],
                    "ratio": ratio,
                }
            )
            print(f"{length} steps: {seconds} ({ratio:.0f}x)")
    made = provenance("bash scripts/bench.sh --appended-reads", ())
    report = {**made, "rows": rows}
    publish(args.results_dir, STEM, report, to_markdown(report))


if __name__ == "__main__":
    main()
