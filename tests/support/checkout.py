"""The files of this checkout, as a fresh clone of it would have them."""

from __future__ import annotations

import subprocess

from tests.support import REPO


def source_files() -> list[str]:
    """The files a fresh clone of this checkout would have, with new files not yet
    committed (tracked or untracked, not ignored, present), relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [name for name in listed if name and (REPO / name).is_file()]
