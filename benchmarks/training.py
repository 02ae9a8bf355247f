"""Training speed on this machine: seconds per step per precision, and the main job's wall time.

``bash scripts/bench.sh --training [--steps N] [--reps N] [--main-job]`` (or ``python -m
benchmarks.training``) trains ``zephon_debug`` once per precision (auto, float32, bfloat16)
in each round, the order rotated (target: ``auto`` within 10% of the faster forced
precision); ``--main-job`` also times the main job.
Results: ``benchmarks/results/training.{json,md}``.
Design: docs/design/benchmarks_training.md
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import provenance
from benchmarks.noise import POLL_S, QUIET_PERCENT, machine_load_percent
from benchmarks.publish import RESULTS, publish
from demo.local_corpus import build_local_corpus
from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder
from orchestrator.machine.precision import cpu_model
from orchestrator.run import api

PRECISIONS = ("auto", "float32", "bfloat16")
AUTO_TARGET = 1.10
"""``auto`` s/step over the faster forced precision's: at most this."""
MAIN_JOB_TARGET_S = 240.0
"""The main job (``bash scripts/main.sh``) on 2 cores: under this (docs/benchmarks.md)."""
REPLICATE_RANGE_TARGET = 1e-3
"""Largest range of a variant's aggregate held-out bits/byte across its dp 1 and dp 2
replicates of one seed in the main job: at most this (one recipe, one initial checkpoint
per seed)."""
VARIANT_FIELDS = (
    "mixture",
    "dp_sizes",
    "seeds",
    "aggregate_bpb",
    "dp_range",
    "aggregate_range",
    "tier",
    "best",
)
"""What the main job's report keeps of each row of the guard's table."""
CORPUS_BYTES_PER_DOMAIN = 300_000
QUIET_WAIT_S = 120.0


def wait_quiet(limit_s: float = QUIET_WAIT_S) -> float | None:
    """Wait (at most ``limit_s``) for the machine's CPU use to fall to ``QUIET_PERCENT``;
    return the last load seen."""
    end = time.monotonic() + limit_s
    load = machine_load_percent()
    while load is not None and load > QUIET_PERCENT and time.monotonic() < end:
        time.sleep(POLL_S)
        load = machine_load_percent()
    return load


def experiment(corpus: dict[str, list[Path]], work: Path, precision: str, steps: int) -> dict:
    """The measured experiment: the debug model at dp 1, nothing but training."""
    return {
        "name": "bench",
        "runs_root": str(work / "runs"),
        "data": {
            "datasets": {name: [str(p) for p in paths] for name, paths in corpus.items()},
            "holdout_bytes": 0,
            "cache_dir": str(work / "cache"),
        },
        "train": {"steps": steps, "precision": precision, "checkpoint_interval": steps},
        "eval": {"enable": False},
        "resources": {"dp": 1},
    }


def seconds_per_step(folder: Path) -> list[float]:
    """TorchTitan's end-to-end seconds of every step after the first."""
    metrics = RunFolder(folder).metrics()
    return [
        float(m["time_metrics/end_to_end_s"])
        for step, m in sorted(metrics.items())
        if step > 1 and "time_metrics/end_to_end_s" in m
    ]


def measure_precisions(work: Path, steps: int, reps: int) -> dict[str, Any]:
    """Every precision ``reps`` times, order rotated per round (design doc)."""
    corpus = build_local_corpus(work / "corpus", max_bytes_per_domain=CORPUS_BYTES_PER_DOMAIN)
    samples: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    runs: list[dict[str, Any]] = []
    for rep in range(reps):
        order = PRECISIONS[rep % 3 :] + PRECISIONS[: rep % 3]
        for precision in order:
            load = wait_quiet()
            start = time.monotonic()
            result = api.run(
                experiment(corpus, work, precision, steps),
                run_name=f"{precision}-{rep}",
                tracking=False,
                progress=sys.stderr,
                fresh=True,  # each repetition trains
            )
            if result.status != RunStatus.SUCCEEDED:
                raise RuntimeError(f"{precision} run {result.status}: {result.messages}")
            per_step = seconds_per_step(Path(result.folder))
            samples[precision] += per_step
            resolved = RunFolder(result.folder).experiment().precision
            runs.append(
                {
                    "precision": precision,
                    "resolved": resolved,
                    "round": rep,
                    "load_before_percent": load,
                    "wall_s": round(time.monotonic() - start, 1),
                    "seconds_per_step": per_step,
                }
            )
            print(f"[bench] {precision}: {statistics.median(per_step):.2f} s/step", flush=True)
    median = {p: statistics.median(v) for p, v in samples.items()}
    faster = min(median["float32"], median["bfloat16"])
    return {
        "steps_per_run": steps,
        "rounds": reps,
        "seconds_per_step": median,
        "auto_resolves_to": sorted({r["resolved"] for r in runs if r["precision"] == "auto"}),
        "auto_over_faster": median["auto"] / faster,
        "auto_target_met": median["auto"] / faster <= AUTO_TARGET,
        "runs": runs,
    }


def least_gain(rows: list[dict[str, Any]]) -> float | None:
    """The smallest share of a held-out domain's initial bits per byte (step 0) that training
    removed, over every variant and domain of the guard's table (None: no step-0 scores)."""
    gains = [
        1.0 - row["bpb"][domain] / start
        for row in rows
        for domain, start in (row.get("initial_bpb") or {}).items()
        if start
    ]
    return min(gains, default=None)


def measure_main_job(
    work: Path, args: list[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The main job's wall time and its process tree's CPU time (``os.wait4``); ``env`` adds
    to this process's environment."""
    load = wait_quiet()
    command = [str(Path(sys.executable).parent / "zephon-run"), "--config-name", "main", *args]
    start = time.monotonic()
    with (work / "main-job.log").open("w") as log:
        process = subprocess.Popen(
            command,
            cwd=work,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    comparison = _load_comparison(work)
    rows = list(comparison.get("rows") or [])
    ranges = [row["dp_range"] for row in rows]
    scores = sorted(row["aggregate_bpb"] for row in rows)
    return {
        "command": command,
        "exit_status": os.waitstatus_to_exitcode(status),
        "load_before_percent": load,
        "wall_s": round(wall, 1),
        "user_s": round(usage.ru_utime, 1),
        "system_s": round(usage.ru_stime, 1),
        "target_s": MAIN_JOB_TARGET_S,
        "target_met": wall < MAIN_JOB_TARGET_S and status == 0,
        "variants": [{k: row[k] for k in VARIANT_FIELDS} for row in rows],
        "largest_replicate_range": max(ranges, default=None),
        "smallest_variant_gap": min((b - a for a, b in itertools.pairwise(scores)), default=None),
        "least_gain": least_gain(rows),
        "replicate_range_target": REPLICATE_RANGE_TARGET,
        "replicate_range_target_met": bool(ranges) and max(ranges) < REPLICATE_RANGE_TARGET,
        "decisions": [
            {k: pair[k] for k in ("a_mixture", "b_mixture", "difference", "interval", "decision")}
            for pair in comparison.get("pairs") or []
        ],
        "method": sorted({pair["method"] for pair in comparison.get("pairs") or []}),
        "eval_seconds": _eval_seconds(work),
        "log": str(work / "main-job.log"),
    }


def _load_comparison(work: Path) -> dict[str, Any]:
    """The guard's verdict on the main job's sweep (``multirun/*/*/sweep.json``); {} if none."""
    found = sorted(work.glob("multirun/*/*/sweep.json"))
    if not found:
        return {}
    return json.loads(found[-1].read_text()).get("comparison") or {}


def _eval_seconds(work: Path) -> list[float]:
    """Seconds of every held-out evaluation of the main job's runs."""
    return [
        float(record["seconds"])
        for path in sorted(work.glob("runs/*/titan/zephon/eval.jsonl"))
        for record in map(json.loads, path.read_text().splitlines())
        if "seconds" in record
    ]


def to_markdown(report: dict[str, Any]) -> str:
    """The tables of ``report``."""
    machine = report["machine"]
    lines = [
        f"Training speed on {machine['cpu']} ({machine['cores']} cores, torch CPU "
        f"capability {machine['capability']}), {report['date']}: `{report['command']}` at "
        f"commit {report['commit']}.",
        "",
    ]
    if "precision" in report:
        p = report["precision"]
        lines += [
            f"`zephon_debug` at dp 1, {p['steps_per_run']} steps a run, {p['rounds']} round(s); "
            "median seconds per step after the first:",
            "",
            "| precision | s/step |",
            "|---|---:|",
        ]
        for name, value in p["seconds_per_step"].items():
            resolved = f" (resolved: {', '.join(p['auto_resolves_to'])})" if name == "auto" else ""
            lines.append(f"| {name}{resolved} | {value:.2f} |")
        verdict = "met" if p["auto_target_met"] else "missed"
        lines += [
            "",
            f"auto / faster forced precision: **{p['auto_over_faster']:.2f}** "
            f"(target <= {AUTO_TARGET:.2f}: {verdict})",
        ]
    if "main_job" in report:
        m = report["main_job"]
        verdict = "met" if m["target_met"] else "missed"
        lines += [
            "",
            f"Main job (`bash scripts/main.sh`): **{m['wall_s']:.0f} s wall** (target < "
            f"{m['target_s']:.0f} s: {verdict}), {m['user_s']:.0f} s user and "
            f"{m['system_s']:.0f} s system CPU, exit status {m['exit_status']}.",
        ]
        if m["variants"]:
            verdict = "met" if m["replicate_range_target_met"] else "missed"
            lines += [
                "",
                "| mixture | dp sizes | seeds | aggregate bpb | dp range (one seed) | range over "
                "seeds | tier |",
                "|---|---|---:|---:|---:|---:|---:|",
                *(
                    f"| {v['mixture']} | {v['dp_sizes']} | {v['seeds']} | "
                    f"{v['aggregate_bpb']:.4f} | {v['dp_range']:.1e} | "
                    f"{v['aggregate_range']:.4f} | {v['tier']}{' best' if v['best'] else ''} |"
                    for v in m["variants"]
                ),
                "",
                f"Largest replicate range **{m['largest_replicate_range']:.1e}** bits/byte "
                f"(target < {m['replicate_range_target']:.0e}: {verdict}); smallest gap between "
                f"variants {m['smallest_variant_gap']:.4f}"
                + (
                    "."
                    if m.get("least_gain") is None
                    else f"; training removed at least {m['least_gain']:.0%} of every domain's "
                    "initial bits per byte, in every variant."
                ),
            ]
        if m.get("decisions"):
            lines += [
                "",
                "| a | b | a - b | 95% interval | decision |",
                "|---|---|---:|---|---|",
                *(
                    f"| {d['a_mixture']} | {d['b_mixture']} | {d['difference']:+.4f} | "
                    f"[{d['interval'][0]:+.4f}, {d['interval'][1]:+.4f}] | {d['decision']} |"
                    for d in m["decisions"]
                ),
                "",
                f"Method: {'; '.join(m['method'])}.",
            ]
        if m.get("eval_seconds"):
            evals = m["eval_seconds"]
            lines += [
                "",
                f"Held-out evaluation: {len(evals)} evals, {min(evals):.1f}-{max(evals):.1f} s "
                f"each (median {statistics.median(evals):.1f} s).",
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The ``benchmarks.training`` command (design doc)."""
    parser = argparse.ArgumentParser(prog="benchmarks.training", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per precision run")
    parser.add_argument("--reps", type=int, default=1, help="rounds over the precisions")
    parser.add_argument("--main-job", action="store_true", help="also time the main job")
    parser.add_argument("--skip-precisions", action="store_true", help="only the main job")
    parser.add_argument("--work-dir", type=Path, help="scratch folder (default: a temp dir)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("main_job_args", nargs="*", help="Hydra overrides for the main job")
    args = parser.parse_args(argv)
    # A temporary scratch folder goes with the run; a --work-dir stays for its owner.
    with contextlib.ExitStack() as scratch:
        if args.work_dir is None:
            work = Path(
                scratch.enter_context(tempfile.TemporaryDirectory(prefix="zephon-bench-training-"))
            )
        else:
            work = args.work_dir
            work.mkdir(parents=True, exist_ok=True)
        return _measure(args, argv, work)


def _measure(args: argparse.Namespace, argv: list[str] | None, work: Path) -> int:
    """Measure what ``args`` ask for in ``work`` and publish it."""
    import torch  # deferred: torch, which benchmarks.cores (importing this module) never needs

    command = shlex.join(["bash", "scripts/bench.sh", "--training", *(argv or sys.argv[1:])])
    report: dict[str, Any] = {
        **provenance(command, ("torch", "torchtitan")),
        "machine": {
            "cpu": cpu_model(),
            "cores": len(os.sched_getaffinity(0)),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
    }
    if not args.skip_precisions:
        report["precision"] = measure_precisions(work, args.steps, args.reps)
    if args.main_job or args.skip_precisions:
        report["main_job"] = measure_main_job(work, args.main_job_args)
    # A main-job-only run keeps the last precision measurement: it goes to its own files.
    stem = "training-main-job" if args.skip_precisions else "training"
    publish(args.results_dir, stem, report, to_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
