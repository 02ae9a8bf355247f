"""The goals met or missed, and the extrapolation to 1B records in 100,000 shards."""

from __future__ import annotations

from typing import Any

from benchmarks.corpus_scale.corpora import (
    GOAL_SCALE,
    RSS_GOAL_MB,
    TIME_GOAL_RATIO,
    WARM_GOAL_S,
    count_label,
    window_shards,
)


def run_ok(run: dict[str, Any] | None) -> bool:
    return bool(run and run.get("ok"))


def evaluate_goals(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Goals (a), (b), (c) and the v1 / v2 ratios, from the scale corpora's runs."""
    short = sorted(
        (m for m in measured if m["role"] == "scale" and m["kind"] == "short" and "orders" in m),
        key=lambda m: m["records"],
    )
    goals: dict[str, Any] = {}
    v2 = [m for m in short if "v2" in m["orders"]]
    if len(v2) >= 2:
        small, large = v2[0], v2[-1]
        for mode in ("warm", "cold"):
            a, b = small["orders"]["v2"][mode], large["orders"]["v2"][mode]
            if run_ok(a) and run_ok(b):
                ratio = b["time_to_first_batch_s"] / a["time_to_first_batch_s"]
                goals[f"a_{mode}"] = {
                    "smallest": small["corpus"],
                    "largest": large["corpus"],
                    "smallest_s": a["time_to_first_batch_s"],
                    "largest_s": b["time_to_first_batch_s"],
                    "ratio": round(ratio, 2),
                    "goal": TIME_GOAL_RATIO,
                    "met": ratio <= TIME_GOAL_RATIO,
                }
            else:
                goals[f"a_{mode}"] = {"met": None, "note": "a v2 run failed"}
    rss = [
        (m["corpus"], mode, m["orders"]["v2"][mode]["max_rss_above_baseline_mb"])
        for m in measured
        if m["role"] == "scale" and "v2" in m.get("orders", {})
        for mode in ("cold", "warm")
        if run_ok(m["orders"]["v2"][mode])
    ]
    if rss:
        worst = max(rss, key=lambda r: r[2])
        goals["b"] = {
            "runs": [{"corpus": c, "mode": mode, "mb": mb} for c, mode, mb in rss],
            "worst": {"corpus": worst[0], "mode": worst[1], "mb": worst[2]},
            "goal_mb": RSS_GOAL_MB,
            "met": all(mb <= RSS_GOAL_MB for _, _, mb in rss),
        }
    at_goal = [m for m in v2 if m["records"] == GOAL_SCALE]
    if at_goal and run_ok(at_goal[0]["orders"]["v2"]["warm"]):
        seconds = at_goal[0]["orders"]["v2"]["warm"]["time_to_first_batch_s"]
        goals["c"] = {
            "corpus": at_goal[0]["corpus"],
            "seconds": seconds,
            "goal_s": WARM_GOAL_S,
            "met": seconds < WARM_GOAL_S,
        }
    else:
        goals["c"] = {"met": None, "note": f"v2 was not measured at {count_label(GOAL_SCALE)}"}
    ratios = []
    for m in measured:
        orders = m.get("orders", {})
        if "v1" not in orders or "v2" not in orders:
            continue
        row: dict[str, Any] = {"corpus": m["corpus"]}
        for mode in ("cold", "warm"):
            one, two = orders["v1"][mode], orders["v2"][mode]
            if not (run_ok(one) and run_ok(two)):
                continue
            for key in (
                "time_to_first_batch_s",
                "max_rss_above_baseline_mb",
                "shards_indexed",
                "rchar_mb",
            ):
                row[f"{mode}_{key}"] = round(one[key] / two[key], 2) if two[key] else None
        ratios.append(row)
    goals["ratios_v1_over_v2"] = ratios
    return goals


def _through(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """The line through ``(x0, y0)`` and ``(x1, y1)`` at ``x`` (``y1`` when ``x1 == x0``)."""
    return y1 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def extrapolate(measured: list[dict[str, Any]], metadata: list[dict[str, Any]]) -> dict[str, Any]:
    """1B records in 100,000 shards, from the v2 measurements (the model in the report)."""
    target_records, target_shards = 10**9, 100_000
    per_shard = target_records // target_shards
    window = window_shards(target_shards)
    out: dict[str, Any] = {
        "target": {"records": target_records, "shards": target_shards},
        "records_per_shard": per_shard,
        "window_shards": window,
        "window_records": window * per_shard,
        "metadata": metadata,
    }

    def v2_runs(m: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
        runs = m.get("orders", {}).get("v2")
        if runs and run_ok(runs["cold"]) and run_ok(runs["warm"]):
            return runs["cold"], runs["warm"]
        return None

    scale = [m for m in measured if m["role"] == "scale" and m["kind"] == "short" and v2_runs(m)]
    if scale:
        big = max(scale, key=lambda m: (m["shards"], m["records"]))
        cold, warm = v2_runs(big)  # type: ignore[misc]
        seconds = max(0.0, cold["time_to_first_batch_s"] - warm["time_to_first_batch_s"])
        per_record_s = seconds / max(1, cold["records_indexed"])
        out["cold_index"] = {
            "from": big["corpus"],
            "us_per_record": round(per_record_s * 1e6, 3),
            "records_indexed": cold["records_indexed"],
            "shards_indexed": cold["shards_indexed"],
            "window_shards": window_shards(big["shards"]),
        }
        # Shards indexed by a cold first batch, in windows (the window, what the look-ahead
        # reached, the held-out and calibration shards), as at the most shards measured.
        windows = cold["shards_indexed"] / window_shards(big["shards"])
        records = round(windows * window) * per_shard
        probe = next((m for m in measured if m["role"] == "probe" and v2_runs(m)), None)
        if probe is not None:
            _, p_warm = v2_runs(probe)  # type: ignore[misc]
            shards = (big["shards"], probe["shards"], target_shards)
            warm_s = _through(
                shards[0],
                warm["time_to_first_batch_s"],
                shards[1],
                p_warm["time_to_first_batch_s"],
                shards[2],
            )
            rss = _through(
                shards[0],
                warm["max_rss_above_baseline_mb"],
                shards[1],
                p_warm["max_rss_above_baseline_mb"],
                shards[2],
            )
            out["from_probe"] = probe["corpus"]
            how = (
                f"warm time and RSS: the line through {big['corpus']} and the probe "
                f"{probe['corpus']} (by shard count) at {target_shards:,} shards"
                + (
                    " (the probe's own figures: it has the target's shards)"
                    if shards[1] == shards[2]
                    else ""
                )
            )
        else:
            meta = max(metadata, key=lambda m: m["shards"]) if metadata else None
            meta_s = 0.0
            if meta:
                meta_s = (
                    sum(
                        meta[f"{k}_us_per_shard"]
                        for k in ("construct", "shard_metadata", "manifest")
                    )
                    / 1e6
                )
            warm_s = warm["time_to_first_batch_s"] + (target_shards - big["shards"]) * meta_s
            rss = None
            how = (
                f"warm time: {big['corpus']}'s + the extra shards x the measured construct + "
                "stat + manifest cost a shard (no probe: memory not extrapolated)"
            )
        extra_rss = max(0.0, cold["max_rss_above_baseline_mb"] - warm["max_rss_above_baseline_mb"])
        out["model"] = (
            f"{how}; cold time = warm + the records a cold first batch indexes ({windows:.2f} "
            f"windows, as at {big['corpus']}: {records:,} records) x the cold cost a record; "
            f"cold RSS = warm + {big['corpus']}'s cold - warm difference (transient index "
            f"building of shards of {big['records'] // big['shards']:,} records, an upper bound "
            f"for shards of {per_shard:,})."
        )
        out["predicted"] = {
            "warm_first_batch_s": round(warm_s, 2),
            "cold_first_batch_s": round(warm_s + records * per_record_s, 2),
            "cold_records_indexed": records,
        }
        if rss is not None:
            out["predicted"]["warm_max_rss_above_baseline_mb"] = round(rss, 0)
            out["predicted"]["cold_max_rss_above_baseline_mb"] = round(rss + extra_rss, 0)
    v1 = [
        m
        for m in measured
        if m["role"] == "scale" and run_ok(m.get("orders", {}).get("v1", {}).get("cold"))
    ]
    if v1:
        top = max(v1, key=lambda m: m["records"])
        c1, w1 = top["orders"]["v1"]["cold"], top["orders"]["v1"]["warm"]
        factor = target_records / top["records"]
        # What does not grow with records (tokenizer, threads): the least v2 needed above
        # its baseline anywhere.
        fixed = min(
            (v2_runs(m)[1]["max_rss_above_baseline_mb"] for m in measured if v2_runs(m)),
            default=0.0,
        )

        def linear(run: dict[str, Any]) -> float:
            """Imports once, the rest x ``factor``."""
            return run["imports_s"] + (run["time_to_first_batch_s"] - run["imports_s"]) * factor

        rss_mb = max(c1["max_rss_above_baseline_mb"], w1.get("max_rss_above_baseline_mb", 0.0))
        out["v1"] = {
            "from": top["corpus"],
            "cold_first_batch_s": round(linear(c1), 0),
            "warm_first_batch_s": round(linear(w1), 0) if run_ok(w1) else None,
            "max_rss_above_baseline_gb": round((fixed + (rss_mb - fixed) * factor) / 1024, 1),
            "model": "v1 indexes (and hashes) every record before the first batch and holds "
            f"O(records) arrays: {top['corpus']}'s time after the imports and its RSS above "
            f"baseline beyond v2's least ({fixed:.0f} MB) x {factor:g}",
        }
    return out


# -- the report ----------------------------------------------------------------------------
