"""``python -m orchestrator.cli``: the ``zephon`` command, as its console script runs it."""

from orchestrator.cli.dispatch import script

script()
