"""Write the MDS folders under tests/data/mds/ with Mosaic Streaming's own ``MDSWriter``.

Run with mosaicml-streaming 0.13.0 installed (it cannot go into the project's environment:
it pins numpy<2.2), from the repository root::

    python tests/data/mds/make_fixtures.py tests/data/mds

The tests import ``fixture_texts`` (no streaming needed) to know what the folders hold.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import types
from pathlib import Path

RECORDS = 300
EMPTY_AT = (17, 150)
"""Records written with an empty text: MDS has no nulls, so these are its bad records."""
FOLDERS = {"plain": None, "zstd": "zstd", "gz": "gz"}
"""Folder name -> the writer's compression (all hold ``fixture_texts()``)."""


def fixture_texts() -> list[str]:
    """The texts of the ``plain``, ``zstd`` and ``gz`` folders, in sample order."""
    words = ["héllo", "naïve", "日本語", "🎉", "Ωmega", "plain", "tab\there", "new\nline"]
    return [
        ""
        if i in EMPTY_AT
        else f"record {i}: " + " ".join(words[: 1 + i % len(words)]) * (1 + i % 3)
        for i in range(RECORDS)
    ]


def _import_writer() -> type:
    """``MDSWriter`` without running ``streaming/__init__``, which imports torch, torchvision
    and transformers: the package folders are registered as empty namespaces first."""
    spec = importlib.util.find_spec("streaming")
    if spec is None or spec.origin is None:
        sys.exit("mosaicml-streaming is not installed")
    root = os.path.dirname(spec.origin)
    for name in (
        "streaming",
        "streaming.base",
        "streaming.base.format",
        "streaming.base.format.base",
        "streaming.base.format.mds",
        "streaming.base.storage",
    ):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = package
    from streaming.base.format.mds.writer import MDSWriter

    return MDSWriter


def main(out: Path) -> None:
    """Write every fixture folder under ``out``, replacing any there."""
    writer = _import_writer()
    texts = fixture_texts()
    for folder, compression in FOLDERS.items():
        shutil.rmtree(out / folder, ignore_errors=True)
        columns = {"text": "str", "id": "int64"}
        with writer(
            out=str(out / folder),
            columns=columns,
            compression=compression,
            hashes=["sha1"],
            size_limit=12_000,
        ) as w:
            for i, text in enumerate(texts):
                w.write({"text": text, "id": i})
    shutil.rmtree(out / "bytes_text", ignore_errors=True)
    with writer(out=str(out / "bytes_text"), columns={"text": "bytes", "id": "int64"}) as w:
        for i in range(20):
            w.write({"text": f"bytes {i}".encode(), "id": i})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
