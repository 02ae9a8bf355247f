"""Build a small, real, multi-domain text corpus from files every Python machine has.

The demo, the tests and the benchmarks need real text whose domains differ in
how many gpt2 tokens a byte costs, without downloading anything. Sources:

``code`` (JSONL.zst shards of ~6 MB, field ``text``)
    The ``.py`` files of Python's standard library (``sysconfig`` ``stdlib``
    path, ``site-packages`` skipped, ``test/`` kept), one source per file;
    files that are empty or not UTF-8 are skipped.
``docs`` (JSONL.gz)
    The help topics of ``pydoc_data.topics`` (sorted by key), then, per stdlib
    source file outside test directories, its module/class/function docstrings
    joined by blank lines (read with ``ast``, nothing is imported).
``i18n`` (Parquet)
    The translated messages of the ``/usr/share/locale/*/LC_MESSAGES/*.mo``
    gettext catalogs of non-Latin-script languages (``NON_LATIN_LANGS``), one
    message per line. Byte-level BPE trained on English text is at its most
    expensive here, which gives the widest bytes/token gap to ``docs``.
``licenses`` (Parquet; fallback for ``i18n``)
    Slim images strip ``/usr/share/locale``. Where no such catalog exists, the
    third domain is ``licenses`` instead: ``/usr/share/common-licenses/*`` then
    ``/usr/share/doc/*/copyright`` (both kept on Debian slim images), exact
    duplicates and symlinks skipped; where neither exists either (non-Debian),
    Python's own ``LICENSE.txt``. The returned dict and ``corpus.json`` name the
    domains actually built.

Sources longer than ``MAX_RECORD_BYTES`` (4 KB; gettext catalogs
``I18N_RECORD_BYTES``, 2 KB) are cut at line boundaries into several records
(see ``_split`` for why). Every record has an ``id``: its source, relative to
its root, plus ``#part`` when cut. Measured with gpt2 (r50k_base, tiktoken
0.14) on the full corpus of a Debian 12 machine with Python 3.11.7 (pyenv)::

    domain    records   text bytes      tokens   bytes/token   shards   on disk
    code        8,919   31,512,085  15,314,618          2.06        6    5.7 MB
    docs        1,093    2,269,790     643,156          3.53        1    0.7 MB
    i18n       18,246   34,483,337  24,036,923          1.43        6    8.4 MB
    (licenses   1,600    5,527,373   1,846,398          2.99        1    1.1 MB)

so ``docs`` has 2.5x the bytes per token of ``i18n`` (2.3x with a 3 MB cap per
domain: code 2.20, docs 3.53, i18n 1.57). With the ``licenses`` fallback the
widest gap is ``docs`` vs ``code``, 1.7x (common licenses alone: ~4.1). The full
build takes ~10 s; the sizes depend on the installed packages.

The build is deterministic (sorted traversal, fixed compression settings, gzip
mtime 0) and idempotent: ``corpus.json``, written last, records the build
parameters, the shards and per-domain sizes; a later call with the same
parameters whose shards all exist returns at once.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import os
import platform
import struct
import sysconfig
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.errors import ConfigError

#: Bump when the corpus content or layout changes, so old builds are redone.
FORMAT_VERSION = 1
#: A shard is closed once its records reach this many (uncompressed) bytes.
SHARD_TARGET_BYTES = 6_000_000
MANIFEST_NAME = "corpus.json"
#: Longer sources are cut at line boundaries into records of at most this many
#: bytes (~2k gpt2 tokens of code); gettext catalogs, at ~1.5 bytes/token, finer.
MAX_RECORD_BYTES = 4_000
I18N_RECORD_BYTES = 2_000
#: Languages (locale prefix before ``_``/``@``) written in non-Latin scripts, by script.
_NON_LATIN_SCRIPTS = {
    "Cyrillic": "be bg kk ky mk mn ru sr tg uk",
    "Greek, Armenian, Georgian": "el hy ka",
    "Arabic, Hebrew": "ar fa he ps ug ur",
    "Brahmic": "as bn gu hi km kn lo ml mr my ne or pa si ta te th",
    "CJK, Ethiopic": "am ja ko zh",
}
NON_LATIN_LANGS = frozenset(lang for langs in _NON_LATIN_SCRIPTS.values() for lang in langs.split())

_TEST_DIRS = frozenset({"test", "tests", "idle_test"})

Record = dict[str, str]
Writer = Callable[[Path, list[Record]], None]
Source = Callable[[], Iterable[Record]]


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_sources() -> Iterator[tuple[str, str]]:
    """Yield ``(relative path, text)`` of the stdlib's ``.py`` files, sorted."""
    root = _stdlib_root()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "site-packages" in rel.parts or not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.strip():
            yield rel.as_posix(), text


def _code_records() -> Iterator[Record]:
    for rel, text in _stdlib_sources():
        yield {"id": f"stdlib/{rel}", "text": text}


def _docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of ``source``, in ``ast.walk`` order."""
    # Some stdlib test files hold invalid escapes or deliberate syntax errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return []
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [d for n in ast.walk(tree) if isinstance(n, kinds) and (d := ast.get_docstring(n))]


def _docs_records() -> Iterator[Record]:
    from pydoc_data.topics import topics

    for key in sorted(topics):
        if topics[key].strip():
            yield {"id": f"pydoc-topics/{key}", "text": topics[key]}
    # The topics alone are under 1 MB; docstrings add prose of the same kind.
    for rel, source in _stdlib_sources():
        if _TEST_DIRS.intersection(rel.split("/")):
            continue  # test docstrings are terse and would halve the parse speed
        docs = _docstrings(source)
        if docs:
            yield {"id": f"docstrings/{rel}", "text": "\n\n".join(docs)}


def _read_text_files(paths: Iterable[tuple[str, Path]]) -> Iterator[Record]:
    """Records of the UTF-8, non-empty, non-symlink files; exact duplicates skipped."""
    seen: set[bytes] = set()
    for rid, path in paths:
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        digest = hashlib.sha256(text.encode()).digest()
        if text.strip() and digest not in seen:
            seen.add(digest)
            yield {"id": rid, "text": text}


def _license_records() -> Iterator[Record]:
    common = Path("/usr/share/common-licenses")
    docs = Path("/usr/share/doc")
    paths = [(f"common-licenses/{p.name}", p) for p in sorted(common.glob("*"))]
    paths += [(f"copyright/{p.parent.name}", p) for p in sorted(docs.glob("*/copyright"))]
    if not paths:
        # Non-Debian system: Python's own licence text always ships with it.
        paths = [("python/LICENSE.txt", _stdlib_root() / "LICENSE.txt")]
    yield from _read_text_files(paths)


def _mo_messages(data: bytes) -> list[str] | None:
    """Translated messages of a GNU ``.mo`` catalog; None if it is not UTF-8 or malformed."""
    for order in ("<", ">"):
        try:
            magic, _, count, orig_off, trans_off = struct.unpack_from(f"{order}5I", data)
        except struct.error:
            return None
        if magic == 0x950412DE:
            break
    else:
        return None
    messages = []
    try:
        for i in range(count):
            msgid_len, _ = struct.unpack_from(f"{order}2I", data, orig_off + 8 * i)
            if msgid_len == 0:
                continue  # the catalog header (metadata), not a message
            length, offset = struct.unpack_from(f"{order}2I", data, trans_off + 8 * i)
            # Plural forms are NUL-separated.
            raw = data[offset : offset + length].decode("utf-8")
            messages.extend(m for m in raw.split("\x00") if m)
    except (struct.error, UnicodeDecodeError):
        return None
    return messages


def _i18n_records() -> Iterator[Record]:
    for path in sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo")):
        locale = path.parts[-3]
        if "@latin" in locale or locale.split("@")[0].split("_")[0] not in NON_LATIN_LANGS:
            continue
        try:
            messages = _mo_messages(path.read_bytes())
        except OSError:
            continue
        if messages:
            yield {"id": f"{locale}/{path.name}", "text": "\n".join(messages)}


def _domain_names() -> list[str]:
    """The domains to build: ``i18n`` as the third where gettext catalogs exist."""
    third = "i18n" if next(_i18n_records(), None) is not None else "licenses"
    return ["code", "docs", third]


def _split(records: Iterable[Record], max_bytes: int) -> Iterator[Record]:
    """Cut records longer than ``max_bytes`` at line boundaries (ids get ``#part``).

    Why: the pipeline's mixer and packer work per record, and test-sized runs
    (a few thousand tokens per lane, 2M tokens in all) need many records. Whole
    files measured badly: one 230 KB stdlib file (~100k tokens) is 5% of a
    2M-token window and skewed realised token shares by 2-3 points, and whole
    gettext catalogs (languages differ 2x in bytes/token) did the same; 16 KB
    records still left flush windows larger than short runs ever close. With
    4 KB / 2 KB records, shares land within ~0.4 point. A longer line stays whole.
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


def _capped(records: Iterable[Record], max_bytes: int | None) -> Iterator[Record]:
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


def _jsonl(records: list[Record]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def _write_zst(path: Path, records: list[Record]) -> None:
    data = zstandard.ZstdCompressor(level=10).compress(_jsonl(records))
    _write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _write_gz(path: Path, records: list[Record]) -> None:
    # mtime=0 keeps the gzip header, hence the file, identical across builds.
    data = gzip.compress(_jsonl(records), compresslevel=9, mtime=0)
    _write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _write_parquet(path: Path, records: list[Record]) -> None:
    table = pa.table({k: pa.array([r[k] for r in records], pa.string()) for k in ("id", "text")})
    _write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


#: domain -> (shard file suffix, shard writer, record source, max record bytes)
_DOMAINS: dict[str, tuple[str, Writer, Source, int]] = {
    "code": (".jsonl.zst", _write_zst, _code_records, MAX_RECORD_BYTES),
    "docs": (".jsonl.gz", _write_gz, _docs_records, MAX_RECORD_BYTES),
    "i18n": (".parquet", _write_parquet, _i18n_records, I18N_RECORD_BYTES),
    "licenses": (".parquet", _write_parquet, _license_records, MAX_RECORD_BYTES),
}


def _build_domain(out_dir: Path, name: str, max_bytes: int | None) -> dict:
    """Write one domain's shards; return its manifest entry."""
    suffix, write, source, max_record_bytes = _DOMAINS[name]
    shards: list[str] = []
    records = 0
    text_bytes = 0
    batch: list[Record] = []
    batch_bytes = 0

    def flush() -> None:
        rel = f"{name}/shard-{len(shards):05d}{suffix}"
        write(out_dir / rel, batch)
        shards.append(rel)

    for rec in _capped(_split(source(), max_record_bytes), max_bytes):
        batch.append(rec)
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
    }


def _remove_stale(out_dir: Path, keep: set[str]) -> None:
    """Delete shard files of an earlier build with other parameters (ours only)."""
    for name in _DOMAINS:
        for path in sorted((out_dir / name).glob("shard-*")):
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
    out_dir: Path, max_bytes_per_domain: int | None = None
) -> dict[str, list[Path]]:
    """Build (or reuse) the local corpus in ``out_dir``; return ``{domain: [shard paths]}``.

    ``max_bytes_per_domain`` caps each domain's text bytes: records are taken in
    sorted order until the next one would pass the cap (the first is always
    taken). Same parameters and same machine give byte-identical files; a build
    whose ``corpus.json`` matches the parameters is not redone.

    Raises:
        ConfigError: ``max_bytes_per_domain`` is not positive.
    """
    if max_bytes_per_domain is not None and max_bytes_per_domain <= 0:
        raise ConfigError(f"max_bytes_per_domain must be positive, got {max_bytes_per_domain}")
    out_dir = Path(out_dir)
    params = {
        "format_version": FORMAT_VERSION,
        "max_bytes_per_domain": max_bytes_per_domain,
        "python": platform.python_version(),
    }
    manifest = _load_manifest(out_dir, params)
    if manifest is None:
        out_dir.mkdir(parents=True, exist_ok=True)
        # No manifest during the build: an interrupted build is redone, not trusted.
        (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
        domains = {n: _build_domain(out_dir, n, max_bytes_per_domain) for n in _domain_names()}
        _remove_stale(out_dir, {s for d in domains.values() for s in d["shards"]})
        manifest = {"params": params, "domains": domains}
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        _write_atomic(out_dir / MANIFEST_NAME, lambda tmp: tmp.write_text(text))
    return {n: [out_dir / s for s in d["shards"]] for n, d in manifest["domains"].items()}


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m demo.local_corpus OUT_DIR [--max-mb N]``."""
    parser = argparse.ArgumentParser(
        prog="python -m demo.local_corpus", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--max-mb", type=float, default=None, help="cap per domain, in MB")
    args = parser.parse_args(argv)
    cap = None if args.max_mb is None else int(args.max_mb * 1_000_000)
    try:
        build_local_corpus(args.out_dir, cap)
    except ConfigError as e:
        parser.error(str(e))
    manifest = json.loads((args.out_dir / MANIFEST_NAME).read_text())
    for name, d in manifest["domains"].items():
        print(
            f"{name:10s} {d['files']:3d} shards {d['records']:7,d} records "
            f"{d['bytes'] / 1e6:8.2f} MB text {d['disk_bytes'] / 1e6:8.2f} MB on disk"
        )
    print(f"written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
