"""``python -m benchmarks.mix_search``: the command line (:mod:`benchmarks.mix_search.cli`)."""

from benchmarks.mix_search.cli import main

if __name__ == "__main__":  # spawned workers import this module too; only the parent runs
    raise SystemExit(main())
