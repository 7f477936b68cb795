"""Real processes for integration tests and benchmarks: scratch databases, Redis servers, Celery workers.

Like ``celery.contrib.testing``, but with separate ``celery worker`` / ``celery beat`` processes (so they
can be SIGKILLed) configured purely through ``OM_*`` environment variables, as a deployment would be.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import sqlalchemy as sa

T = TypeVar("T")

CELERY = str(Path(sys.executable).with_name("celery"))
OM = [sys.executable, "-m", "om_api.cli"]


def wait_for(predicate: Callable[[], T | None], timeout: float, interval: float = 0.05, what: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or predicate}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def om_server(
    args: list[str], env: Mapping[str, str], log_path: Path, timeout: float = 90.0
) -> Iterator[str]:
    """``om <args>`` (``serve`` and its options) on a free loopback port; yields its base URL once
    ``/healthz`` answers, and stops it afterwards. Fails with the server's log if it exits or never
    answers, and if it stops with an error."""

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "om_api.cli", *args],
            env={**env, "OM_HOST": "127.0.0.1", "OM_PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if server.poll() is not None:
                raise RuntimeError(
                    f"om {' '.join(args)} exited with {server.returncode}:\n{log_path.read_text()}"
                )
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"om {' '.join(args)} did not answer in {timeout:.0f} s:\n{log_path.read_text()}"
                )
            time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if server.returncode > 0:
        raise RuntimeError(f"om {' '.join(args)} stopped with {server.returncode}:\n{log_path.read_text()}")


@contextlib.contextmanager
def scratch_postgres(admin_url: str, prefix: str = "om_workers") -> Iterator[str]:
    """A new database migrated to head; dropped afterwards. Yields its SQLAlchemy URL."""
    from om_core.adapters.store.migrations import upgrade_to_head

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_to_head(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class RedisServer:
    """A private ``redis-server`` the test may kill and restart (on the same port)."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "redis-server"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, 10, what=f"redis-server on {self.port}")

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
        return False

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def shutdown_nosave(self) -> None:
        """Stop it as an operator would (``SHUTDOWN NOSAVE``): with no persistence, every queued and
        unacknowledged message is gone when it starts again."""
        if self.proc is None:
            return
        binary = shutil.which("redis-cli") or "redis-cli"
        subprocess.run(
            [binary, "-p", str(self.port), "shutdown", "nosave"], capture_output=True, timeout=10, check=False
        )
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


@dataclass
class CeleryProcess:
    """A ``celery worker`` or ``celery beat`` process in its own process group, logging to a file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)

    def start(self, ready_timeout: float = 45.0) -> CeleryProcess:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        if "worker" in self.argv:
            wait_for(
                lambda: self._check_alive() and " ready." in self.log(),
                ready_timeout,
                0.1,
                what=f"worker {self.name} ready",
            )
        return self

    def _check_alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the worker and its pool children)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15)
        if self._log is not None:
            self._log.close()
            self._log = None

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop it as a supervisor does (``docker stop``): SIGTERM to the main process alone, which lets
        its running tasks finish and stops its pool itself; SIGKILL whatever is left after ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        self.kill()

    def stop(self) -> None:
        """Warm shutdown first (SIGTERM), then SIGKILL whatever is left."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15)
        self.kill()


def process_env(
    *, database_url: str, broker_url: str, profile: Path | None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    env.update(
        {
            "OM_DATABASE_URL": database_url,
            "OM_BROKER_URL": broker_url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if profile is not None:
        env["OM_PROFILE"] = str(profile)
    env.update(extra or {})
    return env


def worker_process(
    name: str,
    env: dict[str, str],
    log_dir: Path,
    *,
    queues: str = "om.sync,om.buffer,om.maintenance",
    concurrency: int = 1,
    pool: str = "prefork",
) -> CeleryProcess:
    argv = [
        CELERY,
        "-A",
        "om_workers.app",
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "-P",
        pool,
        "-n",
        f"{name}@%h",
        "-l",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    return CeleryProcess(name, argv, env, log_dir / f"{name}.log")


def om_worker_process(
    name: str, env: dict[str, str], log_dir: Path, *, concurrency: int = 2
) -> CeleryProcess:
    """``om worker`` as it is deployed (its default queues and options), named ``<name>@<host>``."""
    argv = [*OM, "worker", "--concurrency", str(concurrency), "--hostname", f"{name}@%h"]
    return CeleryProcess(name, argv, env, log_dir / f"{name}.log")


def om_beat_process(name: str, env: dict[str, str], log_dir: Path) -> CeleryProcess:
    """``om beat`` as it is deployed, keeping its schedule file in ``log_dir``."""
    argv = [*OM, "beat", "--schedule", str(log_dir / f"{name}.schedule")]
    return CeleryProcess(name, argv, env, log_dir / f"{name}.log")


def beat_process(name: str, env: dict[str, str], log_dir: Path) -> CeleryProcess:
    argv = [
        CELERY,
        "-A",
        "om_workers.app",
        "beat",
        "-l",
        "INFO",
        "--schedule",
        str(log_dir / f"{name}.schedule"),
    ]
    return CeleryProcess(name, argv, env, log_dir / f"{name}.log")


_WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
)


def memory_profile(latency_ms: int = 0, **observation: Any) -> dict[str, Any]:
    """The memory profile of the worker tests and benchmark: small budgets, the local model at a latency,
    and no reflection (a synchronous reflection would be a second reason for a read to block)."""
    return {
        "model": "om-local/extractive",
        "observation": {
            "messageTokens": 600,
            "bufferTokens": 0.2,
            "bufferActivation": 0.8,
            "blockAfter": 1.5,
            "providerOptions": {"omLocal": {"latencyMs": latency_ms, "seed": 1}},
            **observation,
        },
        "reflection": {"observationTokens": 60_000},
    }


def filler_message(prefix: str, index: int, role: str = "user", words: int = 45) -> dict[str, Any]:
    """A message of ``words`` filler words, id ``<prefix>-<index>``."""
    text = " ".join(_WORDS[(index + i) % len(_WORDS)] for i in range(words))
    return {
        "id": f"{prefix}-{index}",
        "role": role,
        "parts": [{"type": "text", "text": f"Note {index}: I met Dana {index} times. {text}."}],
    }
