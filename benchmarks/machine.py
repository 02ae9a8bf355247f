"""The machine a benchmark ran on, in one line for its report, and what a results file records
of how it was made."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.machine.precision import cpu_model

REPO_ROOT = Path(__file__).resolve().parent.parent


def package_version(package: str) -> str:
    """The installed version of ``package``, or ``not installed``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe_machine(packages: Sequence[str], cpus: str = "CPUs") -> str:
    """``"<n> <cpus>, Python <v>, <package> <v>, ..."``."""
    versions = ", ".join(f"{p} {package_version(p)}" for p in packages)
    return f"{os.cpu_count()} {cpus}, Python {platform.python_version()}, {versions}"


def provenance(command: str, packages: Sequence[str]) -> dict[str, str]:
    """What a results file records of how it was made: ``command``, the commit, the CPU, the
    machine (with ``packages``' versions) and the date."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT
    ).stdout.strip()
    return {
        "command": command,
        "commit": commit,
        "cpu": cpu_model(),
        "machine": describe_machine(packages),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
