"""A stand-in for the warm server, for tests of when it starts and ends."""

from __future__ import annotations

import pytest

from orchestrator.run import warm_start


class FakeStarter:
    """Stands for a :class:`warm_start.WarmStarter` (no server process): records its close."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.closed = False

    @property
    def alive(self) -> bool:
        """Running until closed, as a server that answers."""
        return not self.closed

    def close(self) -> None:
        """Record the end."""
        self.closed = True


def fake_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm starts on, with :class:`FakeStarter` servers and no server started yet."""
    monkeypatch.setattr(warm_start, "WarmStarter", FakeStarter)
    monkeypatch.setattr(warm_start, "_starters", {})
    monkeypatch.setattr(warm_start, "_speculative", None)
    monkeypatch.setenv(warm_start.WARM_START_ENV, "1")
