"""``function``: a user's own filter or transform, ``module:function``.

The function takes a record's text and returns a bool (keep or drop), or a string (the text
to train on) or None (drop). Its source file's SHA-256 is part of the data contract, as a
tokenizer file's is: editing the filter changes the contract, and the guard names
``data.process``.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError
from pipeline.processing.step import ProcessStep, StepKind


class UserFunction(ProcessStep):
    """A user's ``module:function`` (see the module docstring)."""

    kind = StepKind.FUNCTION

    def __init__(self, path: str) -> None:
        self.path = path
        self._function = _load(path)
        source = inspect.getsourcefile(self._function)
        if source is None:
            raise ConfigError(f"process function {path!r} has no source file to fingerprint")
        self.source_sha256 = hashlib.sha256(Path(source).read_bytes()).hexdigest()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_function": None}

    def apply(self, text: str) -> str | None:
        if self._function is None:
            self._function = _load(self.path)
        result = self._function(text)
        if isinstance(result, bool):
            return text if result else None
        if result is None or isinstance(result, str):
            return result
        raise TypeError(
            f"process function {self.path!r} returned {type(result).__name__}; it must return "
            "a bool (keep or drop), a str (the text to train on) or None (drop)"
        )

    def settings(self) -> dict[str, Any]:
        return {"function": self.path}

    def contract(self) -> dict[str, Any]:
        return {**super().contract(), "source_sha256": self.source_sha256}


def _load(path: str) -> Callable[[str], Any]:
    """The function ``module:name`` names; ConfigError saying what is wrong."""
    module_name, sep, name = path.partition(":")
    if not sep or not module_name or not name:
        raise ConfigError(
            f"process function {path!r} is not 'module:function', e.g. 'mypkg.filters:keep'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"process function {path!r}: module {module_name!r} cannot be imported ({e}); "
            "put its folder on PYTHONPATH or install its package"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"process function {path!r}: {module_name} has no function {name!r}")
    return function
