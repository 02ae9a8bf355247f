"""Arrow and MDS shards over HTTP: downloaded whole by the IO cache, read like local ones."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.mds_shards import MDS_FIXTURES, copy_fixture, fixture_texts, sha256
from tests.support.shard_files import make_dataset

pytestmark = pytest.mark.filterwarnings("ignore:dataset .* skipped:UserWarning")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served on 127.0.0.1, and its base URL."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(10)


def test_remote_mds_and_arrow_shards_read_like_local_ones(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    root, base = served
    copy_fixture("zstd", root)
    urls = [f"{base}/zstd/shard.0000{i}.mds.zstd" for i in range(3)]
    remote = make_dataset(tmp_path, urls, name="r")
    local = make_dataset(tmp_path, MDS_FIXTURES / "zstd", name="l")
    assert remote.read_texts(range(remote.num_records)) == [t for t in fixture_texts() if t]
    assert remote.shard_fingerprints == local.shard_fingerprints
    assert remote.shard_fingerprint(0) == sha256(root / "zstd" / "shard.00000.mds.zstd")

    table = pa.table({"text": ["over", "http"]})
    with pa.OSFile(str(root / "a.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    arrow = make_dataset(tmp_path, f"{base}/a.arrow", name="a")
    assert arrow.read_texts([0, 1]) == ["over", "http"]
