"""``python -m benchmarks.corpus_scale``."""

from benchmarks.corpus_scale.cli import main

raise SystemExit(main())
