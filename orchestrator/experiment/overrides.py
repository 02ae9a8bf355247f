"""``key=value`` overrides read as ``zephon-run`` reads them (Hydra's override grammar:
``{until_step:4,mixture:{code:1}}``, ``[a,b]``, quoted strings) and checked before they are
applied: a section, a mapping or a list given one plain value is refused in the experiment's
words, not OmegaConf's (which names its types).

``zephon`` takes keys (``model.config=zephon_mini``); ``zephon-run`` also chooses presets by
name (``model=mini`` selects ``conf/model/mini.yaml``), so a preset name given to ``zephon``
is answered with the keys that preset sets.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from orchestrator.errors import ExperimentError

PRESETS_PACKAGE = "zephon_conf"
"""``zephon-run``'s config tree (``conf/``): one folder of presets per section."""


@dataclass(frozen=True)
class Override:
    """One ``key=value`` override: its text, its key and its value, read."""

    text: str
    key: str
    value: Any


def parse_overrides(overrides: list[str]) -> list[Override]:
    """``overrides`` read with Hydra's override grammar, as ``zephon-run`` reads them;
    :class:`ExperimentError` naming every one that does not set one key to one value."""
    # deferred: Hydra's parser (ANTLR) loads only for commands given overrides
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed, problems = [], []
    for text in overrides:
        if "=" not in text:
            problems.append(f"override {text!r} is not of the form key=value")
            continue
        try:
            override = parser.parse_override(text)
        except HydraException as e:
            problems.append(
                f"override {text!r} cannot be read ({str(e).splitlines()[0]}); quote a value "
                "holding '=', spaces or brackets: key='a=b' or key=['--x=1']"
            )
            continue
        if override.type != OverrideType.CHANGE:
            problems.append(f"{text}: '+' and '~' are zephon-run's; here write key=value")
        elif override.is_sweep_override():
            problems.append(
                f"{text}: several values, a sweep; zephon runs one experiment (sweep them "
                "with zephon-run -m, or quote a value holding a comma: key='a,b')"
            )
        else:
            parsed.append(Override(text, override.key_or_group, override.value()))
    if problems:
        raise ExperimentError(problems)
    return parsed


def check_overrides(config: DictConfig, overrides: list[Override]) -> None:
    """Raise :class:`ExperimentError` naming every override of ``overrides`` that gives a
    section, mapping or list of ``config`` one plain value."""
    problems = []
    for override in overrides:
        key, value = override.key, override.text.partition("=")[2]
        node = OmegaConf.select(config, key, default=None)
        if isinstance(override.value, (dict, list)) or node is None:
            continue  # a structure for a structure, or a key the schema check reports
        if isinstance(node, ListConfig):
            problems.append(
                f"{override.text}: {key} is a list, not one value; write {key}=[{value}]"
            )
        elif isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
            problems.append(_section_problem(key, value, [str(k) for k in node]))
        elif isinstance(node, DictConfig):
            problems.append(
                f"{override.text}: {key} is a mapping, not one value; write {key}.NAME=VALUE "
                f"for one entry or {key}={{NAME: VALUE, ...}} for all"
            )
    if problems:
        raise ExperimentError(problems)


def _section_problem(key: str, value: str, keys: list[str]) -> str:
    """Why ``key=value`` cannot set the section ``key`` (holding ``keys``) and what to write."""
    fields = ", ".join(f"{key}.{k}" for k in keys)
    problem = (
        f"{key}={value}: {key} is a section of the experiment, not a value; set its keys ({fields})"
    )
    preset = load_preset(key, value)
    if preset is None:
        return f"{problem}. Presets chosen by name ({key}=NAME) are zephon-run's."
    settings = _dotlist(key, OmegaConf.to_container(preset, resolve=False))
    where = f"zephon-run's preset {key}={value} (conf/{key}/{value}.yaml)"
    if not settings:
        return f"{problem}. {where} sets nothing beyond the defaults: leave it out."
    if any("${" in setting for setting in settings):
        return f"{problem}, or run {where} with zephon-run (it sets {', '.join(settings)})."
    return f"{problem}: for {where} write {' '.join(settings)} (or use zephon-run)."


def load_preset(section: str, name: str) -> DictConfig | None:
    """``zephon-run``'s preset ``name`` of ``section`` (``conf/<section>/<name>.yaml``), if any."""
    if not re.fullmatch(r"[\w-]+", name):  # not a file name: no preset
        return None
    try:
        path = resources.files(PRESETS_PACKAGE) / section / f"{name}.yaml"
    except ModuleNotFoundError:  # not installed: no preset to name
        return None
    if not path.is_file():
        return None
    loaded = OmegaConf.create(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, DictConfig) else None


def _dotlist(prefix: str, value: Any) -> list[str]:
    """``value`` (plain data) as ``prefix.key=value`` overrides, nested keys joined by dots."""
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _dotlist(f"{prefix}.{k}", v)]
    if isinstance(value, list):
        return [f"{prefix}=[{','.join(_yaml_scalar(v) for v in value)}]"]
    return [f"{prefix}={_yaml_scalar(value)}"]


def _yaml_scalar(value: Any) -> str:
    """``value`` as an override writes it (``false``, ``null``, not Python's spelling)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)
