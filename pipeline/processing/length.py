"""``length``: keep records whose length lies within bounds (characters and words)."""

from __future__ import annotations

from typing import Any

from pipeline.errors import ConfigError
from pipeline.processing.step import ProcessStep, StepKind


class LengthFilter(ProcessStep):
    """Keeps a record when ``min_chars <= len(text) <= max_chars`` and it has at least
    ``min_words`` whitespace-separated words (None: no upper bound)."""

    kind = StepKind.LENGTH

    def __init__(
        self, *, min_chars: int = 0, max_chars: int | None = None, min_words: int = 0
    ) -> None:
        for key, value in (("min_chars", min_chars), ("min_words", min_words)):
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"length: {key} must be an integer >= 0, got {value!r}")
        if max_chars is not None and (not isinstance(max_chars, int) or max_chars < min_chars):
            raise ConfigError(
                f"length: max_chars must be an integer >= min_chars ({min_chars}) or null, "
                f"got {max_chars!r}"
            )
        self.min_chars, self.max_chars, self.min_words = min_chars, max_chars, min_words

    def apply(self, text: str) -> str | None:
        if len(text) < self.min_chars:
            return None
        if self.max_chars is not None and len(text) > self.max_chars:
            return None
        if self.min_words and len(text.split(None, self.min_words)) < self.min_words:
            return None
        return text

    def settings(self) -> dict[str, Any]:
        return {
            "min_chars": self.min_chars,
            "max_chars": self.max_chars,
            "min_words": self.min_words,
        }
