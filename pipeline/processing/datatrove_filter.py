"""Quality filters labs use, from datatrove, behind one adapter.

``gopher_quality``, ``gopher_repetition``, ``c4_quality`` and ``fineweb_quality`` are
datatrove's own filter classes (what Gopher, C4 and FineWeb were filtered with), built with
the step's settings as keyword arguments: ``{step: gopher_quality, min_doc_words: 100}``.
datatrove's filters may also edit the text they keep (C4's removes lines): the edited text is
what is trained on. datatrove's version is part of the contract, as a tokenizer's file is.

datatrove is imported only when such a step is used (``pip install datatrove regex nltk
spacy``); its word tokenizer is spaCy's blank English pipeline, which needs no download.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import threading
from typing import Any

from pipeline.errors import ConfigError
from pipeline.processing.step import ProcessStep, StepKind

_CLASSES = {
    StepKind.GOPHER_QUALITY: "GopherQualityFilter",
    StepKind.GOPHER_REPETITION: "GopherRepetitionFilter",
    StepKind.C4_QUALITY: "C4QualityFilter",
    StepKind.FINEWEB_QUALITY: "FineWebQualityFilter",
}
DATATROVE_STEPS = frozenset(_CLASSES)
"""The step kinds this adapter serves."""
_NOT_SETTINGS = {"self", "exclusion_writer"}
_BUILDING = threading.Lock()
"""Held while a filter is built (see ``DatatroveFilter._build``)."""
_CALLING = threading.Lock()
"""Held while a filter runs: spaCy's string store, which datatrove's word tokenizer grows
with every new word, breaks when two threads use it at once; threads of one process take
turns (the ``processes`` runner runs filters side by side)."""


def _filter_class(kind: StepKind) -> type:
    try:
        from datatrove.pipeline import filters
    except ImportError as e:
        raise ConfigError(
            f"process step {str(kind)!r} needs datatrove: pip install datatrove regex nltk spacy "
            f"(import failed: {e})"
        ) from None
    return getattr(filters, _CLASSES[kind])


class DatatroveFilter(ProcessStep):
    """One of datatrove's quality filters (see the module docstring)."""

    def __init__(self, kind: StepKind, settings: dict[str, Any]) -> None:
        self.kind = kind
        cls = _filter_class(kind)
        accepted = set(inspect.signature(cls.__init__).parameters) - _NOT_SETTINGS
        unknown = sorted(set(settings) - accepted)
        if unknown:
            raise ConfigError(
                f"process step {str(kind)!r}: unknown setting(s) {unknown}; datatrove's "
                f"{cls.__name__} takes {sorted(accepted)}"
            )
        try:
            json.dumps(settings)
        except TypeError as e:
            raise ConfigError(
                f"process step {str(kind)!r}: settings must be JSON values: {e}"
            ) from None
        self._settings = dict(sorted(settings.items()))
        self._filter: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # datatrove's filter objects hold spaCy pipelines: each process builds its own.
        return {**self.__dict__, "_filter": None}

    def apply(self, text: str) -> str | None:
        if self._filter is None:
            self._build()
        from datatrove.data import Document

        document = Document(text=text, id="")
        with _CALLING:
            verdict = self._filter.filter(document)
        kept = verdict if isinstance(verdict, bool) else bool(verdict[0])
        return document.text if kept else None

    def _build(self) -> None:
        """Build datatrove's filter and run it once, under a lock: spaCy's pipeline, which
        datatrove builds on first use, fails when two threads build it at once."""
        from datatrove.data import Document

        with _BUILDING:
            if self._filter is None:
                cls = _filter_class(self.kind)
                built = cls(**{k: _as_argument(v) for k, v in self._settings.items()})
                built.filter(Document(text="Warm up. The filter is built.\nTwo lines.", id=""))
                self._filter = built

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)

    def contract(self) -> dict[str, Any]:
        return {**super().contract(), "datatrove": importlib.metadata.version("datatrove")}


def _as_argument(value: Any) -> Any:
    """A JSON list given where datatrove takes tuples (``top_n_grams``) as tuples."""
    if isinstance(value, list):
        return tuple(_as_argument(v) for v in value)
    return value
