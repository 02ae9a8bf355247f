"""``ShardCache``: verified local copies of remote shards, shared between processes.

A remote shard is copied to local disk by ``ShardCache.local_copy``, named by the SHA-256 of
its bytes (so a shard's fingerprint is the same wherever its bytes came from) and shared
between processes through a per-URL ``flock`` and atomic renames: a killed process leaves at
most a temp file, and no cache entry ever names a missing or partial copy.
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
from pathlib import Path, PurePosixPath
from typing import Any

import fsspec

from pipeline.errors import DataError
from pipeline.filelock import file_lock
from pipeline.io.atomic import atomic_write
from pipeline.io.options import IOOptions
from pipeline.io.remote_files import (
    describe_root_cause,
    remote_validators,
    resolve_filesystem,
    url_filename,
)

_COPY = re.compile(r"[0-9a-f]{64}(\.[A-Za-z0-9_-]+)*")
_SUFFIX = re.compile(r"\.[A-Za-z0-9_-]{1,32}")


def content_sha256(copy: Path) -> str:
    """SHA-256 of a copy returned by ``ShardCache.local_copy``, read from its name."""
    return copy.name[:64]


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
        fs, path = resolve_filesystem(url)
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
                copy = _download_to_cache(fs, path, url=url, key=key, remote=remote, entry=entry)
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
    *,
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
                f"cannot download {url} ({describe_root_cause(e)}); check that the server is up and the "
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
