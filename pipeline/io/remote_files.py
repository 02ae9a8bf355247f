"""Shards named by fsspec URLs: resolving, listing and identifying them, and reading by range.

A ``file://`` URL names a local file, read in place like a path. A remote Parquet shard read
by range (``io_options["remote_read"] = "range"``) is identified by its server's ETag and
size (``remote_version_fingerprint``), since its bytes are never all read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipeline.errors import ConfigError, DataError
from pipeline.state import ordered_fingerprint

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(://|::)")  # a scheme, or an fsspec chain
_HTTP = {"http", "https"}
# fs.info keys that change when a remote file changes, by fsspec backend.
_ETAG_KEYS = ("ETag", "etag", "e_tag")
_MODIFIED_KEYS = ("Last-Modified", "LastModified", "last_modified", "mtime", "updated")
_REMOTE_VERSION_TAG = "zephon-remote-version-v1"
_USERINFO = re.compile(r"(://)[^/@]*@")  # credentials in a URL: scheme://user:secret@host


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL with a scheme (or an fsspec chain) rather than a local path."""
    return _URL.match(location) is not None


def url_filename(url: str) -> str:
    """File name of ``url``'s path (no query string), e.g. ``part-0.jsonl.zst``."""
    _, path = resolve_filesystem(url)
    if is_url(path):  # http(s) keeps the whole URL as its path
        path = urlsplit(path).path
    return PurePosixPath(path).name


def local_path(url: str) -> str | None:
    """The local path ``url`` names if it is on the local filesystem (``file://``), else None."""
    fs, path = resolve_filesystem(url)
    return path if isinstance(fs, LocalFileSystem) else None


def expand_url(url: str) -> list[str]:
    """Sorted URLs of the files ``url`` names: itself, or the matches of a glob pattern.

    Raises ``ConfigError`` if nothing matches, the file does not exist or is a
    directory, or the scheme is unknown; ``DataError`` if the server cannot be
    reached.
    """
    fs, path = resolve_filesystem(url)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    http = bool(protocols & _HTTP)
    if _has_magic(path, http):
        if http or "::" in url:
            # An HTTP server has no reliable file listing; a chained URL
            # cannot be rebuilt from the matched paths.
            raise ConfigError(
                f"{url}: glob patterns are not supported for this URL; list the files' URLs"
            )
        try:
            matches = fs.glob(path, detail=True)
        except Exception as e:  # fsspec backends raise their own exception types
            raise DataError(
                f"cannot list {url} ({describe_root_cause(e)}); check the URL, your access rights and the network"
            ) from e
        files = sorted(fs.unstrip_protocol(p) for p, i in matches.items() if i["type"] == "file")
        if not files:
            raise ConfigError(f"pattern {url!r} matches no files; check the URL and the pattern")
        return files
    info = _query_file_info(fs, path, url, missing=ConfigError)
    if info.get("type") == "directory":
        raise ConfigError(
            f"{url!r} is a directory; give a glob such as '{url.rstrip('/')}/**/*.jsonl'"
        )
    return [url]


def remote_validators(url: str) -> dict[str, Any]:
    """What identifies ``url``'s current version, from metadata only (one ``fs.info``):
    its size, ETag and modification time. Raises ``DataError`` naming the URL if it is
    missing or unreachable."""
    fs, path = resolve_filesystem(url)
    fs.invalidate_cache(path)  # backends that cache listings would report stale sizes
    return _extract_validators(_query_file_info(fs, path, url, missing=DataError))


def remote_version_fingerprint(url: str, validators: Mapping[str, Any]) -> str:
    """The identity of a shard read by range: SHA-256 over its size and ETag (the bytes are
    never all read, so they cannot be hashed). Raises ``DataError`` naming the URL if the
    server sends no ETag, since nothing would then tell a rewritten file from the original."""
    if validators.get("etag") is None:
        raise DataError(
            f"{url}: the server sends no ETag, which reading by range needs to notice a "
            "rewritten file; read it whole with io_options['remote_read'] = 'download'"
        )
    canonical = [_REMOTE_VERSION_TAG, validators.get("size"), validators["etag"]]
    return ordered_fingerprint(canonical)


def open_by_range(url: str) -> BinaryIO:
    """A seekable file of ``url`` whose every ``read`` fetches just the bytes asked for (no
    read-ahead block cache: a Parquet reader asks for exactly the column chunks it needs).
    Raises ``DataError`` naming the URL if it cannot be opened."""
    fs, path = resolve_filesystem(url)
    try:
        return fs.open(path, "rb", cache_type="none")
    except Exception as e:  # fsspec backends raise their own exception types
        raise DataError(
            f"cannot open {url} ({describe_root_cause(e)}); check that the server is up "
            "and the file still exists"
        ) from e


def credentials_problem(url: str) -> str | None:
    """Why ``url`` is refused if it embeds credentials (``s3://key:secret@bucket/...``), the
    URL shown with them masked; None if it embeds none. Credentials in a URL would be copied
    wherever the URL is recorded (the data spec, the run's records, MLflow, logs)."""
    if not any(urlsplit(part).netloc.count("@") for part in url.split("::")):
        return None
    return (
        f"{redact_credentials(url)}: credentials in a URL are refused (they would be recorded "
        "with it); remove them and give them as the usual AWS_ACCESS_KEY_ID / "
        "AWS_SECRET_ACCESS_KEY environment variables or an AWS profile (AWS_PROFILE)"
    )


def redact_credentials(url: str) -> str:
    """``url`` with any ``user:secret@`` part replaced by ``***@``."""
    return _USERINFO.sub(r"\1***@", url)


def resolve_filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of ``url`` and the path on it; ConfigError for an unknown scheme
    or a URL with credentials in it (:func:`credentials_problem`)."""
    problem = credentials_problem(url)
    if problem:
        raise ConfigError(problem)
    try:
        return fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as e:
        raise ConfigError(
            f"{url}: {e}; fix the URL's scheme, or install the fsspec backend for it "
            "(s3://: pip install 'zephon[s3]')"
        ) from e


def _has_magic(path: str, http: bool) -> bool:
    if http:  # "?" starts a query and "[" an IPv6 host, so only "*" in the path is a glob
        return "*" in urlsplit(path).path
    return any(c in path for c in "*?[")


def _query_file_info(
    fs: fsspec.AbstractFileSystem, path: str, url: str, missing: type[Exception]
) -> dict[str, Any]:
    """``fs.info(path)``; raise ``missing`` if the file does not exist, ``DataError`` if unreachable."""
    try:
        return fs.info(path)
    except Exception as e:  # fsspec backends raise their own exception types
        if _is_missing(e):
            raise missing(f"{url} does not exist; fix the URL or remove it") from e
        raise DataError(
            f"cannot reach {url} ({describe_root_cause(e)}); check that the server is up and reachable "
            "from this machine, and the URL"
        ) from e


def _is_missing(e: BaseException) -> bool:
    # fsspec's HTTP backend turns every failure into FileNotFoundError and
    # keeps the real one as the cause: only a 404/410 answer means "missing".
    if not isinstance(e, FileNotFoundError):
        return False
    cause = e.__cause__
    return cause is None or (
        not isinstance(cause, OSError) and getattr(cause, "status", None) in (404, 410)
    )


def describe_root_cause(e: BaseException) -> str:
    """``Type: message`` of the innermost cause of ``e`` (what an fsspec backend wraps)."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {e}"


def _extract_validators(info: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies the remote file's current version: size, ETag, modification time."""

    def first(keys: tuple[str, ...]) -> str | None:
        return next((str(info[k]) for k in keys if info.get(k) is not None), None)

    return {"size": info.get("size"), "etag": first(_ETAG_KEYS), "modified": first(_MODIFIED_KEYS)}
