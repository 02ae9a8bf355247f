"""An S3 endpoint on 127.0.0.1 (moto's server: the S3 HTTP API, ETags and ranged GETs) behind
a TCP proxy that counts the bytes it sends back and logs the requests' first lines, so tests
and benchmarks can tell what a reader fetched. Needs the `dev` extra (moto[server], s3fs,
boto3)."""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import boto3
import s3fs
from moto.server import ThreadedMotoServer

BUCKET = "zephon-shards"  # S3 bucket names need 3+ characters
# A request's first line. botocore and aiohttp send one request at a time on a connection
# (no pipelining), so a request starts a chunk read from the client.
_REQUEST_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.[01]\r\n")
_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "zephon-test",
    "AWS_SECRET_ACCESS_KEY": "zephon-test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class CountingProxy:
    """Forwards TCP connections from a local port to ``upstream``, counting the bytes that
    flow back (what a client downloaded, headers included)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._received = 0
        self._requests: list[tuple[str, str]] = []
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept_connections, daemon=True).start()

    @property
    def bytes_sent_to_clients(self) -> int:
        """Bytes sent back to clients since the last ``reset``."""
        with self._lock:
            return self._received

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path with query) of each request since the last ``reset``, in order."""
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self._received = 0
            self._requests.clear()

    def close(self) -> None:
        """Stop accepting and close every open connection."""
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _accept_connections(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                request = None if counted else _REQUEST_LINE.match(data)
                with self._lock:
                    if counted:
                        self._received += len(data)
                    elif request:
                        self._requests.append((request[1].decode(), request[2].decode()))
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@dataclass
class ObjectStore:
    """One bucket of a local S3 endpoint; fsspec's ``s3://`` reaches it through the proxy."""

    endpoint: str
    proxy: CountingProxy

    def url(self, key: str) -> str:
        """The ``s3://`` URL of ``key`` in the bucket."""
        return f"s3://{BUCKET}/{key}"

    def object_gets(self, key: str) -> int:
        """GET requests of the object ``key`` (whole or ranged) since the proxy's last reset."""
        path = f"/{BUCKET}/{key}"
        return sum(m == "GET" and p.split("?", 1)[0] == path for m, p in self.proxy.requests)

    def put(self, key: str, data: bytes) -> None:
        """Write (or overwrite: a new ETag) an object, without counting its bytes."""
        client = boto3.client("s3", endpoint_url=self.endpoint)
        client.put_object(Bucket=BUCKET, Key=key, Body=data)


@contextmanager
def local_object_store() -> Iterator[ObjectStore]:
    """Start the endpoint and the proxy, point fsspec's S3 at them (environment variables,
    which botocore reads), and stop everything afterwards."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = CountingProxy((host, port))
    endpoint = f"http://127.0.0.1:{proxy.port}"
    settings = {**_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)  # child processes (a benchmark's) reach the endpoint too
    s3fs.S3FileSystem.clear_instance_cache()  # an instance keeps the endpoint it was made with
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        yield ObjectStore(endpoint, proxy)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        proxy.close()
        server.stop()
