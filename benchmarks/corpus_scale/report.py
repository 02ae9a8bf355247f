"""The corpus-scale report as Markdown."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from benchmarks.corpus_scale.corpora import (
    GOAL_SCALE,
    RSS_GOAL_MB,
    TIME_GOAL_RATIO,
    WARM_GOAL_S,
    count_label,
    window_shards,
)
from benchmarks.corpus_scale.goals import run_ok
from benchmarks.machine import describe_machine
from benchmarks.noise import NOISY_PERCENT, QUIET_PERCENT


def _cell(run: dict[str, Any], key: str, fmt: str) -> str:
    if not run_ok(run):
        return "—"
    return format(run[key], fmt)


def run_status(run: dict[str, Any]) -> str:
    return f"{run.get('status', 'failed')}: {run.get('error', '')[:300]}"


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**missed**")


def to_markdown(report: dict[str, Any]) -> str:
    """Tables per corpus, the goals, the ratios, the extrapolation."""
    lines = [
        "# Corpus scale: time to the first batch, order v1 against v2\n",
        f"{report['date']} · {report['machine']} · {report['wall_s']:.0f} s · "
        f"`{report['command']}`\n",
        "Each cell is one fresh child process building the lane pipeline (8 lanes, gpt2, "
        "sequences of 128, shuffle buffer 16, global batch 8, `holdout_bytes=16384`) over the "
        "corpus and taking its first batch. *Cold*: the order's cache dir emptied first; "
        f"*warm*: the same cache dir again (median of {report['warm_reps']} children). Time: "
        "from the child's first statement (before imports) to the first batch. Max RSS: the "
        "child's peak RSS (`VmHWM`; `getrusage`'s `ru_maxrss`, in the JSON, would do as well "
        "here only because this process stays small: on Linux a child's `ru_maxrss` starts "
        "at its parent's peak). RSS above baseline: that peak minus the RSS right after the "
        "imports. Read: "
        "`/proc/self/io` `rchar` (bytes the process read through syscalls, imports "
        "included) and `read_bytes` (from storage; the corpora were in the OS page cache, "
        "so cold means Zephon's cache empty, not the OS's). Shards indexed: "
        "`ds.report()['shards_indexed']` at the first batch (v2's look-ahead thread may "
        "have indexed some of the next window by then). After its measurements a child waits "
        "for v2's look-ahead thread to finish the next window (it would be killed at exit), "
        "so a warm child finds the cache of a run that got past its first batch; a cold "
        "child's shards are hashed and indexed once, by it. The machine is shared: before "
        f"each child the run waits until it is at most {QUIET_PERCENT:.0f}% busy, and runs a "
        f"child again when other processes used more than {NOISY_PERCENT:.0f}% of it meanwhile "
        f"(budget {report['noise']['budget_s']:.0f} s, spent {report['noise']['spent_s']:.0f} s; "
        "'other load' below).\n",
    ]
    for m in report["corpora"]:
        title = f"## {m['corpus']}"
        if m["role"] == "probe":
            title += " (probe for the extrapolation)"
        lines.append(
            f"{title}\n\n{m['records']:,} {m['kind']} records in {m['shards']:,} shards, "
            f"{m.get('bytes', 0) / 2**30:.2f} GiB"
            + (
                f" (generated in {m['generation']['seconds']:.0f} s)"
                if m.get("generation", {}).get("generated")
                else " (reused)"
                if "generation" in m
                else ""
            )
            + f"; v2's first window: {window_shards(m['shards'])} shards.\n"
        )
        if "skipped" in m:
            lines.append(f"Not run: {m['skipped']}\n")
            continue
        orders = m["orders"]
        header = "| | " + " | ".join(f"{o} cold | {o} warm" for o in orders) + " |"
        lines += [header, "|---|" + "---:|" * (2 * len(orders))]
        rows = [
            ("time to first batch (s)", "time_to_first_batch_s", ".2f"),
            ("  of which imports (s)", "imports_s", ".2f"),
            ("max RSS (MB)", "max_rss_mb", ".0f"),
            ("RSS above baseline (MB)", "max_rss_above_baseline_mb", ".0f"),
            ("read, rchar (MB)", "rchar_mb", ".1f"),
            ("read from storage (MB)", "read_bytes_mb", ".1f"),
            ("other load (% of the machine)", "other_load_percent", ".0f"),
        ]
        for label, key, fmt in rows:
            cells = [_cell(orders[o][mode], key, fmt) for o in orders for mode in ("cold", "warm")]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        cells = [
            f"{orders[o][mode]['shards_indexed']:,} / {orders[o][mode]['num_shards']:,}"
            if run_ok(orders[o][mode])
            else "—"
            for o in orders
            for mode in ("cold", "warm")
        ]
        lines.append("| shards indexed / total | " + " | ".join(cells) + " |")
        cells = [
            f"{orders[o][mode]['rss_anon_at_first_batch_mb']:.0f} / "
            f"{orders[o][mode]['rss_file_at_first_batch_mb']:.0f}"
            if run_ok(orders[o][mode])
            else "—"
            for o in orders
            for mode in ("cold", "warm")
        ]
        lines.append(
            "| RSS at first batch, anonymous / file-backed (MB) | " + " | ".join(cells) + " |"
        )
        lines.append("")
        for o in orders:
            for mode in ("cold", "warm"):
                if not run_ok(orders[o][mode]):
                    lines.append(f"* {o} {mode}: {run_status(orders[o][mode])}")
        for o, note in m.get("not_run", {}).items():
            lines.append(f"* {o}: not run: {note}")
        lines.append("")
    g = report["goals"]
    lines.append("## Goals\n")
    for mode in ("warm", "cold"):
        a = g.get(f"a_{mode}")
        if a and a.get("met") is not None:
            lines.append(
                f"* (a, {mode}) v2 time to first batch at the largest scale within "
                f"{TIME_GOAL_RATIO}x of the smallest: {a['largest']} {a['largest_s']:.2f} s / "
                f"{a['smallest']} {a['smallest_s']:.2f} s = **{a['ratio']:.2f}x**: "
                f"{verdict(a['met'])}"
            )
        else:
            lines.append(f"* (a, {mode}): not measured ({(a or {}).get('note', 'one scale')})")
    b = g.get("b")
    if b:
        lines.append(
            f"* (b) v2 max RSS above baseline at most {RSS_GOAL_MB:.0f} MB at every scale: worst "
            f"**{b['worst']['mb']:.0f} MB** ({b['worst']['corpus']}, {b['worst']['mode']}): "
            f"{verdict(b['met'])}"
        )
    c = g["c"]
    if c.get("met") is not None:
        lines.append(
            f"* (c) v2 warm time to first batch under {WARM_GOAL_S:.0f} s at "
            f"{count_label(GOAL_SCALE)} records: **{c['seconds']:.2f} s**: {verdict(c['met'])}"
        )
    else:
        lines.append(f"* (c): not measured ({c['note']})")
    lines.append("")
    if g["ratios_v1_over_v2"]:
        keys = [
            ("time_to_first_batch_s", "time"),
            ("max_rss_above_baseline_mb", "RSS above baseline"),
            ("shards_indexed", "shards indexed"),
            ("rchar_mb", "read"),
        ]
        lines += [
            "### v1 / v2\n",
            "| corpus | "
            + " | ".join(f"{mode} {label}" for mode in ("cold", "warm") for _, label in keys)
            + " |",
            "|---|" + "---:|" * (2 * len(keys)),
        ]
        for row in g["ratios_v1_over_v2"]:
            cells = []
            for mode in ("cold", "warm"):
                for key, _ in keys:
                    value = row.get(f"{mode}_{key}")
                    cells.append("—" if value is None else f"{value:.2f}x")
            lines.append(f"| {row['corpus']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(extrapolation_markdown(report["extrapolation"]))
    return "\n".join(lines)


def extrapolation_markdown(x: dict[str, Any]) -> str:
    """The extrapolation section."""
    t = x["target"]
    lines = [
        f"## Extrapolation: {count_label(t['records'])} records in {t['shards']:,} shards\n",
        "The model: v2 indexes one window of 64 to 127 shards (plus the held-out and "
        "calibration shards) before the first batch and one window ahead in the background; "
        "its plan holds O(shards) integers (the shard permutation of the current epochs, the "
        "per-shard paths and metadata), never O(records). So a cold first batch costs the "
        "records of one window (records per shard x window) and the warm one the per-shard "
        "work (path resolution, one stat, the manifest), and memory grows with shards. "
        f"At {t['shards']:,} shards a shard holds {x['records_per_shard']:,} records and the "
        f"first window is {x['window_shards']} shards ({x['window_records']:,} records).\n",
    ]
    if x.get("metadata"):
        lines += [
            "Per-shard work, measured (median of 5 in this process; µs a shard in brackets):\n",
            "| corpus | `Dataset(...)` (resolve paths) | `shard_metadata()` (a stat a shard) "
            f"| `manifest_fingerprint` | all three at {t['shards']:,} shards |",
            "|---|---:|---:|---:|---:|",
        ]
        for m in x["metadata"]:
            per = sum(m[f"{k}_us_per_shard"] for k in ("construct", "shard_metadata", "manifest"))
            lines.append(
                f"| {m['corpus']} | {m['construct_s'] * 1e3:.1f} ms ({m['construct_us_per_shard']:.1f}) "
                f"| {m['shard_metadata_s'] * 1e3:.1f} ms ({m['shard_metadata_us_per_shard']:.1f}) "
                f"| {m['manifest_s'] * 1e3:.1f} ms ({m['manifest_us_per_shard']:.1f}) "
                f"| {per * t['shards'] / 1e6:.2f} s |"
            )
        lines.append("")
    ci = x.get("cold_index")
    if ci:
        lines.append(
            f"Cold indexing, from {ci['from']}: (cold - warm time) / records indexed by the "
            f"first batch = **{ci['us_per_record']:.2f} µs a record** ({ci['records_indexed']:,} "
            f"records in {ci['shards_indexed']} shards; its first window is "
            f"{ci['window_shards']} shards).\n"
        )
    if "predicted" in x:
        p = x["predicted"]
        if "from_probe" in x:
            lines.append(f"Measured at many shards: {x['from_probe']} (its table above).\n")
        lines.append(f"Model: {x['model']}\n")
        lines += [
            f"| v2 at {count_label(t['records'])} records, {t['shards']:,} shards | predicted |",
            "|---|---:|",
            f"| warm time to first batch | {p['warm_first_batch_s']:.1f} s |",
            f"| cold time to first batch | {p['cold_first_batch_s']:.1f} s |",
            f"| records indexed by the first batch (cold) | {p['cold_records_indexed']:,} |",
        ]
        if "warm_max_rss_above_baseline_mb" in p:
            lines += [
                f"| warm RSS above baseline | {p['warm_max_rss_above_baseline_mb']:.0f} MB |",
                f"| cold RSS above baseline | {p['cold_max_rss_above_baseline_mb']:.0f} MB |",
            ]
        lines.append("")
    v1 = x.get("v1")
    if v1:
        lines.append(
            f"v1 at 1B records ({v1['model']}): cold **{v1['cold_first_batch_s']:.0f} s**, warm "
            + (
                f"**{v1['warm_first_batch_s']:.0f} s**"
                if v1["warm_first_batch_s"] is not None
                else "not measured"
            )
            + f", **{v1['max_rss_above_baseline_gb']:.1f} GB** above baseline.\n"
        )
    return "\n".join(lines)


# -- the command ---------------------------------------------------------------------------


def machine_line() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {describe_machine(['numpy', 'tiktoken'])}, {memory:.0f} GiB RAM"
