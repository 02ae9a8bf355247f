"""The machine a benchmark ran on, in one line for its report."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Sequence


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
