"""``resolve_shards``: a dataset's files, folders, URLs and glob patterns, as a sorted list of
shards."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from pipeline import io
from pipeline.errors import ConfigError, ZephonError
from pipeline.formats import folder_shards


def resolve_shards(
    name: str, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
) -> list[Path | str]:
    """Expand files, dataset folders, URLs and glob patterns into a sorted, de-duplicated
    list of shards.

    Local files (``file://`` URLs included) become absolute ``Path``s, remote
    files stay URL strings. A dataset folder (``datasets``' ``save_to_disk``, or
    MDS: ``folder_shards``) gives its files in the folder's own order, placed
    where the folder's path sorts.
    """
    patterns = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not patterns:
        raise ConfigError(f"dataset {name!r}: no paths given; pass files or glob patterns")
    # Each shard's sort key: (its path, 0), or (its folder's path, position in the folder).
    found: dict[str, tuple[str, int]] = {}
    for pattern in patterns:
        expanded = os.path.expanduser(os.fspath(pattern))
        if io.is_url(expanded):
            try:
                local = io.local_path(expanded)
                if local is None:
                    found.update((url, (url, 0)) for url in io.expand_url(expanded))
                    continue
            except ZephonError as e:
                raise type(e)(f"dataset {name!r}: {e}") from e
            expanded = local  # a file:// URL: resolved like the path it names
        if os.path.isfile(expanded):
            found.setdefault(os.path.abspath(expanded), (os.path.abspath(expanded), 0))
        elif glob.escape(expanded) != expanded:
            matches = [m for m in glob.glob(expanded, recursive=True) if os.path.isfile(m)]
            if not matches:
                raise ConfigError(
                    f"dataset {name!r}: pattern {pattern!r} matches no files; "
                    "check the path and the extension (hidden files are not matched)"
                )
            for m in matches:
                found.setdefault(os.path.abspath(m), (os.path.abspath(m), 0))
        elif os.path.isdir(expanded):
            folder = os.path.abspath(expanded)
            try:
                files = folder_shards(Path(folder))
            except ZephonError as e:
                raise type(e)(f"dataset {name!r}: {e}") from e
            if files is None:
                raise ConfigError(
                    f"dataset {name!r}: {pattern!r} is a directory but not a dataset folder "
                    "(datasets' save_to_disk, or MDS with an index.json); give a glob such as "
                    f"'{os.path.join(pattern, '**', '*.jsonl')}'"
                )
            for position, file in enumerate(files):
                found.setdefault(str(file), (folder, position))
        else:
            raise ConfigError(
                f"dataset {name!r}: {pattern!r} does not exist; fix the path or remove it"
            )
    ordered = sorted(found, key=found.__getitem__)
    return [p if io.is_url(p) else Path(p) for p in ordered]
