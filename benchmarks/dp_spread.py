"""Spread of held-out scores across dp sizes: TorchTitan's stock loader vs the lane pipeline.

The original study trained one model from scratch on 8/16/32/64 GPUs with the standard
loader and with lane-based loading and compared the spread of eval scores across GPU
counts (0.82 vs 0.05 points on one benchmark, 0.64 vs 0.011 on another) with the re-run
noise of the eval. This is the same design at small scale, on CPU::

    for loader in (stock, zephon), dp in (1, 2, 4):
        torchrun --nproc-per-node dp ... --config {loader}_dp_spread    (from scratch)
            same model (zephon_debug: llama3 debugmodel, gpt2 vocabulary), optimizer,
            lr schedule, seed, seq len 128, global batch 8 (local batch 8 / dp), steps,
            corpus text (the training records of the same WorkSource)
        at the last step: the held-out evaluator, twice (scores; re-run noise)
    per loader: held-out bits/byte per domain and aggregate per dp, spread across dp
                (max - min), eval re-run noise, and whether each step's global batch is
                the same on every dp size

Same text for both loaders. The corpus is :mod:`demo.local_corpus`; Zephon's
``WorkSource`` (holdout bytes > 0) splits it into held-out and training records. The
stock loader reads a JSON dataset of the *training* records only, in a seeded random
order (written once by :func:`prepare`); Zephon's mixture is each domain's natural token
share of those records, so both read the same distribution. Both are scored by
``HeldOutEvaluator`` on the same held-out records (``benchmarks.dp_spread_configs``).

Global batches. Zephon: ``titan/zephon/steps.jsonl`` global digests, per step. Both:
each rank records the sha256 of every sequence it hands to the trainer; a step's global
batch is the multiset of its ranks' sequences, compared across dp sizes.

``python -m benchmarks.dp_spread`` (or ``bash scripts/bench.sh --dp-spread``) writes
``benchmarks/results/dp_spread.json``, ``docs/dp_spread.md`` and ``docs/dp_spread.png``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.experiment.runfolder import read_jsonl
from orchestrator.run.launch import CPU_MALLOC_ENV, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
LOADERS = ("stock", "zephon")
CONFIGS = {"stock": "stock_dp_spread", "zephon": "zephon_dp_spread"}
LABELS = {"stock": "TorchTitan stock loader", "zephon": "Zephon lane loader"}
STEPS = 40
DPS = (1, 2, 4)
CORPUS_BYTES = 300_000
"""Text bytes per domain of the corpus (~400k gpt2 tokens in all; a run trains on ~41k)."""
HOLDOUT_BYTES = 12_288
"""Held-out bytes per domain (the evaluation text)."""
SHUFFLE_SEED = 0
"""Seed of the stock JSON dataset's row order."""
GLOBAL_BATCH = 8
SEQ_LEN = 128
LAUNCH_TIMEOUT_S = 1200
OMP_THREADS = 1
STUDY = (
    {"benchmark": "benchmark A", "stock": 0.82, "lanes": 0.05},
    {"benchmark": "benchmark B", "stock": 0.64, "lanes": 0.011},
)
"""The original study's spread of eval scores (points) across 8/16/32/64 GPUs."""


def _progress(message: str) -> None:
    print(f"[dp-spread] {message}", file=sys.stderr, flush=True)


# -- preparation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """The corpus, the data flags of both loaders and what the training text holds."""

    domains: dict[str, list[str]]
    """Domain -> shard paths."""
    mixture: dict[str, float]
    """Natural token share of each domain's training records (Zephon's mixture)."""
    stock_dataset: str
    """Folder of the stock loader's ``train.json`` (training records, shuffled)."""
    cache_dir: str
    holdout_bytes: int
    records: dict[str, dict[str, int]]
    """Domain -> {"train", "heldout"} record counts."""
    tokens: dict[str, int]
    """Domain -> gpt2 tokens of its training records (no EOS)."""
    heldout_bytes_actual: dict[str, int]

    def data_flags(self, prefix: str) -> list[str]:
        """``--<prefix>.*`` flags of the Zephon data settings (the WorkSource)."""
        datasets = [
            x for name in sorted(self.domains) for x in (name, ",".join(self.domains[name]))
        ]
        mixture = [x for name in sorted(self.mixture) for x in (name, repr(self.mixture[name]))]
        return [
            f"--{prefix}.datasets",
            *datasets,
            f"--{prefix}.mixture",
            *mixture,
            f"--{prefix}.holdout-bytes",
            str(self.holdout_bytes),
            f"--{prefix}.cache-dir",
            self.cache_dir,
        ]


def prepare(work_dir: Path, corpus_bytes: int, holdout_bytes: int) -> Prepared:
    """Build the corpus, split it with Zephon's WorkSource, write the stock JSON dataset."""
    from demo.local_corpus import build_local_corpus
    from orchestrator.titan.dataloader import ZephonDataLoader, build_pipeline
    from pipeline import load_tokenizer

    corpus = build_local_corpus(work_dir / "corpus", max_bytes_per_domain=corpus_bytes)
    domains = {name: [str(p) for p in paths] for name, paths in sorted(corpus.items())}
    cache_dir = str(work_dir / "index-cache")
    config = ZephonDataLoader.Config(
        datasets={name: ",".join(paths) for name, paths in domains.items()},
        holdout_bytes=holdout_bytes,
        cache_dir=cache_dir,
        lanes=4,
        global_batch_size=GLOBAL_BATCH,
    )
    source = build_pipeline(
        config,
        tokenizer="gpt2",
        dp_world_size=1,
        dp_rank=0,
        seq_len=SEQ_LEN,
        microbatch_size=GLOBAL_BATCH,
    ).source
    tokenizer = load_tokenizer("gpt2")
    texts: list[str] = []
    tokens, records, heldout_bytes = {}, {}, {}
    for d, ds in enumerate(source.datasets):
        train, held = source.training_records(d), source.heldout_records(d)
        assert not np.intersect1d(train, held).size, "held-out records in the training set"
        assert len(train) + len(held) == ds.num_records
        domain_texts = ds.read_texts(train)
        held_texts = set(ds.read_texts(held))
        # A training record with the very text of a held-out one would leak it.
        domain_texts = [t for t in domain_texts if t not in held_texts]
        tokens[ds.name] = sum(len(ids) for ids in tokenizer.encode_batch(domain_texts))
        records[ds.name] = {"train": len(domain_texts), "heldout": len(held)}
        heldout_bytes[ds.name] = sum(len(t.encode()) for t in held_texts)
        texts += domain_texts
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(texts))
    content = "".join(json.dumps({"text": texts[i]}) + "\n" for i in order).encode()
    folder = work_dir / "stock-json"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.json"
    if not path.is_file() or path.read_bytes() != content:  # keep HF's cache valid otherwise
        path.write_bytes(content)
    total = sum(tokens.values())
    return Prepared(
        domains=domains,
        mixture={name: round(n / total, 6) for name, n in tokens.items()},
        stock_dataset=str(folder),
        cache_dir=cache_dir,
        holdout_bytes=holdout_bytes,
        records=records,
        tokens=tokens,
        heldout_bytes_actual=heldout_bytes,
    )


# -- launches ---------------------------------------------------------------------------------


def _env(work_dir: Path) -> dict[str, str]:
    return {
        **CPU_MALLOC_ENV,
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HOME": str(work_dir / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(work_dir / "inductor"),
        # One thread per process on every dp size: the same kernels' arithmetic per process,
        # and no OpenMP spin-waiting when processes outnumber cores (dp 4 on 2 cores).
        "OMP_NUM_THREADS": str(OMP_THREADS),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
    }


def _torchrun(
    work_dir: Path, folder: Path, config: str, dp: int, args: list[str], what: str
) -> float:
    """Run ``orchestrator.titan.train`` under torchrun; the seconds it took. Log: ``folder``."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--master-port={free_port()}",
        "--nproc-per-node",
        str(dp),
        "-m",
        "orchestrator.titan.train",
        "--module",
        "benchmarks.dp_spread_configs",
        "--config",
        config,
        "--dump-folder",
        str(folder / "titan"),
        "--comm.train-timeout-seconds",
        "900",  # 4 processes on 2 cores: a step can take seconds
        *args,
    ]
    log = folder / "launch.log"
    started = time.monotonic()
    with log.open("w") as out:
        out.write(shlex.join(command) + "\n")
        out.flush()
        agent = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=_env(work_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a time-out kills the workers too
        )
        try:
            code = agent.wait(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
            code = -signal.SIGKILL
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        raise RuntimeError(f"{what} failed (exit {code}); {log}:\n{tail}")
    return time.monotonic() - started


def _fresh(folder: Path) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def seed_checkpoint(work_dir: Path, prepared: Prepared) -> str:
    """TorchTitan's seed checkpoint (model only, step 0), made on 1 process: every run loads
    it, so all start from the same weights (``--debug.seed`` alone initialises the sharded
    model differently on each dp size on CPU)."""
    folder = _fresh(work_dir / "runs" / "seed")
    _torchrun(
        work_dir,
        folder,
        CONFIGS["zephon"],
        1,
        [
            *("--dataloader.record-dir", str(folder), *prepared.data_flags("dataloader")),
            *("--checkpoint.enable", "--checkpoint.create-seed-checkpoint"),
            "--checkpoint.last-save-model-only",
        ],
        "creating the seed checkpoint",
    )
    path = folder / "titan" / "checkpoint" / "step-0"
    assert path.is_dir(), f"no seed checkpoint at {path}"
    return str(path)


def launch(
    work_dir: Path, prepared: Prepared, loader: str, dp: int, steps: int, seed: str | None
) -> dict[str, Any]:
    """Train ``loader`` from scratch on ``dp`` processes; return the run's folder and time."""
    folder = _fresh(work_dir / "runs" / f"{loader}-dp{dp}")
    data = (
        prepared.data_flags("dataloader")
        if loader == "zephon"
        else ["--dataloader.dataset-path", prepared.stock_dataset, *prepared.data_flags("heldout")]
    )
    init = (
        []
        if seed is None
        else [
            "--checkpoint.enable",
            "--checkpoint.load-only",
            "--checkpoint.initial-load-path",
            seed,
        ]
    )
    args = [
        "--dataloader.record-dir",
        str(folder),
        "--training.steps",
        str(steps),
        "--training.local-batch-size",
        str(GLOBAL_BATCH // dp),
        "--metrics.log-freq",
        "1",
        *init,
        *data,
    ]
    seconds = _torchrun(work_dir, folder, CONFIGS[loader], dp, args, f"{loader} dp {dp}")
    return {"folder": str(folder), "seconds": seconds, "omp_threads": OMP_THREADS}


# -- results of one run -----------------------------------------------------------------------


def _step_batches(folder: Path, dp: int, steps: int) -> list[list[str]]:
    """Per step, the sorted sequence hashes of the global batch (all ranks' pulls)."""
    per_rank = [read_jsonl(folder / f"rows.dp{rank}.jsonl") for rank in range(dp)]
    pulls = {len(p) for p in per_rank}
    assert len(pulls) == 1, f"{folder}: ranks made different numbers of pulls: {pulls}"
    per_step = pulls.pop() // steps
    assert per_step * steps == len(per_rank[0]), f"{folder}: pulls do not divide into steps"
    batches = []
    for step in range(steps):
        rows = [
            row
            for records in per_rank
            for record in records[step * per_step : (step + 1) * per_step]
            for row in record["rows"]
        ]
        assert len(rows) == GLOBAL_BATCH, f"{folder}: step {step + 1} has {len(rows)} sequences"
        batches.append(sorted(rows))
    return batches


def collect(run: dict[str, Any], loader: str, dp: int, steps: int) -> dict[str, Any]:
    """Scores, eval repeats, per-step global batches and final loss of one finished run."""
    folder = Path(run["folder"])
    zephon_dir = folder / "titan" / "zephon"
    evals = [r for r in read_jsonl(zephon_dir / "eval.jsonl") if r["step"] == steps]
    assert len(evals) >= 2, f"{folder}: expected 2 evaluations at step {steps}, got {len(evals)}"
    first, second = evals[0], evals[1]
    noise = {d: abs(second["bpb"][d] - first["bpb"][d]) for d in first["bpb"]}
    noise["aggregate"] = abs(second["aggregate_bpb"] - first["aggregate_bpb"])
    batches = _step_batches(folder, dp, steps)
    losses = {
        r["step"]: r["loss_metrics/global_avg_loss"]
        for r in read_jsonl(zephon_dir / "metrics.jsonl")
        if "loss_metrics/global_avg_loss" in r
    }
    result = {
        **run,
        "loader": loader,
        "dp": dp,
        "bpb": first["bpb"],
        "aggregate_bpb": first["aggregate_bpb"],
        "eval_repeat": {"bpb": second["bpb"], "aggregate_bpb": second["aggregate_bpb"]},
        "eval_noise": noise,
        "eval_tokens": first["tokens"],
        "eval_bytes": first["bytes"],
        "final_loss": losses.get(steps),
        # The stock loader warns when a rank's share of the dataset runs out and restarts.
        "stock_data_relooped": "is being re-looped" in (folder / "launch.log").read_text(),
        "losses": [losses.get(s) for s in range(1, steps + 1)],
        "batch_digests": [hashlib.sha256("".join(rows).encode()).hexdigest() for rows in batches],
        "_batches": batches,
    }
    if loader == "zephon":
        records = {r["step"]: r["global_digest"] for r in read_jsonl(zephon_dir / "steps.jsonl")}
        result["zephon_digests"] = [records.get(s) for s in range(1, steps + 1)]
    return result


# -- analysis ---------------------------------------------------------------------------------


def _spread(values: list[float]) -> float:
    return max(values) - min(values)


def analyse(runs: dict[str, list[dict[str, Any]]], steps: int) -> dict[str, Any]:
    """Per loader: scores, spreads across dp, eval noise, global batch agreement."""
    summary: dict[str, Any] = {}
    for loader, results in runs.items():
        domains = sorted(results[0]["bpb"])
        reference = results[0]
        agreement = {}
        for other in results[1:]:
            same_step = sum(
                a == b for a, b in zip(reference["_batches"], other["_batches"], strict=True)
            )
            ref_rows = Counter(r for rows in reference["_batches"] for r in rows)
            other_rows = Counter(r for rows in other["_batches"] for r in rows)
            shared = sum((ref_rows & other_rows).values())
            entry = {
                "steps_with_same_global_batch": same_step,
                "sequences_shared_at_any_step": shared / sum(ref_rows.values()),
            }
            if loader == "zephon":
                entry["steps_with_same_zephon_digest"] = sum(
                    a is not None and a == b
                    for a, b in zip(
                        reference["zephon_digests"], other["zephon_digests"], strict=True
                    )
                )
            agreement[f"dp{reference['dp']}_vs_dp{other['dp']}"] = entry
        all_agree = all(e["steps_with_same_global_batch"] == steps for e in agreement.values())
        if loader == "zephon":
            all_agree = all_agree and all(
                e["steps_with_same_zephon_digest"] == steps for e in agreement.values()
            )
        aggregates = [r["aggregate_bpb"] for r in results]
        summary[loader] = {
            "dps": [r["dp"] for r in results],
            "aggregate_bpb": aggregates,
            "bpb": {d: [r["bpb"][d] for r in results] for d in domains},
            "first_loss": [r["losses"][0] for r in results],
            "final_loss": [r["final_loss"] for r in results],
            "spread": {
                "aggregate": _spread(aggregates),
                **{d: _spread([r["bpb"][d] for r in results]) for d in domains},
            },
            "eval_noise": {
                key: max(r["eval_noise"][key] for r in results) for key in ["aggregate", *domains]
            },
            "global_batches_agree": all_agree,
            "agreement": agreement,
        }
    stock, zephon = summary.get("stock"), summary.get("zephon")
    if stock and zephon:
        z = zephon["spread"]["aggregate"]
        summary["spread_ratio"] = stock["spread"]["aggregate"] / z if z > 0 else None
    return summary


# -- outputs ----------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _machine() -> str:
    versions = ", ".join(f"{p} {_version(p)}" for p in ("torch", "torchtitan", "datasets"))
    return f"{os.cpu_count()} CPUs (gloo), Python {platform.python_version()}, {versions}"


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}" if abs(x) < 1e-3 else f"{x:.4f}"


def plot(report: dict[str, Any], path: Path) -> None:
    """Aggregate bpb per dp for both loaders (eval noise band), and the spreads per domain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    colors = {"stock": "#d62728", "zephon": "#1f77b4"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8), width_ratios=[1.1, 1])
    for loader in LOADERS:
        s = summary[loader]
        dps, agg = s["dps"], s["aggregate_bpb"]
        noise = s["eval_noise"]["aggregate"]
        left.plot(dps, agg, "o-", color=colors[loader], lw=2, label=LABELS[loader])
        low, high = np.array(agg) - noise, np.array(agg) + noise
        left.fill_between(dps, low, high, color=colors[loader], alpha=0.2, lw=0)
        left.annotate(
            f"spread {_fmt(s['spread']['aggregate'])}",
            (dps[-1], agg[-1]),
            textcoords="offset points",
            xytext=(8, 0),
            va="center",
            color=colors[loader],
            fontsize=9,
        )
    left.set_xscale("log", base=2)
    left.set_xticks(summary["stock"]["dps"], [str(d) for d in summary["stock"]["dps"]])
    left.set_xlim(left.get_xlim()[0], left.get_xlim()[1] * 1.6)
    left.set_xlabel("data-parallel processes (dp)")
    left.set_ylabel("held-out bits per byte (mean of domains)")
    noises = [summary[k]["eval_noise"]["aggregate"] for k in LOADERS]
    noise_text = (
        "0 for both: bit-identical re-runs"
        if not any(noises)
        else ", ".join(f"{k} {_fmt(n)}" for k, n in zip(LOADERS, noises, strict=True))
    )
    dps_text = "/".join(map(str, summary["stock"]["dps"]))
    left.set_title(
        f"Same model and initial weights, {report['meta']['steps']} steps, on dp {dps_text}\n"
        f"band: eval re-run noise ({noise_text})",
        fontsize=10,
    )
    left.grid(alpha=0.3)

    keys = ["aggregate", *sorted(summary["stock"]["bpb"])]
    x = np.arange(len(keys))
    floor = 1e-7  # a spread of exactly 0 still shows on the log axis
    for i, loader in enumerate(LOADERS):
        values = [max(summary[loader]["spread"][k], floor) for k in keys]
        bars = right.bar(
            x + (i - 0.5) * 0.38, values, 0.38, color=colors[loader], label=LABELS[loader]
        )
        for bar, k in zip(bars, keys, strict=True):
            right.annotate(
                _fmt(summary[loader]["spread"][k]),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                textcoords="offset points",
                xytext=(0, 2),
                ha="center",
                fontsize=7,
            )
    right.set_yscale("log")
    right.set_xticks(x, keys)
    right.set_ylabel("spread across dp (max - min bits/byte)")
    ratio = summary.get("spread_ratio")
    ratio_text = f"stock / Zephon = {ratio:.0f}x" if ratio else "Zephon spread 0"
    right.set_title(f"Spread of the score across dp sizes ({ratio_text})", fontsize=10)
    right.grid(alpha=0.3, axis="y")
    right.set_ylim(top=right.get_ylim()[1] * 3)  # room for the labels
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _verdict(summary: dict[str, Any]) -> str:
    stock, zephon = summary["stock"], summary["zephon"]
    s, z = stock["spread"]["aggregate"], zephon["spread"]["aggregate"]
    ratio = summary.get("spread_ratio")
    study = ", ".join(f"{b['stock'] / b['lanes']:.0f}x" for b in STUDY)
    if ratio is None:
        size = "Zephon's aggregate score did not move at all across dp sizes"
    elif ratio >= 5:
        size = (
            f"Zephon's spread is {ratio:.0f}x smaller than the stock loader's (the study: {study})"
        )
    elif ratio >= 1.5:
        size = (
            f"Zephon's spread is only {ratio:.1f}x smaller than the stock loader's, less of a gap "
            f"than the study's {study}"
        )
    else:
        size = (
            f"Zephon's spread is not smaller than the stock loader's in this run (ratio "
            f"{ratio:.2f}; the study: {study}): at this scale the float-order differences "
            "dominate whatever the data order adds"
        )
    noise = max(stock["eval_noise"]["aggregate"], zephon["eval_noise"]["aggregate"])
    noise_text = (
        "The evaluation itself is bit-for-bit repeatable here (re-run noise 0: deterministic "
        "CPU kernels), so every difference in the table comes from training, not from the eval."
        if noise == 0
        else f"The eval's re-run noise is at most {_fmt(noise)} bits/byte."
    )
    dps = "/".join(map(str, stock["dps"]))
    first = ""
    if None not in zephon["first_loss"] + stock["first_loss"]:
        z1 = _spread(zephon["first_loss"])
        first = (
            " Zephon's step-1 training loss, on the same batch from the same weights, is "
            + ("bit-identical across dp sizes" if z1 == 0 else f"within {_fmt(z1)} (float order)")
            + f"; the stock loader's, on different batches, differs by "
            f"{_fmt(_spread(stock['first_loss']))}."
        )
    return (
        f"Across dp {dps}, the stock loader's aggregate held-out score spreads over "
        f"{_fmt(s)} bits/byte, Zephon's over {_fmt(z)}: {size}. {noise_text}{first}"
    )


def to_markdown(report: dict[str, Any]) -> str:
    summary, meta = report["summary"], report["meta"]
    domains = sorted(summary["stock"]["bpb"])
    lines = [
        "# Score spread across dp sizes: stock loader vs lane loader",
        "",
        "<!-- generated by benchmarks/dp_spread.py; do not edit by hand -->",
        "",
        "![aggregate held-out bits/byte per dp size, and the spread across dp sizes](dp_spread.png)",
        "",
        _verdict(summary),
        "",
        "## Held-out bits per byte (lower is better)",
        "",
        "| loader | dp | " + " | ".join(domains) + " | aggregate | step-1 loss | final loss |",
        "|---|---|" + "---|" * len(domains) + "---|---|---|",
    ]
    for loader in LOADERS:
        s = summary[loader]
        for i, dp in enumerate(s["dps"]):
            cells = [f"{s['bpb'][d][i]:.4f}" for d in domains]
            losses = " | ".join(
                "" if x is None else f"{x:.6f}" for x in (s["first_loss"][i], s["final_loss"][i])
            )
            lines.append(
                f"| {LABELS[loader]} | {dp} | "
                + " | ".join(cells)
                + f" | **{s['aggregate_bpb'][i]:.4f}** | {losses} |"
            )
        spread = [_fmt(s["spread"][d]) for d in domains]
        lines.append(
            f"| {LABELS[loader]} | spread (max - min) | "
            + " | ".join(spread)
            + f" | **{_fmt(s['spread']['aggregate'])}** | | |"
        )
        noise = [_fmt(s["eval_noise"][d]) for d in domains]
        lines.append(
            f"| {LABELS[loader]} | eval re-run noise | "
            + " | ".join(noise)
            + f" | {_fmt(s['eval_noise']['aggregate'])} | | |"
        )
    ratio = summary.get("spread_ratio")
    lines += [
        "",
        "## Spread across dp sizes, next to the study",
        "",
        "| | stock | lanes | stock / lanes |",
        "|---|---|---|---|",
    ]
    for b in STUDY:
        lines.append(
            f"| study, {b['benchmark']} (eval points, 8/16/32/64 GPUs) | {b['stock']} | "
            f"{b['lanes']} | {b['stock'] / b['lanes']:.0f}x |"
        )
    lines.append(
        f"| here, aggregate held-out bits/byte (dp {'/'.join(map(str, summary['stock']['dps']))}) | "
        f"{_fmt(summary['stock']['spread']['aggregate'])} | "
        f"{_fmt(summary['zephon']['spread']['aggregate'])} | "
        f"{'n/a (Zephon 0)' if ratio is None else f'{ratio:.0f}x' if ratio >= 10 else f'{ratio:.1f}x'} |"
    )
    lines += [
        "",
        "The study's numbers are eval-score points of a large model on real benchmarks; "
        f"these are bits per byte of a 31M-parameter model after {meta['steps']} steps. Only the "
        "ratios, and the spread next to the eval's noise, carry over.",
        "",
        "## Global batches per step",
        "",
        "| loader | pair | steps with the same global batch | share of the first run's sequences "
        "the second trained on at some step |",
        "|---|---|---|---|",
    ]
    for loader in LOADERS:
        s = summary[loader]
        for pair, e in s["agreement"].items():
            same = f"{e['steps_with_same_global_batch']} of {meta['steps']}"
            if loader == "zephon":
                same += (
                    f" (Zephon digests: {e['steps_with_same_zephon_digest']} of {meta['steps']})"
                )
            lines.append(
                f"| {LABELS[loader]} | {pair.replace('_vs_', ' vs ')} | {same} | "
                f"{e['sequences_shared_at_any_step']:.0%} |"
            )
    lines += [
        "",
        f"Same global batches on every dp size: stock "
        f"**{'yes' if summary['stock']['global_batches_agree'] else 'no'}**, Zephon "
        f"**{'yes' if summary['zephon']['global_batches_agree'] else 'no'}**.",
        "",
        "## Method",
        "",
        f"* **Runs.** For each loader and dp in {meta['dps']}: `torchrun --nproc-per-node dp` "
        f"on CPU (gloo), TorchTitan {meta['versions']['torchtitan']}, from scratch, "
        f"{meta['steps']} steps, global batch {GLOBAL_BATCH} sequences of {SEQ_LEN} tokens "
        f"(local batch {GLOBAL_BATCH} / dp, no gradient accumulation). Model, optimizer, lr "
        "schedule (warm-up 2, linear decay), seed 42 and tokenizer (gpt2) are "
        "`zephon_debug`'s for both loaders (`benchmarks/dp_spread_configs.py`): TorchTitan's "
        "llama3 debugmodel with the gpt2 vocabulary. One OpenMP thread per process.",
        "* **Initial weights.** "
        + (
            "Every run loads one TorchTitan seed checkpoint (`--checkpoint.create-seed-checkpoint` "
            "on 1 process, model only; `--checkpoint.initial-load-path`), TorchTitan's way to "
            "start all parallelisms from the same weights. With `--debug.seed` alone, TorchTitan "
            "0.3.0 on CPU initialises the FSDP-sharded model differently on each dp size "
            "(it warns that DTensor's `manual_seed` may not have complete support on CPU "
            "meshes; while building this benchmark, the step-1 loss on the identical first "
            "batch was 11.29 on dp 1 and 11.42 on dp 2), which adds an init difference to both "
            "loaders' spread (`--no-seed-checkpoint` shows it)."
            if meta["seed_checkpoint"]
            else "`--debug.seed 42` only (`--no-seed-checkpoint`): on CPU, TorchTitan 0.3.0 "
            "initialises the FSDP-sharded model differently on each dp size, so both spreads "
            "include an init difference."
        ),
        f"* **Corpus.** `demo.local_corpus` capped at {meta['corpus_bytes_per_domain']:,} "
        f"text bytes per domain. Zephon's `WorkSource` with `holdout_bytes={meta['holdout_bytes']}` "
        "chooses each domain's held-out records (by dataset name alone); training records: "
        + ", ".join(
            f"{d} {meta['records'][d]['train']} ({meta['tokens'][d]:,} tokens)" for d in domains
        )
        + "; held out: "
        + ", ".join(
            f"{d} {meta['records'][d]['heldout']} ({meta['heldout_bytes'][d]:,} bytes)"
            for d in domains
        )
        + ".",
        "* **Stock loader.** TorchTitan's `HuggingFaceTextDataLoader`, unchanged, reading a "
        "local JSON dataset of the training records only, rows in a seeded random order "
        "(written once; a map-style dataset is read in file order in its first epoch and "
        "split into contiguous blocks per dp rank). "
        + (
            "A rank's share ran out and restarted in: "
            + ", ".join(r for r in meta["relooped"])
            + "."
            if meta["relooped"]
            else "No rank reaches the end of its share of the data."
        ),
        "* **Zephon.** The lane pipeline (4 lanes, shuffle buffer 16), mixture = each "
        "domain's natural token share of the training records ("
        + ", ".join(f"{d} {meta['mixture'][d]:.3f}" for d in domains)
        + "), so both loaders draw from the same distribution.",
        "* **Scores.** `HeldOutEvaluator` at the last step, on the same held-out records for "
        "both loaders (for the stock runs a trainer subclass builds the `WorkSource` only to "
        "evaluate): bits per byte per domain, aggregate = their mean. It runs twice in a row "
        "on the final model; the difference is the *eval re-run noise* (the largest over dp "
        "sizes is shown).",
        "* **Spread** = max - min over dp sizes of a score. **Global batches**: each rank "
        "records the sha256 of every sequence it hands to the trainer; a step's global batch "
        "is the multiset over ranks, compared with dp "
        f"{meta['dps'][0]}'s; for Zephon also the global digests of `titan/zephon/steps.jsonl`.",
        "* **Caveat.** Zephon guarantees the data, not the arithmetic: dp sizes sum gradients "
        "in a different order (and run other matmul shapes), so its spread is float-order "
        "noise amplified by training. The stock loader's spread is that plus different data "
        "per step, and not only at random: each rank reads its own contiguous block of rows, so "
        "with fewer ranks a global batch holds consecutive sequences of fewer documents. One "
        "seed and one row order: the stock spread is one draw.",
        "",
        "## Reproduce",
        "",
        "```bash",
        meta["command"],
        "```",
        "",
        f"Machine: {meta['machine']}. Run {meta['date']}; whole benchmark "
        f"{meta['wall_minutes']:.1f} min ({2 * len(meta['dps'])} runs"
        + (" and the seed checkpoint" if meta["seed_checkpoint"] else "")
        + f", one after another; load average before "
        f"{meta['load_average_before'][0]:.1f}).",
        "",
    ]
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dp_spread", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--dp", type=int, nargs="+", default=list(DPS), metavar="N")
    parser.add_argument("--corpus-bytes", type=int, default=CORPUS_BYTES)
    parser.add_argument("--holdout-bytes", type=int, default=HOLDOUT_BYTES)
    parser.add_argument(
        "--work-dir", type=Path, default=REPO_ROOT / ".zephon" / "bench" / "dp_spread"
    )
    parser.add_argument("--results-dir", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--docs-dir", type=Path, default=REPO_ROOT / "docs")
    parser.add_argument(
        "--no-seed-checkpoint",
        action="store_true",
        help="initialise each run from --debug.seed alone instead of one shared seed "
        "checkpoint (on CPU the initial weights then differ between dp sizes)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the markdown and the figure from <results-dir>/dp_spread.json, no runs",
    )
    args = parser.parse_args(argv)
    if args.render_only:
        report = json.loads((args.results_dir / "dp_spread.json").read_text())
        args.docs_dir.mkdir(parents=True, exist_ok=True)
        plot(report, args.docs_dir / "dp_spread.png")
        (args.docs_dir / "dp_spread.md").write_text(to_markdown(report))
        return 0
    if any(GLOBAL_BATCH % dp or 4 % dp for dp in args.dp) or args.steps < 1:
        parser.error("--dp values must divide 4 (the lanes) and --steps must be >= 1")
    dps = sorted(set(args.dp))
    work_dir = args.work_dir.resolve()
    started = time.monotonic()
    load_before = os.getloadavg()
    _progress(f"preparing the corpus in {work_dir}")
    prepared = prepare(work_dir, args.corpus_bytes, args.holdout_bytes)
    seed = None
    if not args.no_seed_checkpoint:
        _progress("creating the seed checkpoint (dp 1, model only)")
        seed = seed_checkpoint(work_dir, prepared)
    runs: dict[str, list[dict[str, Any]]] = {loader: [] for loader in LOADERS}
    for dp in dps:
        for loader in LOADERS:
            _progress(f"{loader} dp {dp}: {args.steps} steps ...")
            run = launch(work_dir, prepared, loader, dp, args.steps, seed)
            result = collect(run, loader, dp, args.steps)
            runs[loader].append(result)
            _progress(
                f"{loader} dp {dp}: aggregate bpb {result['aggregate_bpb']:.5f} "
                f"({run['seconds']:.0f} s)"
            )
    summary = analyse(runs, args.steps)
    command = "bash scripts/bench.sh --dp-spread" + (
        f" {shlex.join(argv if argv is not None else sys.argv[1:])}"
        if (argv if argv is not None else sys.argv[1:])
        else ""
    )
    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "machine": _machine(),
        "versions": {p: _version(p) for p in ("torch", "torchtitan", "datasets")},
        "steps": args.steps,
        "dps": dps,
        "global_batch": GLOBAL_BATCH,
        "seq_len": SEQ_LEN,
        "corpus_bytes_per_domain": args.corpus_bytes,
        "holdout_bytes": args.holdout_bytes,
        "records": prepared.records,
        "tokens": prepared.tokens,
        "heldout_bytes": prepared.heldout_bytes_actual,
        "mixture": prepared.mixture,
        "seed_checkpoint": seed is not None,
        "relooped": [
            f"{r['loader']} dp {r['dp']}"
            for rs in runs.values()
            for r in rs
            if r["stock_data_relooped"]
        ],
        "omp_threads": OMP_THREADS,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "wall_minutes": (time.monotonic() - started) / 60,
        "run_seconds_relative": {
            f"{r['loader']}-dp{r['dp']}": r["seconds"] / runs["zephon"][0]["seconds"]
            for loader in LOADERS
            for r in runs[loader]
        },
    }
    report = {
        "meta": meta,
        "summary": summary,
        "runs": [
            {k: v for k, v in r.items() if not k.startswith("_")}
            for loader in LOADERS
            for r in runs[loader]
        ],
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    args.docs_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "dp_spread.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.docs_dir / "dp_spread.png")
    markdown = to_markdown(report)
    (args.docs_dir / "dp_spread.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
