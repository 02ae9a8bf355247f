"""Prose and code that a benchmark never sees twice: the installed packages' docstrings and sources.

``build_text_corpus(root, kind)`` writes ``kind`` (``"prose"``: every module's docstrings
of 200 or more characters, de-duplicated, one record per module; ``"code"``: one record per
Python source file of at most 140 KB, de-duplicated) from the packages of this interpreter's
``site-packages``, in sorted path order, as ``jsonl.zst`` shards of about 4 MB, until
``max_bytes`` of text. Technical documentation in reStructuredText and numpydoc style, and
real code: the kinds of text a run on its own data reads, and far more of it than one
benchmark consumes (48 MB each by default). Built once under ``root`` (a manifest names what
was built; a second call returns at once).

Design: docs/design/benchmarks_throughput.md
"""

from __future__ import annotations

import ast
import hashlib
import json
import site
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import zstandard

DEFAULT_MAX_BYTES = 48 << 20
SHARD_BYTES = 4 << 20
MIN_DOCSTRING_CHARS = 200
MAX_SOURCE_BYTES = 140 << 10
KINDS = ("prose", "code")
_VERSION = 1


def package_roots() -> list[Path]:
    """The ``site-packages`` folders of this interpreter (its virtual environment's first)."""
    roots = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    return sorted(set(roots), key=lambda p: (not str(p).startswith(sys.prefix), str(p)))


def iter_texts(kind: str, roots: list[Path]) -> Iterator[str]:
    """Records of ``kind`` from every ``.py`` file under ``roots``, each distinct text once."""
    seen: set[bytes] = set()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            text = _module_text(kind, path)
            if not text:
                continue
            digest = hashlib.sha256(text.encode()).digest()
            if digest not in seen:
                seen.add(digest)
                yield text


def _module_text(kind: str, path: Path) -> str:
    try:
        source = path.read_bytes()
    except OSError:
        return ""
    if kind == "code":
        if len(source) > MAX_SOURCE_BYTES:
            return ""
        return source.decode("utf-8", "ignore").strip()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old packages
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return ""
    docs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= MIN_DOCSTRING_CHARS:
                docs.append(doc)
    return "\n\n".join(docs)


def build_text_corpus(
    root: Path, kind: str, max_bytes: int = DEFAULT_MAX_BYTES, roots: list[Path] | None = None
) -> list[Path]:
    """The shards of ``kind`` under ``root / kind`` (built if missing); see the module docstring."""
    assert kind in KINDS, f"kind must be one of {KINDS}, got {kind!r}"
    folder = root / kind
    manifest = folder / "manifest.json"
    wanted = {"version": _VERSION, "kind": kind, "max_bytes": max_bytes}
    try:
        built = json.loads(manifest.read_text())
        if {k: built.get(k) for k in wanted} == wanted:
            return [folder / name for name in built["shards"]]
    except (OSError, ValueError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("part-*.jsonl.zst"):
        stale.unlink()
    shards: list[str] = []
    lines: list[bytes] = []
    total = pending = records = 0
    for text in iter_texts(kind, roots or package_roots()):
        line = json.dumps({"text": text}).encode() + b"\n"
        lines.append(line)
        size = len(text.encode())
        pending += size
        total += size
        records += 1
        if pending >= SHARD_BYTES or total >= max_bytes:
            shards.append(_write_shard(folder, len(shards), lines))
            lines, pending = [], 0
        if total >= max_bytes:
            break
    if lines:
        shards.append(_write_shard(folder, len(shards), lines))
    manifest.write_text(
        json.dumps({**wanted, "shards": shards, "records": records, "bytes": total})
    )
    return [folder / name for name in shards]


def _write_shard(folder: Path, index: int, lines: list[bytes]) -> str:
    name = f"part-{index:04d}.jsonl.zst"
    (folder / name).write_bytes(zstandard.ZstdCompressor(level=3).compress(b"".join(lines)))
    return name
