"""``resolve_shards``: a dataset's files, URLs and glob patterns, as a sorted list of shards."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from pipeline import io
from pipeline.errors import ConfigError, ZephonError


def resolve_shards(
    name: str, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
) -> list[Path | str]:
    """Expand files, URLs and glob patterns into a sorted, de-duplicated list of shards.

    Local files (``file://`` URLs included) become absolute ``Path``s, remote
    files stay URL strings.
    """
    patterns = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not patterns:
        raise ConfigError(f"dataset {name!r}: no paths given; pass files or glob patterns")
    found: set[str] = set()
    for pattern in patterns:
        expanded = os.path.expanduser(os.fspath(pattern))
        if io.is_url(expanded):
            try:
                local = io.local_path(expanded)
                if local is None:
                    found.update(io.expand_url(expanded))
                    continue
            except ZephonError as e:
                raise type(e)(f"dataset {name!r}: {e}") from e
            expanded = local  # a file:// URL: resolved like the path it names
        if os.path.isfile(expanded):
            found.add(os.path.abspath(expanded))
        elif glob.escape(expanded) != expanded:
            matches = [m for m in glob.glob(expanded, recursive=True) if os.path.isfile(m)]
            if not matches:
                raise ConfigError(
                    f"dataset {name!r}: pattern {pattern!r} matches no files; "
                    "check the path and the extension (hidden files are not matched)"
                )
            found.update(os.path.abspath(m) for m in matches)
        elif os.path.isdir(expanded):
            raise ConfigError(
                f"dataset {name!r}: {pattern!r} is a directory; "
                f"give a glob such as '{os.path.join(pattern, '**', '*.jsonl')}'"
            )
        else:
            raise ConfigError(
                f"dataset {name!r}: {pattern!r} does not exist; fix the path or remove it"
            )
    return [p if io.is_url(p) else Path(p) for p in sorted(found)]
