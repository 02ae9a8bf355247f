"""The comparison plot (orchestrator.guard.plot)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from orchestrator.guard import compare, plot
from tests.support.guard_runs import four_runs, make_run


def test_an_accepted_comparison_is_drawn_as_a_png(tmp_path: Path) -> None:
    runs = four_runs()
    png = plot(compare(runs), runs, tmp_path / "out" / "cmp.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width > 400 and height > 400


def test_plot_refuses_refused_comparison(tmp_path: Path) -> None:
    result = compare([make_run("a")])
    with pytest.raises(ValueError, match="accepted"):
        plot(result, [], tmp_path / "x.png")
