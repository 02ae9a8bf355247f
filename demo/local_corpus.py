"""Build a small, real, multi-domain text corpus from what Python itself ships.

Three domains whose gpt2 bytes per token differ: ``code`` (the standard library's ``.py``
files), ``docs`` (pydoc help topics and docstrings) and ``unicode`` (the graphic characters
of the Unicode database), read from the standard library's folder and ``unicodedata`` only:
no download, no network. The build is deterministic and idempotent (``corpus.json``,
written last, records what was built; a later identical call returns at once).

Design: docs/design/benchmarks_local_corpus.md
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import platform
import sys
import sysconfig
import tempfile
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline import Dataset, load_tokenizer
from pipeline.errors import ConfigError

#: Bump when the corpus content or layout changes, so old builds are redone.
FORMAT_VERSION = 2
#: A shard is closed once its records reach this many (uncompressed) bytes.
SHARD_TARGET_BYTES = 6_000_000
MANIFEST_NAME = "corpus.json"
#: Longer sources are cut at line boundaries into records of at most this many
#: bytes (~2k gpt2 tokens of code).
MAX_RECORD_BYTES = 4_000
#: Code points per ``unicode`` record, and per line of it.
UNICODE_RECORD_CODE_POINTS = 128
UNICODE_LINE_CODE_POINTS = 32
#: Unicode general categories (first letter) kept: letters, numbers, punctuation, symbols.
_GRAPHIC_CATEGORIES = frozenset("LNPS")
#: Folders never walked: third-party packages, and test suites that installs drop.
_SKIPPED_DIRS = frozenset(
    {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
)

Record = dict[str, str]
Writer = Callable[[Path, list[Record]], None]
Source = Callable[[Path], Iterable[Record]]


def default_stdlib_root() -> Path:
    """The standard library folder of the running Python (a venv's: its base interpreter's)."""
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_sources(root: Path) -> Iterator[tuple[str, str]]:
    """Yield ``(path relative to root, text)`` of the ``.py`` files under ``root``, sorted.

    Skipped: the folders of ``_SKIPPED_DIRS``, ``config-*`` folders and
    ``_sysconfigdata*`` files (this machine's build), symlinked folders, files
    that are empty or not UTF-8.
    """
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("config-")]
        rel_folder = Path(folder).relative_to(root)
        found += [
            (rel_folder / f).as_posix()
            for f in files
            if f.endswith(".py") and not f.startswith("_sysconfigdata")
        ]
    for rel in sorted(found):
        try:
            text = (root / rel).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if text.strip():
            yield rel, text


def _code_records(root: Path) -> Iterator[Record]:
    for rel, text in _stdlib_sources(root):
        yield {"id": f"stdlib/{rel}", "text": text}


def _parse_source(source: str | bytes) -> ast.Module | None:
    """``source``'s syntax tree; None where it does not parse."""
    # Some stdlib files hold invalid escapes: warnings, not our concern.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError):
            return None


def _collect_docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of ``source``, in ``ast.walk`` order."""
    tree = _parse_source(source)
    if tree is None:
        return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [d for n in ast.walk(tree) if isinstance(n, kinds) and (d := ast.get_docstring(n))]


_TOPICS = ast.dump(ast.Name("topics", ast.Store()))
"""The assignment target ``topics =`` as ``ast.dump`` writes it."""


def _help_topics(root: Path) -> dict[str, str]:
    """The ``topics`` dict literal of ``root/pydoc_data/topics.py``; {} where there is none.

    Read, not imported, so that the corpus comes from ``root`` only."""
    try:
        tree = _parse_source((root / "pydoc_data" / "topics.py").read_bytes())
    except OSError:
        return {}
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and [ast.dump(t) for t in node.targets] == [_TOPICS]:
            topics = ast.literal_eval(node.value)
            return {k: v for k, v in topics.items() if isinstance(v, str)}
    return {}


def _docs_records(root: Path) -> Iterator[Record]:
    topics = _help_topics(root)
    for key in sorted(topics):
        if topics[key].strip():
            yield {"id": f"pydoc-topics/{key}", "text": topics[key]}
    # The topics alone are under 1 MB; docstrings add prose of the same kind.
    for rel, source in _stdlib_sources(root):
        docs = _collect_docstrings(source)
        if docs:
            yield {"id": f"docstrings/{rel}", "text": "\n\n".join(docs)}


def _unicode_records() -> Iterator[Record]:
    """The graphic characters of ``unicodedata``, a record per 128 code points, a line per 32."""
    for start in range(0, sys.maxunicode + 1, UNICODE_RECORD_CODE_POINTS):
        lines = []
        for row in range(start, start + UNICODE_RECORD_CODE_POINTS, UNICODE_LINE_CODE_POINTS):
            chars = (chr(c) for c in range(row, row + UNICODE_LINE_CODE_POINTS))
            line = "".join(c for c in chars if unicodedata.category(c)[0] in _GRAPHIC_CATEGORIES)
            if line:
                lines.append(line + "\n")
        if lines:
            yield {"id": f"unicode/U+{start:04X}", "text": "".join(lines)}


def _split_long_records(records: Iterable[Record], max_bytes: int) -> Iterator[Record]:
    """Cut records longer than ``max_bytes`` at line boundaries (ids get ``#part``).

    Why: the pipeline's mixer and packer work per record, and test-sized runs
    (a few thousand tokens per lane, 2M tokens in all) need many records. Whole
    files measured badly: one 230 KB stdlib file (~100k tokens) is 5% of a
    2M-token window and skewed realised token shares by 2-3 points; 16 KB
    records still left flush windows larger than short runs ever close. With
    4 KB records, shares land within ~0.4 point. A longer line stays whole.
    """
    for rec in records:
        text = rec["text"]
        if len(text.encode()) <= max_bytes:
            yield rec
            continue
        part: list[str] = []
        size = 0
        n = 0
        for line in text.splitlines(keepends=True):
            line_bytes = len(line.encode())
            if part and size + line_bytes > max_bytes:
                yield {"id": f"{rec['id']}#{n}", "text": "".join(part)}
                part, size, n = [], 0, n + 1
            part.append(line)
            size += line_bytes
        if part:
            yield {"id": f"{rec['id']}#{n}", "text": "".join(part)}


def _cap_records(records: Iterable[Record], max_bytes: int | None) -> Iterator[Record]:
    """Records in order until the next one would pass ``max_bytes`` of text.

    The first record is always taken so that no domain comes out empty.
    """
    total = 0
    for i, rec in enumerate(records):
        size = len(rec["text"].encode())
        if max_bytes is not None and i > 0 and total + size > max_bytes:
            return
        total += size
        yield rec


def _write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Let ``write`` fill a temporary file next to ``path``, then move it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _encode_jsonl(records: list[Record]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _write_zst(path: Path, records: list[Record]) -> None:
    data = zstandard.ZstdCompressor(level=10).compress(_encode_jsonl(records))
    _write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _write_gz(path: Path, records: list[Record]) -> None:
    # mtime=0 keeps the gzip header, hence the file, identical across builds.
    data = gzip.compress(_encode_jsonl(records), compresslevel=9, mtime=0)
    _write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _write_parquet(path: Path, records: list[Record]) -> None:
    table = pa.table({k: pa.array([r[k] for r in records], pa.string()) for k in ("id", "text")})
    _write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


#: domain -> (shard file suffix, shard writer, record source reading the stdlib root)
_DOMAINS: dict[str, tuple[str, Writer, Source]] = {
    "code": (".jsonl.zst", _write_zst, _code_records),
    "docs": (".jsonl.gz", _write_gz, _docs_records),
    "unicode": (".parquet", _write_parquet, lambda _root: _unicode_records()),
}
DOMAINS = tuple(_DOMAINS)
"""The corpus's domains (dataset names), in build order."""


def _build_domain(out_dir: Path, name: str, root: Path, max_bytes: int | None) -> dict:
    """Write one domain's shards; return its manifest entry."""
    suffix, write, source = _DOMAINS[name]
    shards: list[str] = []
    records = 0
    text_bytes = 0
    content = hashlib.sha256()
    batch: list[Record] = []
    batch_bytes = 0

    def flush() -> None:
        rel = f"{name}/shard-{len(shards):05d}{suffix}"
        write(out_dir / rel, batch)
        shards.append(rel)

    for rec in _cap_records(_split_long_records(source(root), MAX_RECORD_BYTES), max_bytes):
        batch.append(rec)
        content.update(_encode_jsonl([rec]))
        size = len(rec["text"].encode())
        batch_bytes += size
        text_bytes += size
        records += 1
        if batch_bytes >= SHARD_TARGET_BYTES:
            flush()
            batch, batch_bytes = [], 0
    if batch:
        flush()
    disk = sum((out_dir / s).stat().st_size for s in shards)
    return {
        "shards": shards,
        "files": len(shards),
        "records": records,
        "bytes": text_bytes,
        "disk_bytes": disk,
        "sha256": content.hexdigest(),
    }


def _remove_stale(out_dir: Path, keep: set[str]) -> None:
    """Delete shard files of an earlier build (other parameters, other domains; ours only)."""
    for path in sorted(out_dir.glob("*/shard-*")):
        if path.relative_to(out_dir).as_posix() not in keep:
            path.unlink()


def _load_manifest(out_dir: Path, params: dict) -> dict | None:
    try:
        manifest = json.loads((out_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("params") != params:
        return None
    shards = [s for d in manifest["domains"].values() for s in d["shards"]]
    return manifest if all((out_dir / s).is_file() for s in shards) else None


def build_local_corpus(
    out_dir: Path,
    max_bytes_per_domain: int | None = None,
    stdlib_root: Path | None = None,
) -> dict[str, list[Path]]:
    """Build (or reuse) the local corpus in ``out_dir``; return ``{domain: [shard paths]}``.

    ``max_bytes_per_domain`` caps each domain's text bytes: records are taken in
    sorted order until the next one would pass the cap (the first is always
    taken). ``stdlib_root`` is the one folder read (default: this Python's
    standard library, :func:`default_stdlib_root`). Same parameters and same
    Python give byte-identical files; a build whose ``corpus.json`` matches the
    parameters is not redone.

    Raises:
        ConfigError: ``max_bytes_per_domain`` is not positive, or ``stdlib_root``
            is not a folder.
    """
    if max_bytes_per_domain is not None and max_bytes_per_domain <= 0:
        raise ConfigError(f"max_bytes_per_domain must be positive, got {max_bytes_per_domain}")
    root = default_stdlib_root() if stdlib_root is None else Path(stdlib_root)
    if not root.is_dir():
        raise ConfigError(f"stdlib_root {str(root)!r} is not a folder")
    out_dir = Path(out_dir)
    params = {
        "format_version": FORMAT_VERSION,
        "max_bytes_per_domain": max_bytes_per_domain,
        "python": platform.python_version(),
        "stdlib_root": str(root.absolute()),
        "unicode": unicodedata.unidata_version,
    }
    manifest = _load_manifest(out_dir, params)
    if manifest is None:
        out_dir.mkdir(parents=True, exist_ok=True)
        # No manifest during the build: an interrupted build is redone, not trusted.
        (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
        domains = {n: _build_domain(out_dir, n, root, max_bytes_per_domain) for n in DOMAINS}
        _remove_stale(out_dir, {s for d in domains.values() for s in d["shards"]})
        manifest = {"params": params, "domains": domains}
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        _write_atomic(out_dir / MANIFEST_NAME, lambda tmp: tmp.write_text(text))
    return {n: [out_dir / s for s in d["shards"]] for n, d in manifest["domains"].items()}


def build_eval_set(corpus: dict[str, list[Path]], domain: str, documents: int, out: Path) -> Path:
    """A fixed evaluation set of ``documents`` records of ``domain``, evenly spaced over it,
    written once to ``out`` (JSONL): a yardstick no variant moves. Its records are in the
    domain too: every run removes them from training (scored documents are never trained on).
    """
    if out.exists():
        return out
    if domain not in corpus:
        raise ConfigError(f"no domain {domain!r} in the local corpus; use one of {sorted(corpus)}")
    dataset = Dataset(domain, [str(p) for p in corpus[domain]])
    total = dataset.num_records
    picks = sorted({k * total // documents for k in range(min(documents, total))})
    records = [{"text": t} for t in dataset.read_texts(picks)]
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(out, lambda tmp: tmp.write_bytes(_encode_jsonl(records)))
    return out


def _count_tokens(shards: list[Path]) -> int:
    """gpt2 tokens of a domain's records (for ``--tokens``)."""
    dataset = Dataset("count", [str(p) for p in shards])
    texts = dataset.read_texts(list(range(dataset.num_records)))
    return sum(len(ids) for ids in load_tokenizer("gpt2").encode_batch(texts))


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m demo.local_corpus OUT_DIR [--max-mb N] [--stdlib-root DIR] [--tokens]``."""
    parser = argparse.ArgumentParser(
        prog="python -m demo.local_corpus", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--max-mb", type=float, default=None, help="cap per domain, in MB")
    parser.add_argument("--stdlib-root", type=Path, default=None, help="the folder read")
    parser.add_argument("--tokens", action="store_true", help="count gpt2 tokens per domain")
    args = parser.parse_args(argv)
    cap = None if args.max_mb is None else int(args.max_mb * 1_000_000)
    try:
        shards = build_local_corpus(args.out_dir, cap, args.stdlib_root)
    except ConfigError as e:
        parser.error(str(e))
    manifest = json.loads((args.out_dir / MANIFEST_NAME).read_text())
    for name, d in manifest["domains"].items():
        line = (
            f"{name:10s} {d['files']:3d} shards {d['records']:7,d} records "
            f"{d['bytes']:12,d} text bytes {d['disk_bytes'] / 1e6:8.2f} MB on disk"
        )
        if args.tokens:
            tokens = _count_tokens(shards[name])
            line += f" {tokens:12,d} tokens {d['bytes'] / tokens:6.2f} bytes/token"
        print(line)
    print(f"written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
