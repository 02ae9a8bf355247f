"""Spread of held-out scores across dp sizes: TorchTitan's stock loader vs the lane pipeline.

For each loader and dp in (1, 2, 4), the same model trained from scratch on the same text
and scored twice by the held-out evaluator; per loader, the spread of the scores across dp
sizes next to the eval's re-run noise, and whether each step's global batch is the same on
every dp size. ``python -m benchmarks.dp_spread`` (:func:`benchmarks.dp_spread.cli.main`,
or ``bash scripts/bench.sh --dp-spread``) writes ``benchmarks/results/dp_spread.json`` and
``docs/dp_spread.{md,png}``. The package itself imports nothing: every trainer process
imports it (for its configs) and should not load the CLI, the analysis and the report.
Design: docs/design/benchmarks_dp_spread.md
"""
