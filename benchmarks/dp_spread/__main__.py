"""``python -m benchmarks.dp_spread``: the command line (:mod:`benchmarks.dp_spread.cli`)."""

from benchmarks.dp_spread.cli import main

raise SystemExit(main())
