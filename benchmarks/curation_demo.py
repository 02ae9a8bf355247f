"""The curation demo (``bash scripts/main.sh --curation``) timed, and what it decided.

``bash scripts/bench.sh --curation [HYDRA OVERRIDES]`` (or ``python -m
benchmarks.curation_demo``) runs the demo's sweep, ``zephon-run --config-name curation``, in a
scratch folder (so no earlier run answers a job: every run trains), after waiting up to 2 min
for the machine to be quiet, and records its wall time, its process tree's CPU time, the CPU
other processes used meanwhile, the guard's table (bits per byte per domain and variant), what
the filter removed per run and the decisions. Results:
``benchmarks/results/curation_demo.{json,md}``.
Design: docs/curation.md ("The preset")
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import provenance
from benchmarks.publish import RESULTS, publish
from benchmarks.timing import machine_busy_seconds
from benchmarks.training import wait_quiet

FILTERED_DATASET = "docs"
"""The dataset the demo filters (conf/curation.yaml)."""
PAIR_FIELDS = (
    "a_mixture",
    "b_mixture",
    "difference",
    "interval",
    "p_value",
    "decision",
    "method",
    "next_step",
)
"""What the report keeps of each decided pair."""


def run_demo(work: Path, args: list[str]) -> dict[str, Any]:
    """Run the demo's sweep in ``work``; its times and the guard's verdict (sweep.json)."""
    load = wait_quiet()
    command = [str(Path(sys.executable).parent / "zephon-run"), "--config-name", "curation", *args]
    busy_before = machine_busy_seconds()
    start = time.monotonic()
    with (work / "curation.log").open("w") as log:
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    busy_after = machine_busy_seconds()
    own = usage.ru_utime + usage.ru_stime
    other = (
        None
        if busy_before is None or busy_after is None
        else max(0.0, 100 * (busy_after - busy_before - own) / (wall * (os.cpu_count() or 1)))
    )
    found = sorted(work.glob("multirun/*/*/sweep.json"))
    verdict = json.loads(found[-1].read_text()).get("comparison") or {} if found else {}
    return {
        "command": command,
        "exit_status": os.waitstatus_to_exitcode(status),
        "load_before_percent": load,
        "other_load_percent": None if other is None else round(other, 1),
        "wall_s": round(wall, 1),
        "user_s": round(usage.ru_utime, 1),
        "system_s": round(usage.ru_stime, 1),
        **summary(verdict),
        "log": str(work / "curation.log"),
    }


def summary(verdict: dict[str, Any]) -> dict[str, Any]:
    """What the report keeps of the guard's verdict (``compare --json``'s shape)."""
    rows = verdict.get("rows") or []
    runs = {run: row["mixture"] for row in rows for run in row["runs"]}
    read: dict[str, dict[str, list[int]]] = {}
    for run, datasets in (verdict.get("data_read") or {}).items():
        counts = datasets.get(FILTERED_DATASET)
        if counts and run in runs:
            removed = sum(n for step, n in counts["removed"].items() if step != "decontaminate")
            entry = read.setdefault(runs[run], {"records_read": [], "filtered_out": []})
            entry["records_read"].append(counts["records_read"])
            entry["filtered_out"].append(removed)
    return {
        "accepted": verdict.get("accepted"),
        "domains": verdict.get("domains") or [],
        "decided_on": verdict.get("decided_on") or [],
        "design": verdict.get("design"),
        "variants": [
            {
                "variant": row["mixture"],
                "seeds": row["seeds"],
                "dp_sizes": row["dp_sizes"],
                "bpb": row["bpb"],
                "aggregate_bpb": row["aggregate_bpb"],
                "tier": row["tier"],
                "best": row["best"],
                FILTERED_DATASET: read.get(row["mixture"], {}),
            }
            for row in rows
        ],
        "decisions": [{k: pair.get(k) for k in PAIR_FIELDS} for pair in verdict.get("pairs") or []],
        "seed_sd": {
            entry["yardstick"]: max(entry["seed_sd"].values())
            for entry in verdict.get("signal_noise") or []
            if str(entry.get("yardstick", "")).startswith("bpb:") and entry.get("seed_sd")
        },
        "refusals": [r.get("message") for r in verdict.get("refusals") or []],
    }


def to_markdown(report: dict[str, Any]) -> str:
    """The tables of ``report``."""
    d = report["demo"]
    other = d["other_load_percent"]
    lines = [
        f"The curation demo on {report['cpu']} ({report['machine']}), {report['date']}: "
        f"`{report['command']}` at commit {report['commit']}.",
        "",
        f"**{d['wall_s']:.0f} s wall** ({d['wall_s'] / 60:.1f} min), {d['user_s']:.0f} s user "
        f"and {d['system_s']:.0f} s system CPU, exit status {d['exit_status']}; other processes "
        + ("not measured." if other is None else f"used {other:.0f}% of the machine meanwhile."),
    ]
    if d["refusals"]:
        lines += ["", "Refused: " + "; ".join(d["refusals"])]
    if d["variants"]:
        domains = d["domains"]
        lines += [
            "",
            f"Bits per byte at the last step, means over seeds; decided on "
            f"{', '.join(d['decided_on']) or 'the mean of every domain'} ({d['design']} design). "
            f"`{FILTERED_DATASET}` read and filtered out: per run, in seed order.",
            "",
            "| variant | seeds | dp sizes | "
            + " | ".join(f"{x} bpb" for x in domains)
            + f" | tier | {FILTERED_DATASET} read | filtered out |",
            "|---|---:|---|" + "---:|" * len(domains) + "---|---|---|",
        ]
        for v in d["variants"]:
            read = v.get(FILTERED_DATASET) or {}
            lines.append(
                f"| {v['variant']} | {v['seeds']} | {v['dp_sizes']} | "
                + " | ".join(f"{v['bpb'][x]:.4f}" for x in domains)
                + f" | {v['tier']}{' best' if v['best'] else ''} | "
                f"{', '.join(map(str, read.get('records_read', [])))} | "
                f"{', '.join(map(str, read.get('filtered_out', [])))} |"
            )
    if d["decisions"]:
        lines += [
            "",
            "| a | b | a - b | 95% interval | p | decision |",
            "|---|---|---:|---|---:|---|",
            *(
                f"| {p['a_mixture']} | {p['b_mixture']} | {p['difference']:+.4f} | "
                f"[{p['interval'][0]:+.4f}, {p['interval'][1]:+.4f}] | {p['p_value']:.3g} | "
                f"{p['decision']} |"
                for p in d["decisions"]
            ),
            "",
            f"Method: {'; '.join(sorted({p['method'] for p in d['decisions']}))}.",
            *(f"Next step: {p['next_step']}" for p in d["decisions"] if p.get("next_step")),
        ]
    if d["seed_sd"]:
        lines += [
            "",
            "Seed standard deviation of the noisiest variant per yardstick: "
            + ", ".join(f"{k} {v:.4f}" for k, v in sorted(d["seed_sd"].items()) if v is not None)
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """The ``benchmarks.curation_demo`` command (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="benchmarks.curation_demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--work-dir", type=Path, help="scratch folder (default: a temp dir)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the demo")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="zephon-bench-curation-"))
    work.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["bash", "scripts/bench.sh", "--curation", *(argv or sys.argv[1:])])
    report = {**provenance(command, ("torch", "torchtitan", "datatrove")), "demo": {}}
    report["demo"] = run_demo(work, args.overrides)
    publish(args.results_dir, "curation_demo", report, to_markdown(report))
    return 0 if report["demo"]["exit_status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
