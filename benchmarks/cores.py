"""Every core busy: a run's start-up and teardown, the main job's wall and CPU, the pipeline's speed.

``bash scripts/bench.sh --cores`` (or ``python -m benchmarks.cores``) measures in one run a
4-step run's start-up and teardown (cold and warm, dp 1 and 2), the main job's wall and CPU
time as it runs now and as scheduled before issue 26, and the pipeline against raw tiktoken
at 2 threads. Results: ``benchmarks/results/cores.{json,md}``.

Design: docs/design/benchmarks_training.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.machine import describe_machine
from benchmarks.publish import RESULTS, publish
from benchmarks.tokenizer_ratio import measure_pipeline_ratio
from benchmarks.training import MAIN_JOB_TARGET_S, measure_main_job
from orchestrator.machine.precision import cpu_model

STARTUP_OVERRIDES = ("model=mini", "train=smoke", "tracking.experiment=startup")
FIRST_STEP_TARGET_S = 5.0
WALL_TARGET_S = 12.0
"""The whole warm dp 1 command, starting its own warm server (issue 36): under this."""
MAIN_JOB_CPU_TARGET = 1.70
"""CPU seconds per wall second of the main job's process tree: at least this."""
PIPELINE_TARGET = 0.95
BEFORE_OVERRIDES = ("hydra.launcher.extra_processes=0",)
"""The main job as it was scheduled before: one process per core (with cold starts)."""
TITAN_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"


def titan_times(log: Path) -> dict[str, float]:
    """Epoch seconds of TorchTitan's "Training starts", step-1 and last step lines in ``log``."""
    found: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("[titan] "):
            continue
        stamp = datetime.datetime.strptime(line[8:31], TITAN_TIME_FORMAT).timestamp()
        if "Training starts at step" in line:
            found.setdefault("training_starts", stamp)
        elif "step:" in line and "loss:" in line:
            found.setdefault("first_step", stamp)
            found["last_step"] = stamp
    return found


def measure_startup(
    work: Path, dp: int, warm: bool, name: str, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """One ``zephon-run`` of the smoke experiment (``overrides`` added) in ``work``; its
    start-up and teardown."""
    mode = "warm" if warm else "cold"
    command = [
        str(Path(sys.executable).parent / "zephon-run"),
        *STARTUP_OVERRIDES,
        f"resources.dp={dp}",
        f"run_name={name}",
        "fresh=true",  # each repetition trains; none is answered from the one before
        *overrides,
    ]
    env = {**os.environ, "ZEPHON_WARM_START": "1" if warm else "0"}
    start = time.time()
    with (work / f"{name}.log").open("w") as log:
        code = subprocess.run(
            command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT
        ).returncode
    end = time.time()
    if code != 0:
        raise RuntimeError(f"{name} failed (exit {code}): see {work / f'{name}.log'}")
    times = titan_times(work / "runs" / name / "launch.log")
    return {
        "dp": dp,
        "mode": mode,
        "wall_s": round(end - start, 2),
        "to_training_start_s": round(times["training_starts"] - start, 2),
        "to_first_step_s": round(times["first_step"] - start, 2),
        "last_step_to_return_s": round(end - times["last_step"], 2),
    }


def measure_startups(work: Path, reps: int) -> dict[str, Any]:
    """Every (dp, mode) ``reps`` times, interleaved after one unmeasured run per dp."""
    for dp in (1, 2):
        measure_startup(work, dp, warm=True, name=f"fill-caches-dp{dp}")
    runs = [
        measure_startup(work, dp, warm, f"startup-{'warm' if warm else 'cold'}-dp{dp}-{rep}")
        for rep in range(reps)
        for dp in (1, 2)
        for warm in (False, True)
    ]
    medians = {}
    for dp in (1, 2):
        for mode in ("cold", "warm"):
            mine = [r for r in runs if r["dp"] == dp and r["mode"] == mode]
            medians[f"{mode} dp{dp}"] = {
                key: round(statistics.median(r[key] for r in mine), 2)
                for key in (
                    "to_training_start_s",
                    "to_first_step_s",
                    "last_step_to_return_s",
                    "wall_s",
                )
            }
    first_step = medians["warm dp1"]["to_first_step_s"]
    return {
        "command": ["zephon-run", *STARTUP_OVERRIDES, "resources.dp=<dp>"],
        "medians": medians,
        "runs": runs,
        "first_step_target_s": FIRST_STEP_TARGET_S,
        "first_step_target_met": first_step < FIRST_STEP_TARGET_S,
        "wall_target_s": WALL_TARGET_S,
        "wall_target_met": medians["warm dp1"]["wall_s"] < WALL_TARGET_S,
    }


def measure_main_jobs(work: Path, overrides: list[str]) -> dict[str, Any]:
    """The main job now and as scheduled before (design doc), each in its own folder."""
    jobs = {}
    for label, env, extra in (
        ("now", {}, []),
        ("before", {"ZEPHON_WARM_START": "0"}, list(BEFORE_OVERRIDES)),
    ):
        folder = work / f"main-job-{label}"
        folder.mkdir(parents=True, exist_ok=True)
        measured = measure_main_job(folder, [*overrides, *extra], env)
        cpu = (measured["user_s"] + measured["system_s"]) / measured["wall_s"]
        jobs[label] = {
            **{k: measured[k] for k in ("command", "exit_status", "wall_s", "user_s", "system_s")},
            "environment": env,
            "cpu_per_wall": round(cpu, 2),
            "load_before_percent": measured["load_before_percent"],
        }
    now = jobs["now"]
    return {
        **jobs,
        "wall_target_s": MAIN_JOB_TARGET_S,
        "cpu_target": MAIN_JOB_CPU_TARGET,
        "wall_target_met": now["wall_s"] < MAIN_JOB_TARGET_S and now["exit_status"] == 0,
        "cpu_target_met": now["cpu_per_wall"] >= MAIN_JOB_CPU_TARGET,
    }


def measure_pipeline(steps: int) -> dict[str, Any]:
    """Pipeline / raw tiktoken at 2 threads on prose and on code."""
    kinds = {kind: measure_pipeline_ratio(kind, 2, steps=steps) for kind in ("prose", "code")}
    return {
        "by_text": kinds,
        "target": PIPELINE_TARGET,
        "target_met": all(k["ratio_steady"] >= PIPELINE_TARGET for k in kinds.values()),
    }


def to_markdown(report: dict[str, Any]) -> str:
    """The report's tables, every goal met or missed."""

    def verdict(met: bool) -> str:
        return "met" if met else "missed"

    lines = [f"# Every core busy\n\n{report['date']} · {report['machine']}\n"]
    if "startup" in report:
        s = report["startup"]
        lines += [
            f"## Start-up and teardown\n\n`{' '.join(s['command'])}`, medians of "
            f"{report['reps']} run(s) each (seconds):\n",
            "| run | command to training start | command to step 1 | last step to return | wall |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {name} | {m['to_training_start_s']:.1f} | {m['to_first_step_s']:.1f} | "
                f"{m['last_step_to_return_s']:.1f} | {m['wall_s']:.1f} |"
                for name, m in s["medians"].items()
            ),
            f"\nWarm dp 1, command to step 1: **{s['medians']['warm dp1']['to_first_step_s']:.1f} s** "
            f"(goal < {s['first_step_target_s']:.0f} s: {verdict(s['first_step_target_met'])}); "
            f"the whole command: **{s['medians']['warm dp1']['wall_s']:.1f} s** (goal < "
            f"{s['wall_target_s']:.0f} s: {verdict(s['wall_target_met'])}).\n",
        ]
    if "main_job" in report:
        m = report["main_job"]
        lines += [
            "## The main job\n",
            "| schedule | wall s | user s | system s | CPU / wall | exit |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {label} | {m[label]['wall_s']:.0f} | {m[label]['user_s']:.0f} | "
                f"{m[label]['system_s']:.0f} | {m[label]['cpu_per_wall']:.0%} | "
                f"{m[label]['exit_status']} |"
                for label in ("now", "before")
            ),
            f"\nNow: **{m['now']['wall_s']:.0f} s** (goal < {m['wall_target_s']:.0f} s: "
            f"{verdict(m['wall_target_met'])}), **{m['now']['cpu_per_wall']:.0%} CPU** (goal >= "
            f"{m['cpu_target']:.0%}: {verdict(m['cpu_target_met'])}). Before: cold starts, one "
            "process per core.\n",
        ]
    if "pipeline" in report:
        p = report["pipeline"]
        lines += [
            "## The pipeline against raw tiktoken (2 threads)\n",
            "| text | raw tiktoken M tokens/s | pipeline M tokens/s | ratio after the first "
            "batch | ratio over the whole run | other load % |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {kind} | {r['raw_tokens_per_s'] / 1e6:.2f} | "
                f"{r['pipeline_tokens_per_s'] / 1e6:.2f} | {r['ratio_steady']:.2f} | "
                f"{r['ratio']:.2f} | {r['other_load_percent']:.0f} |"
                for kind, r in p["by_text"].items()
            ),
            f"\nAfter the first batch (start-up apart, as the issue measured), goal >= "
            f"{p['target']:.2f} on both: {verdict(p['target_met'])}. Raw tiktoken runs as users "
            "run it (`encode_ordinary_batch`, one shared encoding); the pipeline's threads each "
            "encode with their own copy, which tiktoken runs faster "
            "([docs/pipeline_performance.md](../../docs/pipeline_performance.md)).\n",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The ``benchmarks.cores`` command (design doc)."""
    parser = argparse.ArgumentParser(prog="benchmarks.cores", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2, help="runs per start-up measurement")
    parser.add_argument("--pipeline-steps", type=int, default=400, help="pipeline steps timed")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("startup", "main_job", "pipeline"),
        default=["startup", "main_job", "pipeline"],
    )
    parser.add_argument("--work-dir", type=Path, help="scratch folder (default: a temp dir)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("main_job_args", nargs="*", help="Hydra overrides for the main job")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="zephon-bench-cores-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{cpu_model()}, {describe_machine(['torch', 'torchtitan', 'tiktoken'])}",
        "reps": args.reps,
    }
    if "startup" in args.only:
        report["startup"] = measure_startups(work, args.reps)
    if "main_job" in args.only:
        report["main_job"] = measure_main_jobs(work, args.main_job_args)
    if "pipeline" in args.only:
        report["pipeline"] = measure_pipeline(args.pipeline_steps)
    publish(args.results_dir, "cores", report, to_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
