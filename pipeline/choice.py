"""``parse_choice``: a configured value of a closed set, as the member of its ``StrEnum``."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from pipeline.errors import ConfigError

Choice = TypeVar("Choice", bound=StrEnum)


def parse_choice(choices: type[Choice], value: object, what: str) -> Choice:
    """``value`` (a member, or its plain string from a config) as a member of ``choices``.

    Raises ConfigError naming ``what``, the value and the valid values if it is none of them.
    """
    try:
        return choices(value)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{what}={value!r} is invalid; use one of {[str(c) for c in choices]}"
        ) from None
