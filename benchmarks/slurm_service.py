"""What the job service adds per job on Slurm: seconds from submit to the first step.

``python -m benchmarks.slurm_service [--repeats 3] [--work-dir DIR]`` starts the tests' two-node
Slurm cluster on this machine (:class:`tests.support.slurm.LocalSlurm`, Debian's slurm-wlm),
then, ``--repeats`` times each and alternating, trains the same ``zephon_mini`` experiment
(6 steps, dp 1, a new data seed each time, so nothing is answered from an earlier run):

    sbatch     a plain ``sbatch --wrap "zephon run -c SPEC --dp 1"``: the trainer without the service
    service    ``zephon submit`` to a running ``zephon serve --launcher slurm`` (default poll)

and prints one JSON line: each way's seconds from the submitting command's start to the
first step's record in the run folder, their medians, and the service's overhead (the
difference of the medians). Needs root, as the tests' cluster does.

Design: docs/design/orchestrator_service.md ("On Slurm")
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.experiment.runfolder import RunFolder
from tests.support.experiments import data_only_experiment
from tests.support.slurm import cluster_for_tests
from tests.support.titan_run import corpus, corpus_tokenizer

ZEPHON = [sys.executable, "-m", "orchestrator.cli"]
STEPS = 6
FIRST_STEP_LIMIT_S = 600.0


def first_step_seconds(folder: RunFolder, started: float) -> float:
    """Seconds from ``started`` until ``folder`` records step 1."""
    while 1 not in folder.steps():
        if time.monotonic() - started > FIRST_STEP_LIMIT_S:
            raise RuntimeError(f"{folder.path} recorded no step in {FIRST_STEP_LIMIT_S:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def through_sbatch(work: Path, spec: Path, name: str) -> float:
    """A plain ``sbatch`` of ``zephon run``; seconds to its first step."""
    run = " ".join([*ZEPHON, "run", "-c", str(spec), "--dp", "1", "--name", name, "--json"])
    started = time.monotonic()
    subprocess.run(
        ["sbatch", "--cpus-per-task=1", f"--output={work / name}.out", f"--wrap={run}"],
        cwd=work,
        check=True,
        capture_output=True,
    )
    return first_step_seconds(RunFolder(work / "runs" / name), started)


def through_service(root: Path, spec: Path, key: str) -> float:
    """``zephon submit`` to the running service; seconds to the job's first step."""
    started = time.monotonic()
    done = subprocess.run(
        [*ZEPHON, "submit", "--root", str(root), "-c", str(spec), "--key", key, "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    job_id = json.loads(done.stdout)["job"]["id"]
    return first_step_seconds(RunFolder(root / "runs" / job_id), started)


def measure(work: Path, repeats: int) -> dict[str, object]:
    """The benchmark in ``work`` (module docstring)."""
    domains = corpus(work)
    data_roots = [str(Path(min(p for ps in domains.values() for p in ps)).parents[1])]
    data_roots.append(corpus_tokenizer(domains))
    root = work / "service"
    roots = [arg for folder in data_roots for arg in ("--data-root", folder)]
    seconds: dict[str, list[float]] = {"sbatch": [], "service": []}
    with cluster_for_tests():
        with (work / "serve.log").open("ab") as log:
            serve = subprocess.Popen(
                [*ZEPHON, "serve", "--root", str(root), "--launcher", "slurm", *roots],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            for repeat in range(repeats):
                for way in ("sbatch", "service"):
                    spec = data_only_experiment(domains, STEPS, dp=1)
                    spec["data"]["seed"] = 100 * repeat + len(seconds[way]) + (way == "service")
                    path = work / f"{way}-{repeat}.json"
                    path.write_text(json.dumps(spec))
                    if way == "sbatch":
                        seconds[way].append(through_sbatch(work, path, f"plain-{repeat}"))
                    else:
                        seconds[way].append(through_service(root, path, f"bench-{repeat}"))
                    # the next measurement starts on an idle cluster
                    while subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout:
                        time.sleep(0.5)
        finally:
            serve.terminate()
            serve.wait()
    medians = {way: statistics.median(values) for way, values in seconds.items()}
    return {
        "repeats": repeats,
        "seconds_to_first_step": seconds,
        "median_s": medians,
        "service_overhead_s": medians["service"] - medians["sbatch"],
        "cpu": _cpu_name(),
    }


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, help="default: a temporary folder")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        print(json.dumps(measure(args.work_dir.absolute(), args.repeats)))
        return
    with tempfile.TemporaryDirectory(prefix="zephon-slurm-bench-") as work:
        print(json.dumps(measure(Path(work), args.repeats)))


if __name__ == "__main__":
    main()
