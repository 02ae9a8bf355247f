"""``python -m orchestrator.cli``: the ``zephon`` command."""

import sys

from orchestrator.cli.dispatch import main

sys.exit(main())
