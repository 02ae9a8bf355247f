"""Tests of the local multi-domain corpus builder (no network, nothing under /usr/share):
its sources and what it skips (a fake standard library), the main job's build with
/usr/share hidden, the held-out settings of conf/main.yaml on it, and the build's
determinism, cap and manifest (small capped builds)."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import zstandard
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from demo import local_corpus
from demo.local_corpus import DOMAINS, MANIFEST_NAME, build_local_corpus
from orchestrator.experiment.config import load_data_section
from orchestrator.experiment.fingerprints import build_pipeline
from pipeline import load_tokenizer
from pipeline.errors import ConfigError
from sweeps.app import CONFIG_PATH
from tests.support import REPO
from tests.support.sweeps import datasets_override

CAP = 200_000
MAIN_JOB_CAP = 3_000_000
"""``${zephon_local_corpus:3}`` in conf/data/stdlib.yaml: 3 MB a domain."""


def _records(path: Path) -> list[dict]:
    name = path.name
    if name.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    if name.endswith(".jsonl.zst"):
        data = zstandard.ZstdDecompressor().decompress(path.read_bytes())
    elif name.endswith(".jsonl.gz"):
        data = gzip.decompress(path.read_bytes())
    else:
        raise AssertionError(f"unexpected shard {path}")
    return [orjson.loads(line) for line in data.splitlines()]


def _domain_records(shards: dict[str, list[Path]]) -> dict[str, list[dict]]:
    return {d: [r for p in paths for r in _records(p)] for d, paths in shards.items()}


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Path]]]:
    out = tmp_path_factory.mktemp("corpus")
    return out, build_local_corpus(out, max_bytes_per_domain=CAP)


HIDE_USR_SHARE = """
import os, sys
from pathlib import Path
from demo.local_corpus import build_local_corpus

def hide_usr_share(event, args):
    # Every open and listing under /usr/share fails as if it were empty.
    if event in ("open", "os.listdir", "os.scandir") and isinstance(args[0], (str, bytes, Path)):
        if os.fsdecode(args[0]).startswith("/usr/share"):
            raise FileNotFoundError(args[0])

sys.addaudithook(hide_usr_share)
build_local_corpus(Path(sys.argv[1]), max_bytes_per_domain=int(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def hidden_usr_share(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The main job's corpus, built by a Python that cannot see anything under /usr/share."""
    out = tmp_path_factory.mktemp("hidden-usr-share")
    subprocess.run(
        [sys.executable, "-c", HIDE_USR_SHARE, str(out), str(MAIN_JOB_CAP)],
        cwd=REPO,
        check=True,
        timeout=300,
    )
    return build_local_corpus(out, max_bytes_per_domain=MAIN_JOB_CAP)  # reads the manifest


def test_without_usr_share_the_corpus_is_the_same(
    hidden_usr_share: dict[str, list[Path]], corpus: dict[str, list[Path]]
) -> None:
    """``corpus`` (tests/conftest.py): the same build in this process, /usr/share visible."""
    assert list(hidden_usr_share) == list(DOMAINS) == ["code", "docs", "unicode"]
    for domain, paths in hidden_usr_share.items():
        assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in corpus[domain]], domain


def test_main_job_domains_differ_in_bytes_per_token_and_hold_out_in_full(
    hidden_usr_share: dict[str, list[Path]], zephon_cache: Path
) -> None:
    """conf/main.yaml's data section on the corpus: the plan's calibration tells the
    domains apart, and every domain holds out ``holdout_docs`` documents (a quarter of
    its records at most) without ConfigError."""
    conf_module = CONFIG_PATH.removeprefix("pkg://")  # zephon-run's config tree
    with initialize_config_module(config_module=conf_module, version_base="1.3"):
        cfg = compose(config_name="main", overrides=[datasets_override(hidden_usr_share)])
    data = load_data_section(
        {**OmegaConf.to_container(cfg.data, resolve=True), "cache_dir": str(zephon_cache)}
    )
    pipeline = build_pipeline(data, dp_size=1, dp_rank=0, microbatch_size=cfg.train.microbatch_size)
    try:
        source = pipeline.source
        bytes_per_token = {n: 1 / t for n, t in source.calibrate(load_tokenizer("gpt2")).items()}
        for index, dataset in enumerate(source.datasets):
            assert len(source.heldout_records(index)) == data.holdout_docs, dataset.name
            scored = source.heldout_documents(index)
            assert 0 < sum(len(t.encode()) for t in scored) <= data.holdout_bytes, dataset.name
    finally:
        pipeline.close()
    # Measured (docs/design/benchmarks_local_corpus.md): unicode 1.03, code 2.24, docs 3.53.
    assert bytes_per_token["unicode"] < 1.3
    assert bytes_per_token["code"] > 1.5 * bytes_per_token["unicode"]
    assert bytes_per_token["docs"] > 1.3 * bytes_per_token["code"]


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))


def test_sources_come_from_the_root_and_skip_what_installs_differ_in(tmp_path: Path) -> None:
    stdlib = tmp_path / "lib"
    documented = '''
        """Module a."""


        def f():
            """Function f."""
        '''
    _write(
        stdlib,
        {
            "a.py": documented,
            "pkg/b.py": "x = 1\n",
            "pydoc_data/topics.py": "topics = {'with': 'The with statement.', 'if': 'If.'}\n",
            "empty.py": "\n",
            "latin1.py": b"s = '\xff'\n",
            "notes.txt": "not a source\n",
            "_sysconfigdata__linux.py": "build_time_vars = {}\n",
            "config-3.11-x86_64-linux-gnu/python-config.py": "x = 1\n",
            "site-packages/third_party.py": documented,
            "dist-packages/third_party.py": documented,
            "test/test_a.py": documented,
            "pkg/tests/test_b.py": documented,
            "idlelib/idle_test/test_c.py": documented,
        },
    )
    records = _domain_records(build_local_corpus(tmp_path / "out", 20_000, stdlib_root=stdlib))
    assert [r["id"] for r in records["code"]] == [
        "stdlib/a.py",
        "stdlib/pkg/b.py",
        "stdlib/pydoc_data/topics.py",
    ]
    assert records["docs"] == [
        {"id": "pydoc-topics/if", "text": "If."},
        {"id": "pydoc-topics/with", "text": "The with statement."},
        {"id": "docstrings/a.py", "text": "Module a.\n\nFunction f."},
    ]
    # unicode comes from unicodedata, whatever the root: ASCII's graphic characters first.
    first = records["unicode"][0]
    assert first["id"] == "unicode/U+0000"
    assert first["text"].splitlines()[0] == "!\"#$%&'()*+,-./0123456789:;<=>?"


def test_domains_non_empty_and_readable(small_corpus: tuple[Path, dict[str, list[Path]]]) -> None:
    _, shards = small_corpus
    assert list(shards) == list(DOMAINS)
    for domain, records in _domain_records(shards).items():
        assert records, domain
        assert all(isinstance(r["text"], str) and r["text"].strip() for r in records), domain
        assert len({r["id"] for r in records}) == len(records), domain


def test_cap_and_manifest(small_corpus: tuple[Path, dict[str, list[Path]]]) -> None:
    out, shards = small_corpus
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert set(manifest["domains"]) == set(shards)
    for domain, records in _domain_records(shards).items():
        info = manifest["domains"][domain]
        assert info["files"] == len(shards[domain])
        assert info["records"] == len(records)
        assert info["bytes"] == sum(len(r["text"].encode()) for r in records)
        jsonl = b"".join(orjson.dumps(r) + b"\n" for r in records)
        assert info["sha256"] == hashlib.sha256(jsonl).hexdigest()
        # Hard cap unless a single first record is larger than it.
        assert info["bytes"] <= CAP or info["records"] == 1


def test_deterministic_and_idempotent(
    small_corpus: tuple[Path, dict[str, list[Path]]], tmp_path: Path
) -> None:
    out, shards = small_corpus
    again = build_local_corpus(tmp_path, max_bytes_per_domain=CAP)
    assert _tree(tmp_path) == _tree(out)
    assert {d: [p.relative_to(tmp_path) for p in ps] for d, ps in again.items()} == {
        d: [p.relative_to(out) for p in ps] for d, ps in shards.items()
    }
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert build_local_corpus(tmp_path, max_bytes_per_domain=CAP) == again
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == mtimes


def test_rebuild_on_other_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A shard of a domain no longer built (an older format's), and many small shards
    # first, so the rebuild has stale shards to remove.
    _write(tmp_path, {"i18n/shard-00000.parquet": b"old"})
    monkeypatch.setattr(local_corpus, "SHARD_TARGET_BYTES", 5_000)
    small = build_local_corpus(tmp_path, max_bytes_per_domain=50_000)
    small_records = sum(len(_records(p)) for p in small["code"])
    assert len(small["code"]) > 1
    monkeypatch.undo()
    bigger = build_local_corpus(tmp_path, max_bytes_per_domain=CAP)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["params"]["max_bytes_per_domain"] == CAP
    assert sum(len(_records(p)) for p in bigger["code"]) > small_records
    on_disk = sorted(p for p in tmp_path.rglob("shard-*"))
    assert on_disk == sorted(p for ps in bigger.values() for p in ps)


def test_split_cuts_long_sources_at_line_boundaries() -> None:
    text = "".join(f"line {i} ünïcode\n" for i in range(100)) + "x" * 500
    parts = list(
        local_corpus._split_long_records(
            [{"id": "a", "text": text}, {"id": "b", "text": "ok"}], 200
        )
    )
    assert "".join(p["text"] for p in parts[:-1]) == text
    assert [p["id"] for p in parts[:2]] == ["a#0", "a#1"] and parts[-1] == {"id": "b", "text": "ok"}
    # Every part fits, except the one overlong line, which stays whole.
    assert all(len(p["text"].encode()) <= 200 for p in parts if not p["text"].startswith("x"))


def test_rejects_non_positive_cap_and_missing_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        build_local_corpus(tmp_path, max_bytes_per_domain=0)
    with pytest.raises(ConfigError, match="is not a folder"):
        build_local_corpus(tmp_path, stdlib_root=tmp_path / "missing")
