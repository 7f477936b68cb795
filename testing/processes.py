"""Real processes and servers: ``om serve``, ``celery worker`` / ``celery beat`` (or ``om worker`` /
``om beat``), a private ``redis-server``, an app served by uvicorn in a thread.

Like ``celery.contrib.testing``, but with separate worker and beat processes (so they can be SIGKILLed)
configured purely through ``OM_*`` environment variables, as a deployment would be.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import uvicorn

from om_workers.names import ALL_QUEUES

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


def suite_redis_url(variable: str, database: int) -> str:
    """The Redis database a part of the suite flushes: ``variable`` when set, else database ``database`` of
    the server ``OM_TEST_BROKER_URL`` names (docs/operations.md, Tests in CI)."""
    given = os.environ.get(variable)
    if given:
        return given
    broker = urlsplit(os.environ.get("OM_TEST_BROKER_URL") or "redis://127.0.0.1:6379/0")
    return urlunsplit(broker._replace(path=f"/{database}"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def om_server(
    args: list[str],
    env: Mapping[str, str],
    log_path: Path,
    timeout: float = 90.0,
    *,
    om: Sequence[str] = OM,
    cwd: Path | None = None,
) -> Iterator[str]:
    """``om <args>`` (``serve`` and its options) on a free loopback port; yields its base URL once
    ``/healthz`` answers, and stops it afterwards. ``om`` is the command (default: this interpreter's
    ``om_api.cli``; an installed ``om`` executable for a wheel). Fails with the server's log if it exits or
    never answers, and if it stops other than cleanly on SIGTERM."""

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = " ".join(["om", *args])
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [*om, *args],
            cwd=cwd,
            env={**env, "OM_HOST": "127.0.0.1", "OM_PORT": str(port)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"{command} exited with {server.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command} did not answer in {timeout:.0f} s:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    # uvicorn shuts down cleanly on SIGTERM, then re-raises it
    if server.returncode not in (0, -signal.SIGTERM):
        raise RuntimeError(f"{command} stopped with {server.returncode}:\n{log_path.read_text()}")


@contextlib.contextmanager
def serve_in_thread(app: Any, **options: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread of this process (so the test can
    reach into its dependencies); yields its base URL once it listens. ``options`` go to
    ``uvicorn.Config``."""
    config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), **{"log_level": "warning", **options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30, what="uvicorn to start")
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


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

    def pids(self) -> set[int]:
        """The process and its pool children: every process of its process group (read from /proc)."""
        if self.proc is None:
            return set()
        group = self.proc.pid
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                # the command name is in parentheses and may hold spaces: the fields after it are fixed
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == group:
                    found.add(int(stat.parent.name))
        return found

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
    queues: str = ",".join(ALL_QUEUES),
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


@contextlib.contextmanager
def deployment(
    database_url: str,
    profile: Path,
    scratch: Path,
    api_keys: Mapping[str, str],
    *,
    worker: str = "bench",
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, str]]:
    """The deployed shape: ``om serve`` and one ``om worker`` (concurrency 2) on a private
    ``redis-server``, over ``database_url``; yields the server's base URL and the worker's metrics URL.
    ``extra_env`` adds ``OM_*`` settings to both. Logs go to ``scratch`` (``server.log``,
    ``<worker>.log``)."""
    broker = RedisServer(free_port())
    broker.start()
    try:
        keys = ",".join(f"{key}={tenant}" for key, tenant in api_keys.items())
        env = process_env(
            database_url=database_url,
            broker_url=broker.url,
            profile=profile,
            extra={"OM_API_KEYS": keys, **(extra_env or {})},
        )
        metrics_port = free_port()
        # the worker adds up its prefork children's metrics from a directory of its own
        worker_env = {**env, "OM_WORKER_METRICS_PORT": str(metrics_port)}
        process = om_worker_process(worker, worker_env, scratch, concurrency=2).start()
        try:
            with om_server(["serve"], env, scratch / "server.log") as base:
                yield base, f"http://127.0.0.1:{metrics_port}/metrics"
        finally:
            process.stop()
    finally:
        broker.kill()
