"""MDS folders for tests and benchmarks, written without Mosaic Streaming (which cannot be
installed beside the project's pins): the layout ``MDSWriter`` writes, for ``str`` and
``int64`` columns. ``tests/pipeline/formats/test_mds.py`` checks it byte for byte against
the shards the real writer made (``tests/data/mds/``)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

MDS_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "mds"
"""The folders the real writer made (``tests/data/mds/make_fixtures.py``)."""
_ENCODERS: dict[str, tuple[int | None, Callable[[Any], bytes]]] = {
    "str": (None, lambda v: v.encode("utf-8")),
    "int64": (8, lambda v: np.int64(v).tobytes()),
}
_COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": lambda raw: zstandard.ZstdCompressor().compress(raw),
    "gz": lambda raw: gzip.compress(raw, mtime=0),
}


def fixture_texts() -> list[str]:
    """The texts of the fixture folders ``plain``, ``zstd`` and ``gz``, in sample order."""
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", MDS_FIXTURES / "make_fixtures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fixture_texts()


def copy_fixture(name: str, to: Path) -> Path:
    """A copy of the fixture folder ``name`` under ``to`` (tests damage their copies)."""
    return Path(shutil.copytree(MDS_FIXTURES / name, to / name))


def mds_shard_bytes(
    samples: Sequence[dict[str, Any]], columns: dict[str, str], config: dict[str, Any]
) -> bytes:
    """One uncompressed shard as ``MDSWriter`` encodes it (``config``: its writer settings,
    ``compression``, ``hashes`` and ``size_limit``)."""
    names = sorted(columns)
    sizes = [_ENCODERS[columns[n]][0] for n in names]
    obj = {
        "version": 2,
        "format": "mds",
        **config,
        "column_names": names,
        "column_encodings": [columns[n] for n in names],
        "column_sizes": sizes,
    }
    config_data = json.dumps(obj, sort_keys=True).encode()
    encoded = []
    for sample in samples:
        data = [_ENCODERS[columns[n]][1](sample[n]) for n in names]
        head = np.array([len(d) for d, s in zip(data, sizes, strict=True) if s is None], np.uint32)
        encoded.append(head.tobytes() + b"".join(data))
    offsets = np.cumsum([0, *map(len, encoded)]).astype(np.uint32)
    offsets += 4 + 4 * len(offsets) + len(config_data)
    return np.uint32(len(encoded)).tobytes() + offsets.tobytes() + config_data + b"".join(encoded)


def write_mds_folder(
    folder: Path, texts: Sequence[str], *, compression: str | None, samples_per_shard: int
) -> Path:
    """An MDS folder of ``texts`` (columns ``text: str`` and ``id: int64``) and its index."""
    folder.mkdir(parents=True)
    config = {"compression": compression, "hashes": [], "size_limit": None}
    shards = []
    for n, start in enumerate(range(0, len(texts), samples_per_shard)):
        chunk = texts[start : start + samples_per_shard]
        raw = mds_shard_bytes(
            [{"text": t, "id": start + i} for i, t in enumerate(chunk)],
            {"text": "str", "id": "int64"},
            config,
        )
        raw_info = {"basename": f"shard.{n:05d}.mds", "bytes": len(raw), "hashes": {}}
        zip_info = None
        if compression is None:
            (folder / raw_info["basename"]).write_bytes(raw)
        else:
            stored = _COMPRESSORS[compression](raw)
            zip_info = {"basename": f"shard.{n:05d}.mds.{compression}", "bytes": len(stored)}
            zip_info["hashes"] = {}
            (folder / zip_info["basename"]).write_bytes(stored)
        shards.append(
            {
                **config,
                "column_encodings": ["int64", "str"],
                "column_names": ["id", "text"],
                "column_sizes": [8, None],
                "format": "mds",
                "raw_data": raw_info,
                "samples": len(chunk),
                "version": 2,
                "zip_data": zip_info,
            }
        )
    (folder / "index.json").write_text(json.dumps({"shards": shards, "version": 2}, sort_keys=True))
    return folder


def sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
