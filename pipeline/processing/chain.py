"""``ProcessChain``: the steps a record goes through before it is tokenized.

A record passes each step in order; the first step that drops it is the one counted. The
chain is built from ``data.process``-style entries: a step's name (``"gopher_quality"``),
a user function (``"mypkg.filters:keep"``) or a mapping with ``step`` and the step's
settings (``{"step": "length", "min_chars": 200}``), and the ``datasets`` it is limited to
(``{"step": "gopher_quality", "datasets": ["web"]}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.choice import parse_choice
from pipeline.errors import ConfigError
from pipeline.processing.datatrove_filter import DATATROVE_STEPS, DatatroveFilter
from pipeline.processing.deduplication import ExactDedup
from pipeline.processing.length import LengthFilter
from pipeline.processing.minhash_dedup import MinHashDedup
from pipeline.processing.step import ProcessStep, StepKind
from pipeline.processing.user_function import UserFunction

KEPT = -1
""":meth:`ProcessChain.apply`'s step index of a kept record."""


class ProcessChain:
    """Steps applied in order to each record's text (see the module docstring); a step may
    apply to some datasets only (``only``: their names, None: every dataset)."""

    def __init__(
        self, steps: Sequence[ProcessStep], only: Sequence[frozenset[str] | None] = ()
    ) -> None:
        self.steps = list(steps)
        self.only = list(only) or [None] * len(self.steps)
        assert len(self.only) == len(self.steps), "one scope per step"

    def then(self, other: ProcessChain) -> ProcessChain:
        """This chain's steps, then ``other``'s."""
        return ProcessChain(self.steps + other.steps, self.only + other.only)

    def __bool__(self) -> bool:
        return bool(self.steps)

    @property
    def names(self) -> list[str]:
        """Each step's name, in order."""
        return [s.name for s in self.steps]

    def apply(self, text: str, dataset: str) -> tuple[str | None, int]:
        """The text to train on of a record of ``dataset`` (None: dropped) and the index of
        the step that dropped it (:data:`KEPT` if none did)."""
        for index, (step, only) in enumerate(zip(self.steps, self.only, strict=True)):
            if only is not None and dataset not in only:
                continue
            result = step.apply(text)
            if result is None:
                return None, index
            text = result
        return text, KEPT

    def contract(self) -> list[dict[str, Any]]:
        """Every step's contract, in order (with the datasets it is limited to)."""
        return [
            s.contract() if only is None else {**s.contract(), "datasets": sorted(only)}
            for s, only in zip(self.steps, self.only, strict=True)
        ]


def parse_step(entry: str | Mapping[str, Any]) -> ProcessStep:
    """One ``data.process`` entry as its step; ConfigError naming the valid steps."""
    if isinstance(entry, str):
        entry = {"function": entry} if ":" in entry else {"step": entry}
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"a process entry must be a step name or a mapping with 'step', got {entry!r}"
        )
    settings = dict(entry)
    if "function" in settings and "step" not in settings:
        settings["step"] = str(StepKind.FUNCTION)
    if "step" not in settings:
        raise ConfigError(f"process entry {dict(entry)!r} has no 'step'")
    kind = parse_choice(StepKind, settings.pop("step"), "process step")
    if kind is StepKind.DECONTAMINATE:
        raise ConfigError(
            "'decontaminate' is not a step to list: every scored document (held-out documents "
            "and eval sets) is removed from training whatever the chain"
        )
    built: dict[StepKind, type[ProcessStep]] = {
        StepKind.LENGTH: LengthFilter,
        StepKind.DEDUP: ExactDedup,
        StepKind.MINHASH_DEDUP: MinHashDedup,
    }
    if kind in built:
        try:
            return built[kind](**settings)
        except TypeError as e:
            raise ConfigError(f"process step {str(kind)!r}: {e}") from None
    if kind is StepKind.FUNCTION:
        function = settings.pop("function", None)
        if settings or not isinstance(function, str):
            raise ConfigError(
                "process step 'function' takes one setting, function: 'module:function'"
            )
        return UserFunction(function)
    assert kind in DATATROVE_STEPS
    return DatatroveFilter(kind, settings)


def parse_chain(
    entries: Sequence[str | Mapping[str, Any]], dataset_names: Sequence[str] | None = None
) -> ProcessChain:
    """The chain of ``data.process``-style entries, each of which may name the ``datasets``
    it applies to (of ``dataset_names``, when given); ConfigError naming the entry at fault."""
    steps, only = [], []
    for k, entry in enumerate(entries):
        try:
            scope = None
            if isinstance(entry, Mapping) and "datasets" in entry:
                entry = dict(entry)
                scope = _scope(entry.pop("datasets"), dataset_names)
            steps.append(parse_step(entry))
            only.append(scope)
        except ConfigError as e:
            raise ConfigError(f"process entry {k}: {e}") from None
    return ProcessChain(steps, only)


def _scope(names: Any, dataset_names: Sequence[str] | None) -> frozenset[str]:
    """A step's ``datasets``: a non-empty list of known dataset names."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, Sequence) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"datasets must be a non-empty list of dataset names, got {names!r}")
    unknown = sorted(set(names) - set(dataset_names or names))
    if unknown:
        raise ConfigError(
            f"datasets names unknown dataset(s) {unknown}; known: {sorted(dataset_names or [])}"
        )
    return frozenset(names)
