"""TorchTitan without the imports that Zephon's trainer never uses, until something uses them.

Two TorchTitan modules that ``torchtitan.trainer`` imports take one to three names from
heavy modules at import time, for features Zephon does not use:

* ``hf_datasets.text_datasets`` (through ``components.validate``, for the stock
  validation loader) from Hugging Face ``datasets``, which imports pandas and requests:
  ~1.2 s of CPU;
* ``distributed.activation_checkpoint`` (for selective activation checkpointing) from
  ``torch._functorch.partitioners``, which imports networkx: ~0.3 s.

Every process that imports the trainer pays them, the warm server included, where they
are on the start-up's critical path. :func:`defer` imports each such module with
stand-ins for those names; the first use of any of them imports the real module and
puts the real objects back, so TorchTitan's stock loaders, selective activation
checkpointing and lm-eval (which imports ``datasets`` itself) work as before.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from collections.abc import Mapping
from typing import Any

DEFERRED: dict[str, dict[str, tuple[str, ...]]] = {
    "torchtitan.hf_datasets.text_datasets": {
        "datasets": ("Dataset", "load_dataset"),
        "datasets.distributed": ("split_dataset_by_node",),
    },
    "torchtitan.distributed.activation_checkpoint": {
        "torch._functorch.partitioners": ("get_default_op_list",),
    },
}
"""Importer -> the names it imports from each deferred module."""


def defer() -> list[str]:
    """Import each importer of :data:`DEFERRED` with its modules deferred, unless it or
    one of them is imported already; the importers so imported. Run it after
    ``cpu_compat.apply()``."""
    return [importer for importer, sources in DEFERRED.items() if _import(importer, sources)]


def _import(importer: str, sources: Mapping[str, tuple[str, ...]]) -> bool:
    """Import ``importer`` with stand-ins for ``sources``; False (nothing done) if it or
    they are imported already, or if it needs more of them than the stand-ins hold."""
    if importer in sys.modules or any(source in sys.modules for source in sources):
        return False
    spec = importlib.util.find_spec(importer)
    if spec is None or spec.origin is None:
        return False
    # Its other imports first: while the stand-ins are in sys.modules, only its own body runs.
    for name in _module_imports(spec.origin, sources):
        importlib.import_module(name)
    stand_ins = {
        source: _stand_in(importer, sources, source, names) for source, names in sources.items()
    }
    sys.modules.update(stand_ins)
    try:
        importlib.import_module(importer)
    except ImportError:  # it imports another name than these: it gets the real modules
        sys.modules.pop(importer, None)
        return False
    finally:  # only the importer holds the stand-ins; any later import gets the real module
        for source, module in stand_ins.items():
            if sys.modules.get(source) is module:
                del sys.modules[source]
    return True


def _module_imports(path: str, deferred: Mapping[str, Any]) -> list[str]:
    """The absolute imports at the top level of the module at ``path``, submodules named by
    ``from package import submodule`` included, the ``deferred`` modules left out."""

    def kept(name: str) -> bool:
        return not any(name == d or name.startswith(f"{d}.") for d in deferred)

    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if kept(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not kept(node.module):
                continue
            names.append(node.module)
            package = importlib.util.find_spec(node.module)
            if package is not None and package.submodule_search_locations is not None:
                names += [
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if importlib.util.find_spec(f"{node.module}.{alias.name}") is not None
                ]
    return names


def _real(importer: str, sources: Mapping[str, tuple[str, ...]], module: str, name: str) -> Any:
    """The real ``module.name``, after putting every deferred name back into ``importer``."""
    loaded = sys.modules[importer]
    for source, names in sources.items():
        real_module = importlib.import_module(source)
        for each in names:
            setattr(loaded, each, getattr(real_module, each))
    return getattr(importlib.import_module(module), name)


def _stand_in(
    importer: str, sources: Mapping[str, tuple[str, ...]], module: str, names: tuple[str, ...]
) -> types.ModuleType:
    """A module holding a stand-in for each of ``names``; any other name is missing."""
    stand_in = types.ModuleType(module, f"Stand-in from {__name__} while {importer} imports.")
    for name in names:
        real = _Real(importer, sources, module, name)
        setattr(stand_in, name, _class(real) if name[0].isupper() else _function(real))
    return stand_in


class _Real:
    """How a stand-in finds what it stands for."""

    def __init__(
        self, importer: str, sources: Mapping[str, tuple[str, ...]], module: str, name: str
    ) -> None:
        self.importer, self.sources, self.module, self.name = importer, sources, module, name

    def __call__(self) -> Any:
        return _real(self.importer, self.sources, self.module, self.name)


def _function(real: _Real) -> Any:
    """A function standing for a module's function: a call goes to the real one."""

    def deferred(*args: Any, **kwargs: Any) -> Any:
        return real()(*args, **kwargs)

    deferred.__name__ = deferred.__qualname__ = real.name
    return deferred


def _class(real: _Real) -> type:
    """A class standing for a module's class: calls, ``isinstance``, ``issubclass`` and
    attributes go to the real class."""

    class Deferred(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            return real()(*args, **kwargs)

        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, real())

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real())

        def __getattr__(cls, attribute: str) -> Any:
            if attribute.startswith("__"):  # class protocol lookups stay on the stand-in
                raise AttributeError(attribute)
            return getattr(real(), attribute)

    return Deferred(real.name, (), {"__module__": real.module})
