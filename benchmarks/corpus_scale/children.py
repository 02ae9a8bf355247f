"""The measured child processes: one first batch (or one metadata pass) in a fresh process."""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.corpus_scale.corpora import (
    AHEAD_JOIN_S,
    AHEAD_THREAD,
    STDERR_TAIL,
    Corpus,
    generate,
)
from benchmarks.machine import REPO_ROOT
from benchmarks.noise import NoiseGuard
from benchmarks.timing import machine_busy_seconds
from pipeline import Dataset, Pipeline, WorkSource


def generate_child(started: float, params_file: str) -> None:
    """``generate`` in a child (``params_file``: the corpus's fields and ``root``)."""
    params = json.loads(Path(params_file).read_text())
    root = Path(params.pop("root"))
    print(json.dumps(generate(Corpus(**params), root)), flush=True)


# -- the child: one first batch in a fresh process -----------------------------------------

CHILD_CODE = (
    "import sys, time; started = time.perf_counter(); "
    "import benchmarks.corpus_scale.children as m; getattr(m, sys.argv[1])(started, sys.argv[2])"
)
"""A child's command (``python -c CHILD_CODE FUNCTION PARAMS_FILE``): its clock starts
before any import (this module's own, the pipeline's among them). Generating corpora and
timing metadata run in children too, so this process holds no more than a child's imports:
on Linux a child's ``ru_maxrss`` starts at its parent's peak RSS (it
survives fork and exec), which would hide the child's own below it."""


def _status_kb(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process from ``/proc/self/status``, KB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _io_counters() -> dict[str, int]:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def child(started: float, params_file: str) -> None:
    """Build the lane pipeline over one corpus with one order (``params_file``: JSON with
    ``paths``, ``cache_dir``, ``order``), take its first batch and print one JSON line of
    measurements (``started``: ``time.perf_counter()`` before any import)."""

    params = json.loads(Path(params_file).read_text())
    imported = time.perf_counter()
    baseline_kb = _status_kb("VmRSS")
    io_imported = _io_counters()
    ds = Dataset("web", params["paths"], cache_dir=params["cache_dir"])
    source = WorkSource([ds], {"web": 1.0}, seed=0, holdout_bytes=16384, order=params["order"])
    pipe = (
        Pipeline(source)
        .options(lanes=8, dp_rank=0, dp_size=1)
        .tokenize(tokenizer_id="gpt2", field="text")
        .pack_flat(max_length=128)
        .shuffle(buffer_size=16, seed=0)
        .batch(microbatch_size=8, global_batch_size=8)
    )
    built = time.perf_counter()
    it = iter(pipe)
    batch = next(it)
    first = time.perf_counter()
    io_first = _io_counters()
    rss_first_kb = _status_kb("VmRSS")
    peak_kb = _status_kb("VmHWM")  # this process's own peak (ru_maxrss: see CHILD_CODE)
    max_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_anon_kb, rss_file_kb = _status_kb("RssAnon"), _status_kb("RssFile")
    report = ds.report()
    # Measured; now let v2's look-ahead finish the next window before closing (close()
    # stops it at its next shard), so the cache a warm child finds is that of a run past
    # its first batch.
    ahead = [t for t in threading.enumerate() if t.name == AHEAD_THREAD]
    for thread in ahead:
        thread.join(AHEAD_JOIN_S)
    ahead_s = time.perf_counter() - first
    pipe.close()
    result = {
        "time_to_first_batch_s": round(first - started, 3),
        "imports_s": round(imported - started, 3),
        "build_s": round(built - imported, 3),
        "iter_to_first_batch_s": round(first - built, 3),
        "baseline_rss_mb": round(baseline_kb / 1024, 1),
        "rss_at_first_batch_mb": round(rss_first_kb / 1024, 1),
        "max_rss_mb": round(peak_kb / 1024, 1),
        "max_rss_above_baseline_mb": round((peak_kb - baseline_kb) / 1024, 1),
        "ru_maxrss_mb": round(max_rss_kb / 1024, 1),
        "rss_anon_at_first_batch_mb": round(rss_anon_kb / 1024, 1),
        "rss_file_at_first_batch_mb": round(rss_file_kb / 1024, 1),
        "rchar_mb": round(io_first.get("rchar", 0) / 2**20, 1),
        "read_bytes_mb": round(io_first.get("read_bytes", 0) / 2**20, 1),
        "rchar_after_imports_mb": round(
            (io_first.get("rchar", 0) - io_imported.get("rchar", 0)) / 2**20, 1
        ),
        "shards_indexed": report["shards_indexed"],
        "num_shards": ds.num_shards,
        "records_indexed": report["records"],
        "look_ahead_threads": len(ahead),
        "look_ahead_finished_s": round(ahead_s, 2),
        "shards_indexed_after_look_ahead": ds.report()["shards_indexed"],
        "sequences": len(batch.sequences),
        "loadavg_1min": float(Path("/proc/loadavg").read_text().split()[0]),
    }
    print(json.dumps(result), flush=True)


def run_child(params_file: Path, timeout_s: float, function: str = "child") -> dict[str, Any]:
    """One child (``CHILD_CODE`` running ``function``); its JSON line, or ``{"ok": False,
    "status": ..., "error": ...}``."""
    command = [sys.executable, "-c", CHILD_CODE, function, str(params_file)]
    busy = machine_busy_seconds()
    mine = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "status": "timed out", "error": f"timed out after {timeout_s:.0f} s"}
    wall = time.perf_counter() - began
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        out = {"ok": True, **json.loads(lines[-1]), "child_wall_s": round(wall, 2)}
        now, after = machine_busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN)
        if busy is not None and now is not None:
            own = (after.ru_utime + after.ru_stime) - (mine.ru_utime + mine.ru_stime)
            other = max(0.0, (now - busy) - own) / (wall * (os.cpu_count() or 1))
            out["other_load_percent"] = round(100 * other, 1)
        return out
    status = f"killed (signal {-proc.returncode})" if proc.returncode < 0 else "failed"
    return {
        "ok": False,
        "status": status,
        "error": f"exit code {proc.returncode}: {proc.stderr[-STDERR_TAIL:].strip()}",
    }


def measure_order(
    corpus: Corpus, order: str, root: Path, timeout_s: float, warm_reps: int, quiet: NoiseGuard
) -> dict[str, Any]:
    """Cold (the order's cache dir emptied) then ``warm_reps`` warm children; warm figures
    are the medians of the warm runs."""
    cache = root / corpus.name / f"cache-{order}"
    params = root / corpus.name / f"child-{order}.json"
    params.write_text(
        json.dumps(
            {
                "paths": [str(p) for p in corpus.shard_paths(root)],
                "cache_dir": str(cache),
                "order": order,
            }
        )
    )

    def cold_run() -> dict[str, Any]:
        shutil.rmtree(cache, ignore_errors=True)
        return run_child(params, timeout_s)

    cold = quiet.measure(cold_run)
    result: dict[str, Any] = {"cold": cold}
    if not cold["ok"]:
        result["warm"] = {"ok": False, "status": "not run", "error": "the cold run failed"}
        return result
    runs = [quiet.measure(lambda: run_child(params, timeout_s)) for _ in range(warm_reps)]
    good = [r for r in runs if r["ok"]]
    if not good:
        result["warm"] = runs[-1]
        return result
    warm = dict(good[-1])
    for key, value in good[0].items():
        if isinstance(value, float) and key != "loadavg_1min":
            warm[key] = round(statistics.median(r[key] for r in good), 3)
    warm["reps"] = len(good)
    warm["time_to_first_batch_s_runs"] = [r["time_to_first_batch_s"] for r in good]
    result["warm"] = warm
    return result


# -- metadata cost (for the extrapolation) -------------------------------------------------


def metadata_child(started: float, params_file: str) -> None:
    """``measure_metadata`` in a child (``params_file``: the corpus's fields and ``root``)."""
    params = json.loads(Path(params_file).read_text())
    root = Path(params.pop("root"))
    print(json.dumps(measure_metadata(Corpus(**params), root)), flush=True)


def in_child(function: str, corpus: Corpus, root: Path, timeout_s: float) -> dict[str, Any]:
    """``generate_child`` or ``metadata_child`` of ``corpus`` in a fresh process."""
    params = root / f"{corpus.name}.{function}.json"
    params.write_text(json.dumps({**asdict(corpus), "root": str(root)}))
    try:
        return run_child(params, timeout_s, function)
    finally:
        params.unlink(missing_ok=True)


def measure_metadata(corpus: Corpus, root: Path, reps: int = 5) -> dict[str, Any]:
    """Seconds to construct a ``Dataset`` over ``corpus`` (resolving its paths) and to take
    ``shard_metadata()`` (one stat per shard) and the manifest fingerprint; medians."""
    paths = [str(p) for p in corpus.shard_paths(root)]
    timings: dict[str, list[float]] = {"construct_s": [], "shard_metadata_s": [], "manifest_s": []}
    for _ in range(reps):
        began = time.perf_counter()
        ds = Dataset("web", paths, cache_dir=root / corpus.name / "cache-metadata")
        constructed = time.perf_counter()
        ds.shard_metadata()
        stated = time.perf_counter()
        _ = ds.manifest_fingerprint
        fingerprinted = time.perf_counter()
        timings["construct_s"].append(constructed - began)
        timings["shard_metadata_s"].append(stated - constructed)
        timings["manifest_s"].append(fingerprinted - stated)
    medians = {k: statistics.median(v) for k, v in timings.items()}
    return {
        "corpus": corpus.name,
        "shards": corpus.shards,
        "reps": reps,
        **{k: round(v, 5) for k, v in medians.items()},
        **{f"{k[:-2]}_us_per_shard": round(v / corpus.shards * 1e6, 2) for k, v in medians.items()},
    }


# -- the plan, the goals, the extrapolation ------------------------------------------------
