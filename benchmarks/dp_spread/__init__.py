"""Spread of held-out scores across dp sizes: TorchTitan's stock loader vs the lane pipeline.

The original study trained one model from scratch on 8/16/32/64 GPUs with the standard
loader and with lane-based loading and compared the spread of eval scores across GPU
counts (0.82 vs 0.05 points on one benchmark, 0.64 vs 0.011 on another) with the re-run
noise of the eval. This is the same design at small scale, on CPU::

    for loader in (stock, zephon), dp in (1, 2, 4):
        torchrun --nproc-per-node dp ... --config {loader}_dp_spread    (from scratch)
            same model (zephon_debug: llama3 debugmodel, gpt2 vocabulary; --model mini:
            zephon_mini, 64 wide, 2 layers, --config {loader}_mini_dp_spread), optimizer,
            lr schedule, seed, seq len 128, global batch 8 (local batch 8 / dp), steps,
            corpus text (the training records of the same WorkSource)
        at the last step: the held-out evaluator, twice (scores; re-run noise)
    per loader: held-out bits/byte per domain and aggregate per dp, spread across dp
                (max - min), eval re-run noise, and whether each step's global batch is
                the same on every dp size

Same text for both loaders. The corpus is :mod:`demo.local_corpus`; Zephon's
``WorkSource`` (holdout bytes > 0) splits it into held-out and training records. The
stock loader reads a JSON dataset of the *training* records only, in a seeded random
order (written once by :func:`~benchmarks.dp_spread.prepare.prepare`); Zephon's mixture
is each domain's natural token share of those records, so both read the same
distribution. Both are scored by ``HeldOutEvaluator`` on the same held-out records
(:mod:`benchmarks.dp_spread.configs`).

Global batches. Zephon: ``titan/zephon/steps.jsonl`` global digests, per step. Both:
each rank records the sha256 of every sequence it hands to the trainer; a step's global
batch is the multiset of its ranks' sequences, compared across dp sizes.

The parts, one module each::

    cli.main ──> prepare.prepare ──> Prepared (corpus, held-out split, stock JSON dataset;
       │                                       data_flags: every --dataloader/--heldout flag)
       ├──> launch.seed_checkpoint, launch.train ── torchrun (orchestrator.run.launch)
       │        └─ orchestrator.titan.train --module benchmarks.dp_spread.configs
       │                 └─> <work>/runs/<loader>-dp<N>/ (rows.dp<rank>.jsonl, titan/zephon/)
       ├──> analysis.collect (one run folder) ──> analysis.analyse (spreads, agreement)
       └──> results/dp_spread.json ──> report.render (docs/dp_spread.md, docs/dp_spread.png)
    design: what every part shares (loaders, models, batch shape); imports nothing heavy

``python -m benchmarks.dp_spread`` (or ``bash scripts/bench.sh --dp-spread``) writes
``benchmarks/results/dp_spread.json``, ``docs/dp_spread.md`` and ``docs/dp_spread.png``.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The command line (:func:`benchmarks.dp_spread.cli.main`).

    Imported on call: every trainer process imports this package (for its configs), and
    should not load the CLI, the analysis and the report with it.
    """
    from benchmarks.dp_spread.cli import main as cli_main

    return cli_main(argv)
