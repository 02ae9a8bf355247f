"""``io_options``: every mistake refused with a ConfigError saying what to write instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.dataset import Dataset
from pipeline.errors import ConfigError
from pipeline.io import IOOptions, RemoteRead


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"cahce": {}}, r"unknown keys \['cahce'\]; known keys: \['cache', 'remote_read'\]"),
        (
            {"cache": {"enable": True}},
            r"unknown keys \['enable'\]; known keys: \['dir', 'enabled', 'max_bytes'\]",
        ),
        ({"cache": {"enabled": "yes"}}, "must be True or False"),
        ({"cache": True}, r"io_options\[\"cache\"\] must be a dict"),
        ({"cache": {"dir": 3}}, "must be a directory path"),
    ],
)
def test_bad_io_options_raise_config_error(tmp_path: Path, options, match: str) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(ConfigError, match=f"dataset 'd': .*{match}"):
        Dataset("d", [str(tmp_path / "a.jsonl")], io_options=options)


@pytest.mark.parametrize("max_bytes", [-1, "1GB", True])
def test_a_bad_cache_limit_is_refused(tmp_path: Path, max_bytes: object) -> None:
    with pytest.raises(ConfigError, match=r'\["max_bytes"\] must be an integer >= 0'):
        IOOptions.parse({"cache": {"enabled": True, "max_bytes": max_bytes}})


@pytest.mark.parametrize("value", ["ranges", 1, ["range"]])
def test_a_bad_remote_read_is_refused_listing_the_choices(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\['download', 'range'\]"):
        IOOptions.parse({"remote_read": value})
    assert IOOptions.parse({"remote_read": "range"}).remote_read is RemoteRead.RANGE
