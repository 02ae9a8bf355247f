"""TorchTitan without Hugging Face ``datasets`` until something uses it.

``torchtitan.trainer`` imports ``torchtitan.components.validate``, which imports
``torchtitan.hf_datasets.text_datasets`` for its stock validation loader, which imports
``datasets`` (and with it pandas, requests, ...): ~1.2 s of CPU in every process that
imports the trainer, the warm server included, where Zephon's own loader and evaluator
never touch it. :func:`defer` imports ``text_datasets`` with stand-ins for the three names
it takes from ``datasets``; the first use of any of them imports the real ``datasets`` and
puts the real objects back into ``text_datasets``, so TorchTitan's stock loaders (and
lm-eval, which imports ``datasets`` itself) work as before.

Design: docs/design/orchestrator_titan.md
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

TEXT_DATASETS = "torchtitan.hf_datasets.text_datasets"
DEFERRED = {
    "datasets": ("Dataset", "load_dataset"),
    "datasets.distributed": ("split_dataset_by_node",),
}
"""The names ``text_datasets`` imports from each module of ``datasets``."""


def defer() -> bool:
    """Import ``text_datasets`` with ``datasets`` deferred; False (and nothing done) when
    either is imported already. Run it after ``cpu_compat.apply()``."""
    if TEXT_DATASETS in sys.modules or any(name in sys.modules for name in DEFERRED):
        return False
    stand_ins = {name: _stand_in(name, names) for name, names in DEFERRED.items()}
    sys.modules.update(stand_ins)
    try:
        importlib.import_module(TEXT_DATASETS)
    except ImportError:  # it imports another name than these: give it the real datasets
        sys.modules.pop(TEXT_DATASETS, None)
        return False
    finally:  # only text_datasets holds the stand-ins; any later import gets the real module
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return True


def _real(module: str, name: str) -> Any:
    """The real ``module.name``, after putting every deferred name back into text_datasets."""
    text_datasets = sys.modules[TEXT_DATASETS]
    for source, names in DEFERRED.items():
        real_module = importlib.import_module(source)
        for each in names:
            setattr(text_datasets, each, getattr(real_module, each))
    return getattr(importlib.import_module(module), name)


def _stand_in(module: str, names: tuple[str, ...]) -> types.ModuleType:
    """A module holding a stand-in for each of ``names``; any other name is missing."""
    stand_in = types.ModuleType(module, f"Stand-in from {__name__} while {TEXT_DATASETS} imports.")
    for name in names:
        setattr(
            stand_in, name, _class(module, name) if name[0].isupper() else _function(module, name)
        )
    return stand_in


def _function(module: str, name: str) -> Any:
    """A function standing for ``module.name``: a call goes to the real one."""

    def deferred(*args: Any, **kwargs: Any) -> Any:
        return _real(module, name)(*args, **kwargs)

    deferred.__name__ = deferred.__qualname__ = name
    return deferred


def _class(module: str, name: str) -> type:
    """A class standing for ``module.name``: calls, ``isinstance``, ``issubclass`` and
    attributes go to the real class."""

    class Deferred(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            return _real(module, name)(*args, **kwargs)

        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, _real(module, name))

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, _real(module, name))

        def __getattr__(cls, attribute: str) -> Any:
            if attribute.startswith("__"):  # class protocol lookups stay on the stand-in
                raise AttributeError(attribute)
            return getattr(_real(module, name), attribute)

    return Deferred(name, (), {"__module__": module})
