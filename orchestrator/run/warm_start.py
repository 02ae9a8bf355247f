"""Warm start: CPU launches fork a process that has torch and TorchTitan imported already.

A warm server (``python -m orchestrator.run.warm_start``) imports the trainer once and
forks a torchrun per launch: the same entry point and flags as a cold launch, so the
same data, digests and weights. CPU only; ``ZEPHON_WARM_START=0`` turns it off, and a
launch falls back to a cold ``torchrun`` when the server cannot start.

Design: docs/design/orchestrator_run.md
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import setproctitle

from orchestrator.run.cpu_env import TRAIN_MODULE, trainer_import_env

WARM_START_ENV = "ZEPHON_WARM_START"
"""``0`` turns warm starts off (every launch is a cold ``torchrun``)."""
WARM_LOG_LINE = "[zephon] starting torchrun from the warm server"
"""What a warm launch writes to its run's ``launch.log`` before its torchrun starts."""
PRELOAD_MODULES = (
    "torch.distributed.run",
    "torchtitan.train",
    "orchestrator.titan.configs",
    "orchestrator.titan.trainer",
)
"""What the server imports once, after the trainer (:data:`TRAIN_MODULE`) has prepared
TorchTitan for this machine; every launch forks from it."""
START_ENV_PREFIXES = (
    "MALLOC_",
    "OMP_WAIT_POLICY",
    "GOMP_",
    "KMP_",
    "PYTHON",
    "LD_",
    "HF_DATASETS_OFFLINE",
    "HF_HUB_OFFLINE",
    "CUDA_VISIBLE_DEVICES",
)
"""Environment read when a process starts: a launch needs a server started with its values.
(``HF_HOME``, which ``datasets`` also reads on import, is the run folder's own cache; the
trainer never uses it, so the server's stands.)"""
READY_TIMEOUT_S = 300.0
"""Longest wait for the server's imports (a loaded machine can take a minute)."""


class WarmStartUnavailable(RuntimeError):
    """The warm server could not start or died; the launch should start cold."""


def enabled() -> bool:
    """Whether warm starts are on (``ZEPHON_WARM_START`` is not ``0``)."""
    return os.environ.get(WARM_START_ENV, "1") != "0"


def start_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` that a process reads when it starts (docs/design/orchestrator_run.md)."""
    return {k: v for k, v in env.items() if k.startswith(START_ENV_PREFIXES)}


def torchrun_arguments(command: Sequence[str]) -> list[str] | None:
    """torchrun's arguments in ``command`` if it is ``python -m torch.distributed.run ... -m
    orchestrator.titan.train ...`` with this interpreter, else None (cannot start warm)."""
    head = [sys.executable, "-m", "torch.distributed.run"]
    if list(command[:3]) != head or _module_flag(command) != ["-m", TRAIN_MODULE]:
        return None
    return list(command[3:])


def _module_flag(command: Sequence[str]) -> list[str]:
    """The ``-m MODULE`` pair that names the training script of a torchrun command."""
    for i in range(3, len(command) - 1):
        if command[i] == "-m":
            return [command[i], command[i + 1]]
    return []


# -- client --------------------------------------------------------------------------------------


@dataclass
class WarmProcess:
    """A launch started by the warm server: the ``Popen`` calls that ``run_local`` uses.

    ``pid`` leads the launch's own session and process group, as a cold torchrun's does.
    """

    pid: int
    returncode: int | None = None
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)

    def poll(self) -> int | None:
        """The exit status if the launch has ended (minus the signal number if killed)."""
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the launch to end; its exit status."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"warm launch {self.pid}", timeout or 0.0)
        assert self.returncode is not None, "an ended warm launch has an exit status"
        return self.returncode

    def ended(self, code: int) -> None:
        """Record the exit status the server reaped."""
        self.returncode = code
        self._ended.set()


class WarmStarter:
    """One warm server (this process's child) and the launches it started."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._server = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.run.warm_start"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,  # a terminal's Ctrl-C reaches zephon, which stops launches
        )
        self._ready = threading.Event()
        self._write = threading.Lock()
        self._requests: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._launches: dict[int, WarmProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._next_request = 0
        self._dead = False
        threading.Thread(target=self._read_replies, name="zephon-warm-start", daemon=True).start()

    def start(
        self, command: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path
    ) -> WarmProcess:
        """Start the torchrun ``command`` (one :func:`torchrun_arguments` accepts) in ``cwd``
        with ``env``, its output appended to ``log``; raise :class:`WarmStartUnavailable` if
        the server cannot."""
        argv = torchrun_arguments(command)
        assert argv is not None, f"not a torchrun of {TRAIN_MODULE}: {command}"
        request = {
            "argv": argv,
            "env": dict(env),
            "cwd": str(cwd.absolute()),
            "log": str(log.absolute()),
            "title": " ".join(command),
        }
        reply = self._send_request(request)
        if "error" in reply:
            raise WarmStartUnavailable(reply["error"])
        process = WarmProcess(int(reply["pid"]))
        with self._write:
            self._launches[process.pid] = process
            if process.pid in self._early_exits:
                process.ended(self._early_exits.pop(process.pid))
        return process

    def close(self) -> None:
        """End the server (it SIGTERMs launches still running) and wait for it."""
        if not self._ready.is_set():  # still importing: it would read its input only after
            self._server.terminate()
        with contextlib.suppress(OSError):
            assert self._server.stdin is not None
            self._server.stdin.close()
        try:
            self._server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()

    @property
    def alive(self) -> bool:
        """Whether the server is running and answering."""
        return not self._dead and self._server.poll() is None

    def _send_request(self, request: dict[str, Any]) -> dict[str, Any]:
        if not self._ready.wait(READY_TIMEOUT_S) or self._dead:
            raise WarmStartUnavailable("the warm server did not become ready")
        answered: tuple[threading.Event, list[Any]] = (threading.Event(), [])
        with self._write:
            number = self._next_request
            self._next_request += 1
            self._requests[number] = answered
            try:
                assert self._server.stdin is not None
                self._server.stdin.write(
                    json.dumps({"request": number, **request}).encode() + b"\n"
                )
                self._server.stdin.flush()
            except OSError as e:
                raise WarmStartUnavailable(f"the warm server is gone: {e}") from e
        while not answered[0].wait(1.0):
            if self._dead:
                raise WarmStartUnavailable("the warm server died")
        return answered[1][0]

    def _read_replies(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            reply = json.loads(line)
            if "ready" in reply:
                self._ready.set()
            elif "request" in reply:
                with self._write:
                    event, box = self._requests.pop(int(reply["request"]))
                box.append(reply)
                event.set()
            elif "exit" in reply:
                with self._write:
                    pid, code = int(reply["pid"]), int(reply["exit"])
                    launch = self._launches.pop(pid, None)
                    if launch is None:
                        self._early_exits[pid] = code  # ended before its start reply was read
                if launch is not None:
                    launch.ended(code)
        # The server ended: whatever it still ran was SIGTERMed by it or died with it.
        self._dead = True
        self._ready.set()
        with self._write:
            for event, _box in self._requests.values():
                event.set()
            for launch in self._launches.values():
                launch.ended(-signal.SIGKILL)
            self._launches.clear()


_starters: dict[tuple[tuple[str, str], ...], WarmStarter] = {}
_starters_lock = threading.Lock()


def starter(launch_env: Mapping[str, str]) -> WarmStarter:
    """This process's warm server for launches with ``launch_env`` (started on first use)."""
    wanted = start_env(launch_env)
    key = tuple(sorted(wanted.items()))
    with _starters_lock:
        found = _starters.get(key)
        if found is None or not found.alive:
            base = {k: v for k, v in os.environ.items() if not k.startswith(START_ENV_PREFIXES)}
            found = _starters[key] = WarmStarter({**base, **wanted})
        return found


def prepare(launch_env: Mapping[str, str]) -> None:
    """Start the warm server for ``launch_env`` now, so its imports overlap other work: a
    local CPU launch follows. A speculative server (:func:`speculate`) for the same
    environment is kept, one for another environment ends."""
    withdraw(keep=starter(launch_env) if enabled() else None)


_speculative: WarmStarter | None = None


def speculate(launch_env: Mapping[str, str]) -> None:
    """Start the warm server for ``launch_env`` before it is known whether a CPU launch
    follows, so its imports overlap the command's own (docs/design/orchestrator_run.md):
    :func:`prepare` keeps it, :func:`withdraw` ends it."""
    global _speculative
    if enabled():
        _speculative = starter(launch_env)


def withdraw(keep: WarmStarter | None = None) -> None:
    """End the speculative server unless it is ``keep``: no local CPU launch uses it (a dry
    run, a Slurm or GPU launch, another start environment)."""
    global _speculative
    with _starters_lock:
        found, _speculative = _speculative, None
        if found is None or found is keep:
            return
        for key in [key for key, each in _starters.items() if each is found]:
            del _starters[key]
    found.close()


@atexit.register
def _close_starters() -> None:
    with _starters_lock:
        for found in _starters.values():
            found.close()
        _starters.clear()


# -- server --------------------------------------------------------------------------------------


def serve() -> None:
    """The server's loop (docs/design/orchestrator_run.md): import once, fork a torchrun per
    request."""
    parent = os.getppid()
    launches: set[int] = set()

    def stop(signum: int = signal.SIGTERM, _frame: Any = None) -> None:
        for pid in launches:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(trainer_import_env())  # before torch's imports make that folder
    # The trainer the server launches prepares TorchTitan for this machine before anything
    # imports TorchTitan, as its own main() does; reached by name, as torchrun reaches it.
    importlib.import_module(TRAIN_MODULE).prepare_machine()
    for module in PRELOAD_MODULES:
        importlib.import_module(module)
    _write_reply({"ready": True})
    stdin = sys.stdin.fileno()
    pending = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], 0.05)
        for pid, code in _reap_ended_launches():
            launches.discard(pid)
            _write_reply({"pid": pid, "exit": code})
        if os.getppid() != parent:
            stop()
        if not readable:
            continue
        data = os.read(stdin, 1 << 16)
        if not data:
            stop()
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = json.loads(line)
            try:
                pid = _fork_launch(request)
            except OSError as e:
                _write_reply({"request": request["request"], "error": f"fork failed: {e}"})
                continue
            launches.add(pid)
            _write_reply({"request": request["request"], "pid": pid})


def _reap_ended_launches() -> list[tuple[int, int]]:
    """Exit statuses of the server's ended launches (Popen's convention: -N for signal N)."""
    ended = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, os.waitstatus_to_exitcode(status)))


def _write_reply(message: dict[str, Any]) -> None:
    os.write(sys.stdout.fileno(), json.dumps(message).encode() + b"\n")


def _fork_launch(request: dict[str, Any]) -> int:
    """Fork the launch's torchrun; the parent gets its pid, the child never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    # The server's SIGTERM handler would stop every launch: this child is one launch.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    code = 1
    try:
        code = _run_torchrun(request)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # the launch's log gets it, as a cold torchrun's would
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_torchrun(request: dict[str, Any]) -> int:
    """In the forked child: become the launch's torchrun (docs/design/orchestrator_run.md)."""
    from torch.distributed import run as torchrun

    os.setsid()
    setproctitle.setproctitle(request["title"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR again: the server's imports cached the server's
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    script = Path(sys.modules[TRAIN_MODULE].__file__ or "")
    argv = list(request["argv"])
    module_at = argv.index("-m")
    argv[module_at : module_at + 2] = ["--start-method=fork", "--run-path", str(script)]
    torchrun.main(argv)
    return 0


if __name__ == "__main__":
    serve()
