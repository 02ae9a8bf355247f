"""Zephon benchmarks: the lane pipeline against raw tiktoken and the loaders users would pick.

Every number comes from one run on one real corpus, as a ratio against a baseline
measured in the same run (repetitions interleaved, medians). Entry point:
``python -m benchmarks.run`` (or ``bash scripts/bench.sh``); see ``benchmarks/README.md``.

Modules:

* :mod:`benchmarks.workload` — the corpus, its datasets, mixture and token budget.
* :mod:`benchmarks.timing` — wall/CPU stopwatch, peak RSS, the ``Throughput`` record.
* :mod:`benchmarks.baselines` — raw tiktoken, a plain PyTorch DataLoader, TorchTitan's loader.
* :mod:`benchmarks.lanes` — Zephon pipeline throughput and restore cost.
* :mod:`benchmarks.child` — runs one measurement in a fresh process.
* :mod:`benchmarks.report` — medians, ratios, JSON and markdown.
* :mod:`benchmarks.machine` — the machine and package versions, for every report.
* :mod:`benchmarks.run` — the CLI: plan, interleaved repetitions, output files.
* :mod:`benchmarks.training` — seconds per training step per precision, the main job's wall time.
* :mod:`benchmarks.dp_spread` — held-out scores across dp sizes, stock loader vs lanes.
* :mod:`benchmarks.noise` — waits for a quiet machine, re-runs a disturbed measurement.
"""
