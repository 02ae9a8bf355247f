"""Remote shards over a real HTTP server on 127.0.0.1, and their local copies (``ShardCache``)."""

from __future__ import annotations

import gc
import hashlib
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError, DataError
from pipeline.io import IOOptions, ShardCache
from tests.support.processes import forked_process_context

CACHE_ON = {"cache": {"enabled": True}}

# A static file server that appends the path of every GET to a log file (HEAD
# requests are not logged: they are the cheap validation). It delays each GET
# by argv[3] seconds, so that concurrent clients overlap; it sends only half
# of the first GET under /stall/ before hanging, to simulate a broken
# download, and answers every GET under /fail/ with an error 500.
SERVER = r"""
import functools, http.server, sys, threading, time

root, log, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
stalled = set()
lock = threading.Lock()

class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        with lock, open(log, "a") as f:
            f.write(self.path + "\n")
        time.sleep(delay)
        if self.path.startswith("/fail/"):
            self.send_error(500)
            return
        with lock:
            stall = self.path.startswith("/stall/") and self.path not in stalled
            stalled.add(self.path)
        if stall:
            data = open(self.translate_path(self.path), "rb").read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            time.sleep(60)
            return
        super().do_GET()

    def log_message(self, *args):
        pass

handler = functools.partial(Handler, directory=root)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@dataclass
class Server:
    root: Path
    log: Path
    proc: subprocess.Popen[str]
    port: int

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def gets(self) -> list[str]:
        """Paths of the GET requests served so far, in order."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZEPHON_HOME", str(tmp_path / "home"))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a file server over ``tmp_path/"served"``; the port is the one it bound."""
    servers: list[Server] = []
    script = tmp_path / "server.py"
    script.write_text(SERVER)

    def start(delay: float = 0.0) -> Server:
        root = tmp_path / "served"
        root.mkdir(exist_ok=True)
        log = tmp_path / f"gets-{len(servers)}.log"
        args = [sys.executable, str(script), str(root), str(log), str(delay)]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        # The port is printed after the socket listens, so it accepts connections now.
        server = Server(root, log, proc, int(proc.stdout.readline()))
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.proc.poll() is None:
            server.stop()


def texts(tag: str, n: int) -> list[str]:
    return [f"{tag} doc {i} héllo ✓ " + "x" * i for i in range(n)]


def write_zst(path: Path, docs: list[str]) -> Path:
    raw = b"".join(orjson.dumps({"text": t}) + b"\n" for t in docs)
    path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    return path


def write_parquet(path: Path, docs: list[str]) -> Path:
    pq.write_table(pa.table({"text": docs}), path, row_group_size=7)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def all_texts(ds: Dataset) -> list[str]:
    return ds.read_texts(range(ds.num_records))


@pytest.fixture
def shards(serve: Callable[..., Server], tmp_path: Path) -> tuple[Server, list[Path]]:
    """A server over one JSONL.zst and one Parquet shard."""
    server = serve()
    files = [
        write_zst(server.root / "a.jsonl.zst", texts("a", 30)),
        write_parquet(server.root / "b.parquet", texts("b", 20)),
    ]
    return server, files


def test_http_shards_read_like_local_ones(shards, tmp_path: Path) -> None:
    server, files = shards
    urls = [server.url(f.name) for f in files]
    local = Dataset("d", [str(f) for f in files], cache_dir=tmp_path / "local-cache")
    remote = Dataset("d", urls, cache_dir=tmp_path / "cache", io_options=CACHE_ON)
    assert remote.shards == urls
    assert all_texts(remote) == all_texts(local) == texts("a", 30) + texts("b", 20)
    assert remote.shard_fingerprints == [sha256(f) for f in files]
    assert remote.fingerprint == local.fingerprint


def test_cached_copy_is_reused_without_downloading(shards, tmp_path: Path) -> None:
    server, files = shards
    urls = [server.url(f.name) for f in files]
    cache = tmp_path / "cache"
    first = Dataset("d", urls, cache_dir=cache, io_options=CACHE_ON)
    assert first.num_records == 50
    assert server.gets() == ["/a.jsonl.zst", "/b.parquet"]
    second = Dataset("d", urls, cache_dir=cache, io_options=CACHE_ON)
    assert second.fingerprint == first.fingerprint
    assert all_texts(second) == all_texts(first)
    assert len(server.gets()) == 2
    assert (cache / "remote" / f"{sha256(files[0])}.jsonl.zst").is_file()
    assert (cache / "remote" / f"{sha256(files[1])}.parquet").is_file()


def test_changed_remote_file_is_downloaded_again(shards, tmp_path: Path) -> None:
    server, files = shards
    urls = [server.url(f.name) for f in files]
    cache = tmp_path / "cache"
    old = Dataset("d", urls, cache_dir=cache, io_options=CACHE_ON)
    old_texts = all_texts(old)
    write_zst(files[0], texts("new", 40))
    new = Dataset("d", urls, cache_dir=cache, io_options=CACHE_ON)
    assert all_texts(new) == texts("new", 40) + texts("b", 20)
    assert new.fingerprint != old.fingerprint
    assert new.shard_fingerprints[0] == sha256(files[0])
    assert server.gets() == ["/a.jsonl.zst", "/b.parquet", "/a.jsonl.zst"]
    assert all_texts(old) == old_texts  # copies are immutable: the old snapshot stays readable


def test_damaged_copy_is_detected_and_downloaded_again(shards, tmp_path: Path) -> None:
    server, files = shards
    cache = ShardCache(IOOptions.parse(CACHE_ON), tmp_path / "cache")
    copy = cache.local_copy(server.url("b.parquet"))
    data = bytearray(copy.read_bytes())
    data[100] ^= 0xFF
    copy.write_bytes(data)  # same size, new mtime
    assert cache.local_copy(server.url("b.parquet")) == copy
    assert sha256(copy) == sha256(files[1])
    assert server.gets() == ["/b.parquet", "/b.parquet"]


def _fetch(url: str, cache_dir: str, barrier, results) -> None:
    """Child process: wait for the others, then ask for a local copy of ``url``."""
    if barrier is not None:
        barrier.wait()
    path = ShardCache(IOOptions.parse(CACHE_ON), Path(cache_dir)).local_copy(url)
    if results is not None:
        results.put(str(path))


def test_concurrent_processes_download_once(serve, tmp_path: Path) -> None:
    server = serve(delay=0.5)  # a slow GET: every process asks while the first downloads
    write_zst(server.root / "a.jsonl.zst", texts("a", 200))
    ctx = forked_process_context(__name__)
    barrier, results = ctx.Barrier(4), ctx.Queue()
    cache = tmp_path / "cache"
    args = (server.url("a.jsonl.zst"), str(cache), barrier, results)
    procs = [ctx.Process(target=_fetch, args=args) for _ in range(4)]
    for p in procs:
        p.start()
    paths = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert server.gets() == ["/a.jsonl.zst"]
    assert len(set(paths)) == 1
    assert sha256(Path(paths[0])) == sha256(server.root / "a.jsonl.zst")
    assert list((cache / "remote").rglob("*.tmp")) == []


def test_killed_download_leaves_only_a_temp_file(serve, tmp_path: Path) -> None:
    server = serve()
    (server.root / "stall").mkdir()
    served = write_zst(server.root / "stall" / "a.jsonl.zst", texts("a", 2000))
    url = server.url("stall/a.jsonl.zst")
    cache = tmp_path / "cache"
    ctx = forked_process_context(__name__)
    child = ctx.Process(target=_fetch, args=(url, str(cache), None, None))
    child.start()
    deadline = time.monotonic() + 30
    while not [t for t in (cache / "remote").glob(".*.tmp") if t.stat().st_size]:
        assert time.monotonic() < deadline, "the download never started"
        time.sleep(0.05)
    child.kill()  # mid-download: the server sent half the file and hangs
    child.join()
    remote = cache / "remote"
    (left,) = [p for p in remote.iterdir() if p.is_file()]
    assert left.name.endswith(".tmp")
    assert list((remote / "urls").glob("*")) == []
    ds = Dataset("d", [url], cache_dir=cache, io_options=CACHE_ON)
    assert all_texts(ds) == texts("a", 2000)
    assert ds.shard_fingerprints == [sha256(served)]
    assert list(remote.rglob("*.tmp")) == []  # the dead process's temp file is cleaned up


def test_unreachable_server_raises_naming_the_url(shards, tmp_path: Path) -> None:
    server, files = shards
    url = server.url(files[0].name)
    cache = tmp_path / "cache"
    ds = Dataset("d", [url], cache_dir=cache, io_options=CACHE_ON)
    server.stop()
    with pytest.raises(
        DataError, match=rf"dataset 'd': cannot reach {re.escape(url)}.*server is up"
    ):
        _ = ds.num_records
    assert not (cache / "remote").exists()
    with pytest.raises(DataError, match=f"dataset 'd': cannot reach {re.escape(url)}"):
        Dataset("d", [url], cache_dir=cache, io_options=CACHE_ON)


def test_http_error_during_download_leaves_the_cache_as_it_was(serve, tmp_path: Path) -> None:
    server = serve()
    (server.root / "fail").mkdir()
    write_zst(server.root / "fail" / "a.jsonl.zst", texts("a", 10))
    url = server.url("fail/a.jsonl.zst")
    cache = tmp_path / "cache"
    ds = Dataset("d", [url], cache_dir=cache, io_options=CACHE_ON)  # HEAD succeeds
    with pytest.raises(DataError, match=rf"dataset 'd': cannot download {re.escape(url)} .*500"):
        _ = ds.num_records
    assert [p.name for p in (cache / "remote").iterdir()] == ["locks"]


def test_missing_remote_file_is_a_config_error(shards, tmp_path: Path) -> None:
    server, _ = shards
    url = server.url("nope.jsonl")
    with pytest.raises(ConfigError, match=f"dataset 'd': {re.escape(url)} does not exist"):
        Dataset("d", [server.url("a.jsonl.zst"), url], cache_dir=tmp_path)


def test_http_glob_asks_for_a_list(shards, tmp_path: Path) -> None:
    server, _ = shards
    with pytest.raises(ConfigError, match=r"glob patterns are not supported.*list the files"):
        Dataset("d", [server.url("*.jsonl.zst")], cache_dir=tmp_path)


def test_cache_disabled_downloads_to_a_private_directory(shards, tmp_path: Path) -> None:
    server, files = shards
    urls = [server.url(f.name) for f in files]
    cache = tmp_path / "cache"
    local = Dataset("d", [str(f) for f in files], cache_dir=tmp_path / "local-cache")
    first = Dataset("d", urls, cache_dir=cache)
    assert first.fingerprint == local.fingerprint
    assert all_texts(first) == all_texts(local)
    second = Dataset("d", urls, cache_dir=cache, io_options={"cache": {"enabled": False}})
    assert second.fingerprint == local.fingerprint
    assert len(server.gets()) == 2  # reused within the process
    assert not (cache / "remote").exists()
    assert not (cache / "decompressed").exists()  # nor a decompressed copy of remote data


def test_private_directory_is_removed_at_exit(shards, tmp_path: Path) -> None:
    server, _ = shards
    code = (
        "import sys; from pathlib import Path; from pipeline.io import IOOptions, ShardCache; "
        "print(ShardCache(IOOptions(), Path(sys.argv[2])).local_copy(sys.argv[1]))"
    )
    cache = tmp_path / "cache"
    out = subprocess.run(
        [sys.executable, "-c", code, server.url("b.parquet"), str(cache)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    copy = Path(out.strip())
    assert copy.name.endswith(".parquet")
    assert not copy.parent.parent.exists()  # <private dir>/remote/<copy>
    assert not cache.exists()


def test_file_urls_are_read_in_place(shards, tmp_path: Path) -> None:
    _, files = shards
    cache = tmp_path / "cache"
    by_url = Dataset("d", [f.as_uri() for f in files], cache_dir=cache, io_options=CACHE_ON)
    by_path = Dataset("d", [str(f) for f in files], cache_dir=cache)
    assert by_url.shards == files
    assert by_url.fingerprint == by_path.fingerprint
    assert not (cache / "remote").exists()


def test_a_size_limited_cache_evicts_the_least_recently_used_copies_not_in_use(
    serve, tmp_path: Path
) -> None:
    server = serve()
    files = [write_parquet(server.root / f"p{i}.parquet", texts(f"p{i}", 30)) for i in range(4)]
    size = files[0].stat().st_size
    urls = [server.url(f.name) for f in files]
    limited = {"cache": {"enabled": True, "max_bytes": int(2.5 * size)}}
    cache = tmp_path / "cache"
    remote = cache / "remote"

    def copies() -> set[str]:
        return {p.name[:64] for p in remote.glob("*.parquet")}

    reader = Dataset("d", urls[:2], cache_dir=cache, io_options=limited)
    assert reader.read_records([0, 1 << 32]) == ["p0 doc 0 héllo ✓ ", "p1 doc 0 héllo ✓ "]
    other = Dataset("d", urls[2:], cache_dir=cache, io_options=limited)
    other.read_records([0])
    # p0 and p1 are open in `reader`: the cache stays above its limit rather than evict them
    assert copies() == {sha256(f) for f in files[:3]}
    del reader
    gc.collect()
    other.read_records([1 << 32])  # downloads p3, evicts the oldest copies no longer in use
    assert copies() == {sha256(f) for f in files[2:]}
    assert sum(p.stat().st_size for p in remote.glob("*.parquet")) <= 2.5 * size
    again = Dataset("d", urls[:1], cache_dir=cache, io_options=limited)
    assert again.read_records([3]) == [texts("p0", 30)[3]]  # fetched again, same bytes
    assert server.gets().count("/p0.parquet") == 2
