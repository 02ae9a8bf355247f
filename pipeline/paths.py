"""Where Zephon keeps files it provisions or caches (tokenizer files, shard indexes)."""

from __future__ import annotations

import os
from pathlib import Path


def zephon_home() -> Path:
    """Return Zephon's cache root: ``$ZEPHON_HOME`` if set, else ``~/.cache/zephon``."""
    env = os.environ.get("ZEPHON_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "zephon"
