"""Server processes for integration tests: one process group per server, its output in a log
file, readiness polled with a bounded loop, and a stop that leaves no child behind (servers.py
starts PostgreSQL, SeaweedFS and an `mlflow server` with these)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
READY_TIMEOUT_S = 180.0  # postgres ~2 s, seaweedfs ~1 s, mlflow server ~20 s on 2 cores, over 60 s restarted under load
STOP_TIMEOUT_S = 30.0


def log_tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    return text[-limit:] if text.strip() else "<empty log>"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass
class Server:
    """One running server process (leader of its own process group)."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    info: dict = field(default_factory=dict)  # connection info: uri, port, endpoint…
    stop_signal: int = signal.SIGTERM
    signal_group: bool = True  # False: signal the leader only (postgres shuts its children down)
    cleanup: list = field(default_factory=list)  # callables run after the process is gone
    _log_file: object = None
    launch: dict = field(default_factory=dict)  # spawn's arguments, for restart()

    def __getattr__(self, key):  # server.uri, server.port, server.endpoint
        info = self.__dict__.get("info") or {}
        if key in info:
            return info[key]
        raise AttributeError(key)

    def log_tail(self) -> str:
        return log_tail(self.log_path)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Terminate (stop_signal), wait up to `timeout`, then SIGKILL the process group."""
        proc, pgid = self.proc, self.proc.pid
        try:
            if proc.poll() is None:
                try:
                    if self.signal_group:
                        os.killpg(pgid, self.stop_signal)
                    else:
                        proc.send_signal(self.stop_signal)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            # Children (uvicorn workers, postgres backends) must be gone too.
            deadline = time.monotonic() + (5.0 if proc.returncode is not None else 0.0)
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if group_alive(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            while self.cleanup:
                with contextlib.suppress(Exception):
                    self.cleanup.pop()()

    def restart(self) -> None:
        """Stop the process (a clean shutdown, its data and cleanup kept) and start the same command
        again; the caller waits until it is ready."""
        cleanup, self.cleanup = self.cleanup, []
        self.stop()
        fresh = spawn(**self.launch)
        self.proc, self._log_file, self.cleanup = fresh.proc, fresh._log_file, cleanup


def spawn(name: str, cmd: list[str], directory: Path, env: dict | None = None, **popen_kw) -> Server:
    log_path = directory / f"{name}.log"
    log_file = open(log_path, "ab", buffering=0)
    log_file.write(f"$ {' '.join(map(str, cmd))}\n".encode())
    try:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            **popen_kw,
        )
    except BaseException:
        log_file.close()
        raise
    launch = {"name": name, "cmd": cmd, "directory": directory, "env": env, **popen_kw}
    return Server(name=name, proc=proc, log_path=log_path, _log_file=log_file, launch=launch)


def wait_ready(server: Server, check, what: str, timeout: float = READY_TIMEOUT_S) -> None:
    """Poll `check()` until it is true; stop the server and raise with the log tail otherwise."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        if server.proc.poll() is not None:
            server.stop()
            raise RuntimeError(
                f"{server.name} exited with code {server.proc.returncode} before {what}; "
                f"log {server.log_path}:\n{server.log_tail()}"
            )
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - not ready yet
            last_error = exc
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(
                f"{server.name}: no {what} within {timeout:.0f} s (last error: {last_error!r}); "
                f"log {server.log_path}:\n{server.log_tail()}"
            )
        time.sleep(0.25)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def stop_on_error(server: Server):
    """Stop `server` if anything between its start and its return fails."""
    try:
        yield
    except BaseException:
        server.stop()
        raise


def http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:  # an answer all the same (403, 404…)
        return exc.code


def venv_tool(name: str, hint: str) -> str:
    """An executable next to sys.executable (the venv), else on PATH."""
    candidate = Path(sys.executable).with_name(name)
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise RuntimeError(f"`{name}` not found next to {sys.executable} nor on PATH: {hint}")
