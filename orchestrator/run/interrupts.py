"""Ctrl-C and SIGTERM: stop every training this process started, record it, say how to continue.

The handler sets :data:`STOP` and forwards SIGTERM once to child processes; launches kill
their torchrun process groups and note how to continue each unfinished run, and the
console script (:func:`entry_point`) prints those lines and exits 130. :class:`Interrupted`
derives from ``BaseException`` so that Hydra lets it through.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from orchestrator.errors import EXIT_INTERRUPTED

STOP = threading.Event()
"""Set once SIGINT or SIGTERM arrived; every launch loop polls it."""
UNFINISHED_ENV = "ZEPHON_UNFINISHED_FILE"

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []
_noted: list[str] = []
_installed = threading.local()
_on_stop: list[Callable[[], None]] = []


class Interrupted(BaseException):
    """Work stopped by SIGINT/SIGTERM; ``lines`` add to the noted unfinished runs."""

    def __init__(self, lines: Sequence[str] = ()) -> None:
        super().__init__("interrupted")
        self.lines = list(lines)


def requested() -> bool:
    """Whether SIGINT or SIGTERM arrived (or :func:`request` was called)."""
    return STOP.is_set()


def request(signum: int = signal.SIGINT) -> None:
    """Stop like a signal would (what the handler does; for programs embedding Zephon)."""
    _received.append(signum)
    STOP.set()


def reset() -> None:
    """Forget an earlier interruption (a long-lived process that goes on after one)."""
    STOP.clear()
    _received.clear()
    _noted.clear()


def signal_received() -> int:
    """The first signal that stopped work (SIGINT if none did)."""
    return _received[0] if _received else signal.SIGINT


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Within: SIGINT/SIGTERM set :data:`STOP` instead of raising. Only in the main thread;
    nested uses keep the outer handler."""
    if threading.current_thread() is not threading.main_thread() or getattr(
        _installed, "active", False
    ):
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    _installed.active = True
    try:
        yield
    finally:
        _installed.active = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _on_signal(signum: int, _frame: object) -> None:
    first = not STOP.is_set()
    request(signum)
    if first:
        for callback in _on_stop:
            callback()
        _stop_children()


def _stop_children() -> None:
    """SIGTERM to this process's children: a submitit job stops its training on it,
    torchrun stops its workers (run_local kills their groups as well)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGTERM)


def note_unfinished(line: str) -> None:
    """Record one unfinished run (``<what>: <state>; continue: <command>``) for the report."""
    path = os.environ.get(UNFINISHED_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line.replace("\n", " ") + "\n")
    else:
        _noted.append(line)


def unfinished() -> list[str]:
    """The noted lines, each once, in the order noted."""
    lines = list(_noted)
    path = os.environ.get(UNFINISHED_ENV)
    if path:
        with contextlib.suppress(OSError):
            lines += Path(path).read_text(encoding="utf-8").splitlines()
    return list(dict.fromkeys(line for line in lines if line))


@contextlib.contextmanager
def entry_point(program: str, on_stop: Callable[[], None] | None = None) -> Iterator[None]:
    """A console script's body: signals handled (docs/design/orchestrator_run.md); once interrupted,
    any exception or exit ends in the report and exit status 130. ``on_stop`` runs in the
    handler at the first signal."""
    if on_stop is not None:
        _on_stop.append(on_stop)
    fd, path = tempfile.mkstemp(prefix="zephon-unfinished-", suffix=".txt")
    os.close(fd)
    os.environ[UNFINISHED_ENV] = path
    extra: list[str] = []
    try:
        with handling():
            try:
                yield
            except Interrupted as stopped:
                extra = stopped.lines
            except (Exception, KeyboardInterrupt, SystemExit):
                if not requested():
                    raise
        if requested():
            report(program, extra)
            raise SystemExit(EXIT_INTERRUPTED)
    finally:
        os.environ.pop(UNFINISHED_ENV, None)
        with contextlib.suppress(OSError):
            os.unlink(path)


def exit_without_teardown(code: int) -> NoReturn:
    """End a console script with ``code`` once its work is done: other threads joined,
    atexit handlers run (logging, MLflow, the warm server's close), stdio flushed, then
    ``os._exit``. What it skips is the interpreter's teardown of its modules, about 1 s
    of C-level finalization of MLflow, SQLAlchemy and pandas on 2 cores that a user
    waits for after every command and that nothing needs: files are closed and runs
    recorded by then."""
    # What the interpreter's own exit does first: stop thread pools, join non-daemon threads.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def report(program: str, extra: Sequence[str] = ()) -> None:
    """Print what was stopped and how to continue it, one line per unfinished run."""
    name = signal.Signals(signal_received()).name
    lines = [*unfinished(), *extra]
    print(
        f"\n[{program}] stopped by {name}; every training process it started has ended.",
        file=sys.stderr,
    )
    for line in lines or ["nothing had started training; run the same command again"]:
        print(f"[{program}]   {line}", file=sys.stderr)
    sys.stderr.flush()
