"""orchestrator.service.client.list_datasets and ``zephon datasets``: the data files under a
service's data roots, per dataset, never leaving the roots through a symlink."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator import cli
from orchestrator.service import client as service
from orchestrator.service.config import ServiceConfig, load_service


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """Two folder datasets and a one-file dataset, with files that are no data, a hidden
    file, symlinks leaving the root (a file and a folder), symlinks staying inside it (a
    file and a folder) and a symlink loop."""
    root = tmp_path / "data"
    write(root / "web" / "part-0.jsonl", 100)
    write(root / "web" / "2024" / "part-1.jsonl.zst", 50)
    write(root / "web" / "README.md", 7)  # read as text by the pipeline, but no dataset file
    write(root / "web" / ".part-2.jsonl.tmp", 9)  # hidden: a file being written
    write(root / "code" / "stdlib.parquet", 300)
    write(root / "code" / "notes.txt", 20)
    write(root / "code" / "archive.tar.gz", 5)  # compressed but not JSONL: unreadable
    write(root / "books.jsonl.gz", 40)
    write(root / "empty" / "LICENSE", 3)  # a folder without data files is no dataset
    outside = write(tmp_path / "secrets" / "passwords.jsonl", 1000)
    (root / "web" / "leak.jsonl").symlink_to(outside)
    (root / "escape").symlink_to(outside.parent, target_is_directory=True)
    (root / "code" / "web-part.jsonl").symlink_to(root / "web" / "part-0.jsonl")
    (root / "web" / "2024" / "again").symlink_to(root / "web", target_is_directory=True)
    (root / "code" / "web").symlink_to(root / "web", target_is_directory=True)
    return root


def test_datasets_files_sizes_and_totals_without_leaving_the_root(
    tmp_path: Path, data_root: Path
) -> None:
    missing = tmp_path / "not-mounted"
    svc = ServiceConfig(root=str(tmp_path / "svc"), data_roots=(str(data_root), str(missing)))
    listed = service.list_datasets(svc)

    assert listed["data_roots"] == [str(data_root), str(missing)]
    assert listed["missing_roots"] == [str(missing)]
    datasets = {d["name"]: d for d in listed["datasets"]}
    assert list(datasets) == ["books", "code", "web"]  # in name order; "empty" has no data
    files = {
        name: {f["path"]: (f["format"], f["bytes"]) for f in d["files"]}
        for name, d in datasets.items()
    }
    assert files == {
        "books": {str(data_root / "books.jsonl.gz"): ("jsonl.gz", 40)},
        "code": {
            str(data_root / "code" / "notes.txt"): ("text", 20),
            str(data_root / "code" / "stdlib.parquet"): ("parquet", 300),
            # symlinks inside the root are followed, as admission accepts them
            str(data_root / "code" / "web-part.jsonl"): ("jsonl", 100),
            str(data_root / "code" / "web" / "part-0.jsonl"): ("jsonl", 100),
            str(data_root / "code" / "web" / "2024" / "part-1.jsonl.zst"): ("jsonl.zst", 50),
        },
        "web": {
            str(data_root / "web" / "2024" / "part-1.jsonl.zst"): ("jsonl.zst", 50),
            str(data_root / "web" / "part-0.jsonl"): ("jsonl", 100),
        },
    }
    assert [d["total_bytes"] for d in datasets.values()] == [40, 570, 150]
    assert listed["total_bytes"] == 760
    assert datasets["web"]["path"] == str(data_root / "web")
    assert datasets["web"]["root"] == str(data_root)
    assert all(not d["truncated"] and d["file_count"] == len(d["files"]) for d in datasets.values())
    # the symlinks leaving the root are reported and not followed; so is the loop, in each
    # dataset that reaches it (web, after code linked it, is still listed whole)
    assert {s["path"]: s["reason"] for s in listed["skipped"]} == {
        str(data_root / "escape"): "a symlink leaving the data roots",
        str(data_root / "web" / "leak.jsonl"): "a symlink leaving the data roots",
        str(data_root / "code" / "web" / "leak.jsonl"): "a symlink leaving the data roots",
        str(data_root / "web" / "2024" / "again"): "a folder already listed",
        str(data_root / "code" / "web" / "2024" / "again"): "a folder already listed",
    }
    assert "passwords" not in json.dumps(listed)
    # every listed path is one admission accepts
    spec_paths = [f["path"] for d in listed["datasets"] for f in d["files"]]
    assert all(os.path.isabs(p) and p.startswith(str(data_root)) for p in spec_paths)


def test_a_long_file_list_is_cut_but_counted(tmp_path: Path, data_root: Path) -> None:
    svc = ServiceConfig(root=str(tmp_path / "svc"), data_roots=(str(data_root),))
    web = next(
        d
        for d in service.list_datasets(svc, max_files_per_dataset=1)["datasets"]
        if d["name"] == "web"
    )
    assert len(web["files"]) == 1 and web["file_count"] == 2 and web["truncated"]
    assert web["total_bytes"] == 150  # over all its files


def test_a_service_without_data_reports_its_default_root_missing(tmp_path: Path) -> None:
    listed = service.list_datasets(load_service(tmp_path / "svc"))
    assert listed["missing_roots"] == [str(tmp_path / "svc" / "data")]
    assert listed["datasets"] == [] and listed["total_bytes"] == 0


def test_cli_prints_one_json_object(
    tmp_path: Path, data_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = ServiceConfig(root=str(tmp_path / "svc"), data_roots=(str(data_root),))
    svc.save()  # `zephon datasets` reads the roots from service.json, as every client does
    assert cli.main(["datasets", "--root", str(svc.path), "--json"]) == 0
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in printed["datasets"]] == ["books", "code", "web"]
    assert printed == json.loads(json.dumps(service.list_datasets(svc)))
