"""``bash scripts/gpu_check.sh [--cpu]``: one prepared check of every CUDA path.

On the GPUs it finds: devices, precision, dp N -> 1 -> N resumes with every digest checked,
a two-mix sweep with ``replicate_dp``, the guard's comparison, and the GPU's held-out scores
against a CPU run of the same experiment. ``--cpu`` runs the same steps with CPU processes
standing in for GPUs (the test suite's smoke test of this script).
Design and the checks one by one: docs/gpu_check.md.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.experiment.run_record import RunStatus
from orchestrator.experiment.runfolder import RunFolder, write_json_atomic
from orchestrator.guard.tracked_comparison import compare_tracked
from orchestrator.machine.devices import Devices, discover
from orchestrator.machine.precision import resolve_precision
from orchestrator.run import api
from orchestrator.run.elastic_check import verify_elastic
from sweeps.config import local_corpus

MIXES = (
    {"code": 0.5, "docs": 0.3, "unicode": 0.2},
    {"code": 0.2, "docs": 0.3, "unicode": 0.5},
)
"""The two mixes of the sweep (the local corpus's domains)."""
STEPS = 4
CORPUS_MB = 1
"""Megabytes per domain of the local corpus the checks train on."""
CPU_STAND_IN_DP = 2
"""Processes standing in for GPUs with ``--cpu``."""
SCORE_TOLERANCE = 0.02
"""Largest relative difference of held-out bits per byte between the device and the CPU
(not bit for bit: other kernels, other summation order, bfloat16 on CUDA)."""
REPORT_JSON = "gpu_check.json"
REPORT_MARKDOWN = "gpu_check.md"


class CheckFailed(Exception):
    """A check's assertion failed; the message says what was expected and what was seen."""


@dataclass
class CheckResult:
    """One step of the check: what it checks, whether it passed, and what it saw."""

    name: str
    checks: str
    ok: bool = False
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class GpuCheck:
    """The checks of one machine, in order; each appends its :class:`CheckResult`."""

    work: Path
    """Folder of the runs, the MLflow store and the report."""
    device: str
    """``cuda``, or ``cpu`` for the stand-in run."""
    results: list[CheckResult] = field(default_factory=list)
    devices: Devices | None = None
    corpus: dict[str, list[str]] = field(default_factory=dict)
    tokenizer: str = "gpt2"
    """``data.tokenizer`` of every run (the model's vocabulary follows it)."""

    @property
    def dp(self) -> int:
        """The data-parallel size N: every GPU, or the CPU stand-in's processes."""
        assert self.devices is not None
        return self.devices.count if self.device == "cuda" else CPU_STAND_IN_DP

    def experiment(self, mixture: dict[str, float], device: str, **sections: Any) -> dict:
        """A 4-step ``zephon_mini`` run over the local corpus on ``device``."""
        config: dict[str, Any] = {
            "name": "gpu-check",
            "runs_root": str(self.work / "runs"),
            "model": {"config": "zephon_mini"},
            "data": {
                "datasets": self.corpus,
                "mixture": mixture,
                "holdout_bytes": 4096,
                "tokenizer": self.tokenizer,
            },
            "train": {"steps": STEPS, "checkpoint_interval": 2},
            "eval": {"interval": STEPS},
            "resources": {"device": device, "timeout_s": 900, "oversubscribe": True},
            "tracking": {"experiment": "gpu-check"},
        }
        for section, values in sections.items():
            config[section] = {**config.get(section, {}), **values}
        return config

    def run(self, name: str, checks: str, body: Callable[[dict[str, Any]], None]) -> bool:
        """Run one check: print what it checks, record the outcome; False if it failed."""
        print(f"[gpu-check] {name}: {checks}", flush=True)
        result = CheckResult(name, checks)
        started = time.perf_counter()
        try:
            body(result.details)
            result.ok = True
        except Exception as e:  # every failure goes in the report, the next check still runs
            result.error = f"{type(e).__name__}: {e}"
        result.seconds = round(time.perf_counter() - started, 1)
        verdict = "ok" if result.ok else f"FAILED: {result.error}"
        print(f"[gpu-check] {name}: {verdict} ({result.seconds} s)", flush=True)
        self.results.append(result)
        return result.ok


def require(condition: bool, message: str) -> None:
    """Raise :class:`CheckFailed` with ``message`` unless ``condition``."""
    if not condition:
        raise CheckFailed(message)


def check_devices(check: GpuCheck, details: dict[str, Any]) -> None:
    """The devices found, and ``CUDA_VISIBLE_DEVICES`` as a plan maps them."""
    check.devices = discover("auto")
    require(
        check.devices.kind == check.device,
        f"asked for {check.device} devices, found {check.devices.kind} (nvidia-smi working? "
        "a CUDA build of torch? run bash scripts/setup.sh)",
    )
    details.update(asdict(check.devices))
    details["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    plan = api.plan(check.experiment(MIXES[0], check.device), dp=check.dp)
    details["plan_dp"], details["plan_gpu_ids"] = plan.dp, list(plan.devices.gpu_ids)
    require(plan.dp == check.dp, f"the plan chose dp {plan.dp}, expected {check.dp}")
    if check.device == "cuda":
        require(
            list(plan.devices.gpu_ids) == list(check.devices.gpu_ids),
            f"the plan leases GPUs {plan.devices.gpu_ids}, free are {check.devices.gpu_ids}",
        )


def check_precision(check: GpuCheck, details: dict[str, Any]) -> None:
    """``train.precision=auto`` resolves to bfloat16 on CUDA."""
    resolved = resolve_precision("auto", check.device)
    details["auto"] = resolved
    if check.device == "cuda":
        require(resolved == "bfloat16", f"precision auto on CUDA resolved to {resolved}")


def check_elastic(check: GpuCheck, details: dict[str, Any]) -> None:
    """dp N -> checkpoint -> dp 1 (and, on GPUs, 1 -> N): every global batch digest equal."""
    pairs = [(check.dp, 1)] if check.dp > 1 else [(1, 1)]
    if check.device == "cuda" and check.dp > 1:
        pairs.append((1, check.dp))
    for first, second in pairs:
        report = verify_elastic(
            check.experiment(MIXES[0], check.device), first_dp=first, second_dp=second
        )
        details[f"dp{first}_to_dp{second}"] = {
            k: report[k] for k in ("ok", "matched_steps", "steps", "first_mismatch")
        }
        require(
            report["ok"],
            f"dp {first} -> {second}: first mismatch at step {report['first_mismatch']} "
            f"({report['matched_steps']}/{report['steps']} steps matched); "
            f"folders {report['reference_folder']}, {report['resumed_folder']}",
        )


def check_sweep(check: GpuCheck, details: dict[str, Any]) -> None:
    """A two-mix Hydra sweep, each mix on dp 1 and dp N (``replicate_dp``)."""
    replicate = sorted({1, check.dp})
    mixes = ",".join("{" + ",".join(f"{k}:{v}" for k, v in mix.items()) + "}" for mix in MIXES)
    command = [
        sys.executable,
        "-m",
        "sweeps.app",
        "-m",
        "hydra/sweeper=zephon_mix",
        "hydra/launcher=zephon",
        "model=mini",
        "train=smoke",
        f"data.datasets=${{zephon_local_corpus:{CORPUS_MB}}}",
        "data.holdout_bytes=4096",
        f"data.tokenizer={check.tokenizer}",
        f"eval.interval={STEPS}",
        f"resources.device={check.device}",
        "resources.oversubscribe=true",
        "tracking.experiment=gpu-check-sweep",
        f"hydra.sweeper.mix.explicit=[{mixes}]",
        f"hydra.sweeper.replicate_dp=[{','.join(map(str, replicate))}]",
        f"hydra.sweep.dir={check.work / 'sweep'}",
        f"runs_root={check.work / 'sweep-runs'}",
    ]
    done = subprocess.run(command, cwd=check.work, capture_output=True, text=True)
    details["command"] = " ".join(command[2:])
    require(
        done.returncode == 0,
        f"the sweep exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}",
    )
    runs = sorted(p.name for p in (check.work / "sweep-runs").iterdir() if RunFolder(p).exists())
    details["runs"] = runs
    require(
        len(runs) == len(MIXES) * len(replicate),
        f"expected {len(MIXES) * len(replicate)} runs, found {details['runs']}",
    )


def check_guard(check: GpuCheck, details: dict[str, Any]) -> None:
    """The guard accepts the sweep's runs (same data contract, recipe and initial weights)."""
    verdict = compare_tracked(experiment="gpu-check-sweep")
    details["accepted"] = verdict["accepted"]
    details["rows"] = [
        {"mixture": r["mixture"], "aggregate_bpb": r["aggregate_bpb"], "dp_sizes": r["dp_sizes"]}
        for r in verdict["rows"]
    ]
    details["refusals"] = [r["message"] for r in verdict["refusals"]]
    require(verdict["accepted"], f"the guard refused the sweep: {details['refusals']}")


def sweep_run(check: GpuCheck, mixture: dict[str, float], dp: int) -> RunFolder:
    """The sweep's run of ``mixture`` on ``dp`` (:func:`check_sweep`)."""
    for path in sorted((check.work / "sweep-runs").iterdir()):
        folder = RunFolder(path)
        if not folder.exists():  # the index of identities (.identities)
            continue
        recorded = folder.experiment().data_settings.get("mixture")
        if recorded == mixture and folder.state().dp_sizes == [dp]:
            return folder
    raise CheckFailed(f"the sweep has no run of {mixture} on dp {dp}")


def check_scores_against_cpu(check: GpuCheck, details: dict[str, Any]) -> None:
    """The device's held-out scores (the sweep's first mix on dp N) against a CPU run of the
    same experiment (with ``--cpu``, the sweep's dp-1 run): the same digests (the data is
    made on the CPU either way), bits per byte within tolerance."""
    device_folder = sweep_run(check, MIXES[0], check.dp)
    if check.device == "cpu":
        cpu_folder = sweep_run(check, MIXES[0], 1)
    else:
        cpu_run = api.run(check.experiment(MIXES[0], "cpu"), dp=1, run_name="cpu-dp1", fresh=True)
        require(cpu_run.status == RunStatus.SUCCEEDED, f"the CPU run: {cpu_run.messages}")
        cpu_folder = RunFolder(cpu_run.folder)
    details["runs"] = [device_folder.name, cpu_folder.name]
    require(
        device_folder.digests() == cpu_folder.digests(),
        "the global batch digests differ between the device and the CPU run",
    )
    device_bpb = device_folder.evals()[STEPS]["bpb"]
    cpu_bpb = cpu_folder.evals()[STEPS]["bpb"]
    relative = {d: abs(device_bpb[d] - cpu_bpb[d]) / cpu_bpb[d] for d in cpu_bpb}
    details.update(device_bpb=device_bpb, cpu_bpb=cpu_bpb, relative_difference=relative)
    worst = max(relative.values())
    require(
        math.isfinite(worst) and worst <= SCORE_TOLERANCE,
        f"held-out bits per byte differ by {worst:.3%} (tolerance {SCORE_TOLERANCE:.0%}): "
        f"device {device_bpb}, CPU {cpu_bpb}",
    )


def to_markdown(check: GpuCheck, report: dict[str, Any]) -> str:
    """A short summary of the report."""
    lines = [
        f"# GPU check: {'passed' if report['ok'] else 'FAILED'}",
        "",
        f"{report['date']} · {report['machine']} · device {check.device}, dp N = "
        f"{report['dp']} · `bash scripts/gpu_check.sh{' --cpu' if check.device == 'cpu' else ''}`",
        "",
        "| check | what it checks | result | seconds |",
        "|---|---|---|---|",
    ]
    for r in check.results:
        outcome = "ok" if r.ok else f"**failed**: {r.error[:200]}"
        lines.append(f"| {r.name} | {r.checks} | {outcome} | {r.seconds} |")
    return "\n".join(lines) + "\n"


def machine_description() -> str:
    """The CPU, and the GPUs where there are any."""
    import platform

    import torch

    gpus = (
        ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        if torch.cuda.is_available()
        else "no GPU"
    )
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {gpus}"


def main(argv: list[str] | None = None) -> int:
    """CLI: run every check, write the JSON report and the Markdown summary; 0 if all pass."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="CPU processes stand in for GPUs")
    parser.add_argument(
        "--out", type=Path, default=None, help="a new folder (default runs/gpu_check/<time>)"
    )
    parser.add_argument(
        "--tokenizer",
        default="gpt2",
        help="data.tokenizer of every run: gpt2 (default) or a tokenizer file or folder",
    )
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = (args.out or Path("runs") / "gpu_check" / stamp).absolute()
    if work.exists() and any(work.iterdir()):
        parser.error(f"--out {work} is not empty: give a new folder")
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # runs, the sweep and the embedded MLflow store (./mlflow.db) live here
    check = GpuCheck(work, "cpu" if args.cpu else "cuda", tokenizer=args.tokenizer)
    check.corpus = local_corpus(CORPUS_MB)  # the sweep's ${zephon_local_corpus:1}, same files
    steps = [
        ("devices", "the GPUs found and the plan's CUDA_VISIBLE_DEVICES", check_devices),
        ("precision", "train.precision=auto resolves to bfloat16 on CUDA", check_precision),
        ("elastic", "dp N -> checkpoint -> dp 1 (and back): every digest equal", check_elastic),
        ("sweep", "a two-mix sweep, each mix on dp 1 and dp N", check_sweep),
        ("guard", "the guard accepts the sweep's runs", check_guard),
        (
            "scores",
            "device vs CPU: equal digests, held-out bpb within 2%",
            check_scores_against_cpu,
        ),
    ]
    for name, checks, body in steps:
        ok = check.run(name, checks, lambda details, body=body: body(check, details))
        if not ok and name == "devices":
            break  # nothing else can run without the devices
    report = {
        "ok": len(check.results) == len(steps) and all(r.ok for r in check.results),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_description(),
        "device": check.device,
        "dp": check.dp if check.devices else None,
        "checks": [asdict(r) for r in check.results],
    }
    write_json_atomic(work / REPORT_JSON, report)
    (work / REPORT_MARKDOWN).write_text(to_markdown(check, report))
    print(f"[gpu-check] {'passed' if report['ok'] else 'FAILED'}: {work / REPORT_MARKDOWN}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
