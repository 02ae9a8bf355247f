"""Helpers shared by the tests: pipelines, multi-rank runs, TorchTitan launches and configs."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (subprocesses get it as PYTHONPATH)."""
