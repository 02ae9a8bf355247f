"""Shard IO: shards named by fsspec URLs, and a local cache of remote shards.

A ``file://`` URL is read in place, like a path. Any other URL is copied to local disk by
``ShardCache.local_copy``, named by the SHA-256 of its bytes (so a shard's fingerprint is the
same wherever its bytes came from) and shared between processes through a per-URL ``flock``
and atomic renames: a killed process leaves at most a temp file, and no cache entry ever
names a missing or partial copy. With ``io_options["remote_read"] = "range"``, Parquet
shards are instead read in place by byte range (``open_by_range``) and identified by their
server's ETag and size (``remote_version_fingerprint``).

Design: docs/design/pipeline_datasets.md
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.local import LocalFileSystem

from pipeline.errors import ConfigError, DataError
from pipeline.filelock import file_lock

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(://|::)")  # a scheme, or an fsspec chain
_COPY = re.compile(r"[0-9a-f]{64}(\.[A-Za-z0-9_-]+)*")
_SUFFIX = re.compile(r"\.[A-Za-z0-9_-]{1,32}")
_HTTP = {"http", "https"}
# fs.info keys that change when a remote file changes, by fsspec backend.
_ETAG_KEYS = ("ETag", "etag", "e_tag")
_MODIFIED_KEYS = ("Last-Modified", "LastModified", "last_modified", "mtime", "updated")
_CACHE_KEYS = {"enabled", "dir", "max_bytes"}
_REMOTE_VERSION_TAG = "zephon-remote-version-v1"


class RemoteRead(StrEnum):
    """How a remote shard is read (``io_options["remote_read"]``)."""

    DOWNLOAD = "download"
    """Whole, into a verified local copy named by the SHA-256 of its bytes (every format)."""
    RANGE = "range"
    """Parquet in place by byte range: the footer, then the text column's chunks of the row
    groups read; identified by the server's ETag and size. Other formats are downloaded."""


@dataclass(frozen=True)
class CacheOptions:
    """``io_options["cache"]``: share local copies of remote shards under ``dir``."""

    enabled: bool = False
    dir: Path | None = None  # None: the Dataset's cache_dir
    max_bytes: int | None = None
    """Bytes of downloaded copies kept; the least recently used copies that no process
    has in use are deleted past it (None: no limit)."""


@dataclass(frozen=True)
class IOOptions:
    """Parsed ``io_options`` of a ``Dataset``."""

    cache: CacheOptions = CacheOptions()
    remote_read: RemoteRead = RemoteRead.DOWNLOAD
    """How remote shards are read; ``download`` keeps content fingerprints (the default)."""

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> IOOptions:
        """Parse ``{"cache": {"enabled": bool, "dir": str | None, "max_bytes": int | None},
        "remote_read": "download" | "range"}``; raise ``ConfigError`` if invalid."""
        if options is None:
            return cls()
        _check_keys("io_options", options, {"cache", "remote_read"})
        remote_read = options.get("remote_read", RemoteRead.DOWNLOAD)
        if not isinstance(remote_read, str) or remote_read not in {r.value for r in RemoteRead}:
            raise ConfigError(
                f'io_options["remote_read"] must be one of {[str(r) for r in RemoteRead]}, '
                f"got {remote_read!r}"
            )
        cache = options.get("cache", {})
        _check_keys('io_options["cache"]', cache, _CACHE_KEYS)
        enabled = cache.get("enabled", False)
        if not isinstance(enabled, bool):
            raise ConfigError(
                f'io_options["cache"]["enabled"] must be True or False, got {enabled!r}'
            )
        cache_dir = cache.get("dir")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise ConfigError(
                f'io_options["cache"]["dir"] must be a directory path or None, got {cache_dir!r}'
            )
        max_bytes = cache.get("max_bytes")
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0
        ):
            raise ConfigError(
                f'io_options["cache"]["max_bytes"] must be an integer >= 0 or None, got '
                f"{max_bytes!r}"
            )
        directory = Path(cache_dir).expanduser() if cache_dir else None
        return cls(CacheOptions(enabled, directory, max_bytes), RemoteRead(remote_read))


def _check_keys(what: str, value: object, known: set[str]) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a dict, got {value!r}")
    unknown = sorted(str(k) for k in set(value) - known)
    if unknown:
        raise ConfigError(f"{what}: unknown keys {unknown}; known keys: {sorted(known)}")


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL with a scheme (or an fsspec chain) rather than a local path."""
    return _URL.match(location) is not None


def url_filename(url: str) -> str:
    """File name of ``url``'s path (no query string), e.g. ``part-0.jsonl.zst``."""
    _, path = _resolve_filesystem(url)
    if is_url(path):  # http(s) keeps the whole URL as its path
        path = urlsplit(path).path
    return PurePosixPath(path).name


def local_path(url: str) -> str | None:
    """The local path ``url`` names if it is on the local filesystem (``file://``), else None."""
    fs, path = _resolve_filesystem(url)
    return path if isinstance(fs, LocalFileSystem) else None


def expand_url(url: str) -> list[str]:
    """Sorted URLs of the files ``url`` names: itself, or the matches of a glob pattern.

    Raises ``ConfigError`` if nothing matches, the file does not exist or is a
    directory, or the scheme is unknown; ``DataError`` if the server cannot be
    reached.
    """
    fs, path = _resolve_filesystem(url)
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
                f"cannot list {url} ({_describe_root_cause(e)}); check the URL, your access rights and the network"
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


def content_sha256(copy: Path) -> str:
    """SHA-256 of a copy returned by ``ShardCache.local_copy``, read from its name."""
    return copy.name[:64]


def remote_validators(url: str) -> dict[str, Any]:
    """What identifies ``url``'s current version, from metadata only (one ``fs.info``):
    its size, ETag and modification time. Raises ``DataError`` naming the URL if it is
    missing or unreachable."""
    fs, path = _resolve_filesystem(url)
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
    return hashlib.sha256(json.dumps(canonical).encode()).hexdigest()


def open_by_range(url: str) -> BinaryIO:
    """A seekable file of ``url`` whose every ``read`` fetches just the bytes asked for (no
    read-ahead block cache: a Parquet reader asks for exactly the column chunks it needs).
    Raises ``DataError`` naming the URL if it cannot be opened."""
    fs, path = _resolve_filesystem(url)
    try:
        return fs.open(path, "rb", cache_type="none")
    except Exception as e:  # fsspec backends raise their own exception types
        raise DataError(
            f"cannot open {url} ({_describe_root_cause(e)}); check that the server is up "
            "and the file still exists"
        ) from e


class ShardCache:
    """Local copies of remote files, shared between processes if the cache is enabled.

    See docs/design/pipeline_datasets.md for the layout, the locking protocol and what
    is verified.
    """

    def __init__(self, options: IOOptions, default_dir: Path) -> None:
        self.shared = options.cache.enabled
        self._dir = (options.cache.dir or default_dir) if self.shared else None
        self.max_bytes = options.cache.max_bytes
        self.remote_read = options.remote_read

    @property
    def root(self) -> Path:
        """Directory holding ``remote/``: the shared cache dir, or this process's private one."""
        return self._dir if self._dir is not None else _private_dir()

    def local_copy(self, url: str) -> Path:
        """Path of a verified local copy of ``url``, downloading it if needed.

        The file name is the SHA-256 of the copy's bytes (``content_sha256``)
        followed by the URL's suffixes. Raises ``DataError`` naming the URL if
        the file cannot be fetched; the cache is then left as it was.
        """
        remote = remote_validators(url)
        fs, path = _resolve_filesystem(url)
        key = hashlib.sha256(url.encode()).hexdigest()
        entry = self.root / "remote" / "urls" / f"{key}.json"
        copy = _find_reusable_copy(entry, remote)
        if copy is not None:
            _mark_used(copy)
            return copy
        with file_lock(self.root / "remote" / "locks" / f"{key}.lock"):
            copy = _find_reusable_copy(entry, remote)
            if copy is None:
                for stale in entry.parent.parent.glob(f".{key}.*.tmp"):
                    stale.unlink(missing_ok=True)
                copy = _download_to_cache(fs, path, url, key, remote, entry)
            _mark_used(copy)
        if self.max_bytes is not None:
            evict_unused_copies(self.root / "remote", self.max_bytes, keep=copy)
        return copy

    def pin(self, url: str) -> tuple[Path, CopyPin]:
        """A verified local copy of ``url`` (``local_copy``) and a pin that keeps the cache
        from evicting it while the pin is alive (a shared ``flock`` on the copy)."""
        for _ in range(3):  # a copy evicted between finding and pinning it is fetched again
            copy = self.local_copy(url)
            pin = CopyPin(copy)
            if pin.holds(copy):
                return copy, pin
            pin.release()
        raise DataError(
            f"{url}: its cached copy was evicted three times while being opened; raise io_options['cache']['max_bytes']"
        )


class CopyPin:
    """An open, shared-locked file descriptor of a cached copy: while it lives, eviction
    (which takes the lock exclusively, without waiting) passes the copy by."""

    fd = -1

    def __init__(self, copy: Path) -> None:
        try:
            self.fd = os.open(copy, os.O_RDONLY)
        except FileNotFoundError:
            return
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def holds(self, copy: Path) -> bool:
        """Whether the pinned file is still the one at ``copy`` (not evicted meanwhile)."""
        if self.fd < 0:
            return False
        try:
            return os.fstat(self.fd).st_ino == os.stat(copy).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Unpin (closing the descriptor releases the lock); safe to call twice."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.release()


def _mark_used(copy: Path) -> None:
    """Record a use of ``copy`` for least-recently-used eviction (``used/<name>``'s mtime;
    the copy's own mtime is part of its verification and must not change)."""
    marker = copy.parent / "used" / copy.name
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def evict_unused_copies(remote_dir: Path, max_bytes: int, *, keep: Path | None = None) -> int:
    """Delete the least recently used copies under ``remote_dir`` until they hold at most
    ``max_bytes``, passing by ``keep`` and every copy some process has pinned; returns
    the bytes deleted. Copies in use can keep the cache above ``max_bytes``."""
    copies = [p for p in remote_dir.iterdir() if p.is_file() and _COPY.fullmatch(p.name)]
    sizes = {p: p.stat().st_size for p in copies}
    total = sum(sizes.values())

    def last_used(copy: Path) -> float:
        try:
            return (copy.parent / "used" / copy.name).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    freed = 0
    for copy in sorted(copies, key=last_used):
        if total - freed <= max_bytes:
            break
        if copy == keep:
            continue
        try:
            fd = os.open(copy, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # pinned: in use by a reader
        try:
            copy.unlink(missing_ok=True)  # an entry naming it now reads as a miss
            (copy.parent / "used" / copy.name).unlink(missing_ok=True)
            freed += sizes[copy]
        finally:
            os.close(fd)
    return freed


def _resolve_filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        return fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as e:
        raise ConfigError(
            f"{url}: {e}; fix the URL's scheme, or install the fsspec backend for it"
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
            f"cannot reach {url} ({_describe_root_cause(e)}); check that the server is up and reachable "
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


def _describe_root_cause(e: BaseException) -> str:
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {e}"


def _extract_validators(info: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies the remote file's current version: size, ETag, modification time."""

    def first(keys: tuple[str, ...]) -> str | None:
        return next((str(info[k]) for k in keys if info.get(k) is not None), None)

    return {"size": info.get("size"), "etag": first(_ETAG_KEYS), "modified": first(_MODIFIED_KEYS)}


def _find_reusable_copy(entry: Path, remote: dict[str, Any]) -> Path | None:
    """The copy ``entry`` names if it is for the same remote version and verifies, else None."""
    if not any(v is not None for v in remote.values()):
        return None  # nothing tells us whether the file changed
    try:
        meta = json.loads(entry.read_text())
        if meta["remote"] != remote or not _COPY.fullmatch(meta["copy"]):
            return None
        copy = entry.parent.parent / meta["copy"]
        st = copy.stat()
        if [st.st_size, st.st_mtime_ns, st.st_ino] == meta["stat"]:
            return copy
        if not _copy_matches_sha256(copy, content_sha256(copy)):
            return None  # damaged: download again, which replaces it
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no entry, a damaged one, or its copy was deleted
    # The copy was replaced by an identical one (e.g. another URL with the
    # same bytes): remember its new stat so the next reuse need not hash it.
    meta["stat"] = [st.st_size, st.st_mtime_ns, st.st_ino]
    atomic_write(entry, lambda f: f.write(json.dumps(meta).encode()))
    return copy


def _copy_matches_sha256(copy: Path, sha256: str) -> bool:
    """Whether ``copy`` exists and its bytes hash to ``sha256``."""
    try:
        with open(copy, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == sha256
    except FileNotFoundError:
        return False


def _download_to_cache(
    fs: fsspec.AbstractFileSystem,
    path: str,
    url: str,
    key: str,
    remote: dict[str, Any],
    entry: Path,
) -> Path:
    """Download ``url`` to its content-named copy and write its entry; the caller holds the lock."""
    directory = entry.parent.parent
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
    os.close(fd)
    try:
        try:
            fs.get_file(path, tmp)
        except Exception as e:  # fsspec backends raise their own exception types
            raise DataError(
                f"cannot download {url} ({_describe_root_cause(e)}); check that the server is up and the "
                "file still exists, then retry"
            ) from e
        size = os.path.getsize(tmp)
        if remote["size"] is not None and size != remote["size"]:
            raise DataError(
                f"downloading {url} gave {size} bytes but the server announced "
                f"{remote['size']}: the file changed during the download or the connection "
                "broke; retry"
            )
        with open(tmp, "rb") as f:
            sha256 = hashlib.file_digest(f, "sha256").hexdigest()
        copy = directory / f"{sha256}{_extract_url_suffixes(url)}"
        if _copy_matches_sha256(copy, sha256):
            os.unlink(tmp)  # keep the existing copy: other processes may have it open
        else:
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a shared cache must be readable by others
            os.replace(tmp, copy)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    st = copy.stat()
    meta = {
        "url": url,
        "sha256": sha256,
        "size": size,
        "remote": remote,
        "copy": copy.name,
        "stat": [st.st_size, st.st_mtime_ns, st.st_ino],
    }
    atomic_write(entry, lambda f: f.write(json.dumps(meta).encode()))
    return copy


def _extract_url_suffixes(url: str) -> str:
    """The URL file name's last two suffixes (enough for ``detect_format``), if plain."""
    suffixes = PurePosixPath(url_filename(url)).suffixes[-2:]
    return "".join(s for s in suffixes if _SUFFIX.fullmatch(s))


_private: tuple[int, Path] | None = None
_private_lock = threading.Lock()


def _private_dir() -> Path:
    """This process's private cache root, created on first use and removed at exit."""
    global _private
    with _private_lock:
        if _private is None or _private[0] != os.getpid():  # a forked child gets its own
            path = Path(tempfile.mkdtemp(prefix="zephon-io-"))
            atexit.register(_remove_private, os.getpid(), path)
            _private = (os.getpid(), path)
        return _private[1]


def _remove_private(pid: int, path: Path) -> None:
    if os.getpid() == pid:  # forked children inherit atexit handlers, not the directory
        shutil.rmtree(path, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a shared cache must be readable by others
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
