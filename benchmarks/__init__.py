"""Zephon benchmarks: the lane pipeline against raw tiktoken and the loaders users would pick.

Every number comes from one run on one real corpus, as a ratio against a baseline
measured in the same run (repetitions interleaved, medians). Entry point:
``python -m benchmarks.run`` (or ``bash scripts/bench.sh``); see ``benchmarks/README.md``.

Design: docs/design/benchmarks_overview.md (what each module does)
"""
