"""What every process says and checks when it starts (docs/operations.md, Start-up checks).

One line names what the process runs on: the database (its password masked), the broker, the profile file
and its profiles, and for the API the auth mode. Variables named ``OM_*`` that no setting reads are reported
with the nearest known name, since a typo'd variable is otherwise ignored and the process starts on a
default. Whatever cannot work is refused before the process does anything else, each refusal a
``StartupError`` whose message is the one line the command line prints: a cause and its fix.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from om_core.settings import DEV_API_KEY, ServerSettings, masked_url

# read by the test suite, the benchmarks and the real-model test, never by a process of the service
SUITE_PREFIXES = ("OM_TEST_", "OM_BENCH_", "OM_REAL_MODEL_", "OM_PROPERTY_")
# prometheus_client's multiprocess mode writes one file per metric kind and process, named *.db
_METRIC_FILES = "*.db"


class StartupError(RuntimeError):
    """A setting or a resource that makes the process unable to work; the message says what to do."""


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """A line for each ``OM_*`` variable of ``environ`` that no setting reads, naming the nearest known
    one: ``OM_DATABSE_URL is not an om setting (did you mean OM_DATABASE_URL?): it is ignored``."""
    names = sorted(set(known))
    lines = []
    for name in sorted(environ):
        if not name.startswith("OM_") or name in names or name.startswith(SUITE_PREFIXES):
            continue
        nearest = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f" (did you mean {nearest[0]}?)" if nearest else ""
        lines.append(f"{name} is not an om setting{hint}: it is ignored")
    return lines


def profile_summary(settings: ServerSettings) -> str:
    """The profile file and the profiles it names, or what runs without one."""
    document = settings.profile_document
    named = sorted(document.get("profiles") or {})
    names = ", ".join(dict.fromkeys(["default", *named]))
    if settings.profile is None:
        model = settings.profile_layer.get("model")
        if model is not None:
            return f"no profile file (OM_PROFILE unset): profile default with the model {model}"
        return "no profile file (OM_PROFILE unset): profile default with Mastra's default model"
    return f"profile file {settings.profile} (profiles: {names})"


def auth_summary(settings: ServerSettings) -> str:
    """How the API authenticates, naming the development key of docker-compose.yml when it is in use."""
    if not settings.auth_enabled:
        return f"auth disabled (OM_AUTH=disabled, loopback {settings.host} only): every request is 'default'"
    keys = settings.api_keys
    if not keys:
        return "auth by keys made with `om keys create` (OM_API_KEYS unset)"
    tenants = ", ".join(sorted(set(keys.values())))
    line = f"auth by {len(keys)} OM_API_KEYS key{'s' if len(keys) != 1 else ''} (tenants {tenants})"
    if DEV_API_KEY in keys:
        line += (
            f", among them the development key {DEV_API_KEY!r} of docker-compose.yml: set OM_API_KEYS "
            "before anyone else can reach this port"
        )
    return line + ", and keys made with `om keys create`"


def startup_line(process: str, settings: ServerSettings, *details: str) -> str:
    """``om <process>: database …; broker …; profile …; <details>``."""
    broker = masked_url(settings.broker_url)
    if not settings.uses_broker:
        broker += " (an in-process worker)"
    parts = [f"database {masked_url(settings.database_url)}", f"broker {broker}", profile_summary(settings)]
    return f"om {process}: " + "; ".join([*parts, *details])


def refuse_sqlite_with_broker(settings: ServerSettings, process: str) -> None:
    """A SQLite file is this machine's alone: a server or worker on one, with a network broker, would publish
    work that workers elsewhere run on their own database (or none). Refused unless
    ``OM_ALLOW_SQLITE_WITH_BROKER`` says every worker runs here, on the same file."""
    if not settings.database_url.startswith("sqlite") or not settings.uses_broker:
        return
    if settings.allow_sqlite_with_broker:
        return
    raise StartupError(
        f"om {process} would keep its data in the SQLite file {settings.database_url} while its work goes "
        f"to the broker {masked_url(settings.broker_url)}, whose workers cannot share that file: set "
        "OM_DATABASE_URL to the Postgres database every process uses (or run `om serve --embedded` for one "
        "process on SQLite), or set OM_ALLOW_SQLITE_WITH_BROKER=true if every worker runs on this machine "
        "on the same file"
    )


def check_port_free(host: str, port: int, what: str, fix: str) -> None:
    """StartupError when nothing can listen on ``host:port`` (taken by another process, or an address this
    machine does not have), found before the process starts anything that takes seconds."""
    # the family the servers bind a name with (uvicorn: IPv6 only for an address with a colon)
    wanted = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, wanted, socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise StartupError(f"{what} cannot listen on {host}:{port} ({error.strerror}): {fix}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        # as the servers bind: a port in TIME_WAIT is free, one a process listens on is not
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise StartupError(f"{what} cannot listen on {host}:{port} ({error.strerror}): {fix}") from None


def check_broker(url: str, *, unreachable_ok: bool = False) -> None:
    """Fail at start when the broker refuses the database the URL names, and (unless ``unreachable_ok``)
    when it does not answer: once serving, a failed publish is only logged (the outbox keeps the request),
    so a wrong OM_BROKER_URL would otherwise go unnoticed. A worker, beat or Flower passes
    ``unreachable_ok``: Celery waits for a broker that is down (restarting, not up yet) and connects when it
    is back, while a database the broker does not have never comes."""
    import redis

    with redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3) as client:
        try:
            client.ping()
        except redis.exceptions.AuthenticationError as error:
            raise StartupError(
                f"the broker {masked_url(url)} refused the credentials of OM_BROKER_URL ({error}): check the "
                "password in it (redis://:PASSWORD@host:6379/0)"
            ) from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            if not unreachable_ok:
                raise
        except redis.exceptions.ResponseError as error:
            database = url.rstrip("/").rsplit("/", 1)[-1]
            if "DB index is out of range" in str(error):
                raise StartupError(
                    f"the broker {masked_url(url)} has no database {database} (DB index is out of range): "
                    "Redis serves databases 0 to 15 unless its `databases` setting says more; name one of "
                    "them at the end of OM_BROKER_URL"
                ) from None
            raise StartupError(
                f"the broker {masked_url(url)} refused the connection ({error}): check OM_BROKER_URL"
            ) from None


def check_schedule_file(schedule: Path) -> None:
    """StartupError when beat could not keep its last-run times at ``schedule`` (no such directory and
    none can be made, or no write permission)."""
    fix = "pass --schedule a path in a directory beat can write to"
    try:
        schedule.parent.mkdir(parents=True, exist_ok=True)
        # the file itself is left to beat (an empty file is no schedule database): a scratch file proves
        # the directory writable
        with tempfile.NamedTemporaryFile(dir=schedule.parent, prefix=".om-beat-probe-"):
            pass
    except OSError as error:
        raise StartupError(
            f"om beat cannot create its schedule file {schedule} ({error.strerror}): {fix}"
        ) from None
    if schedule.exists() and not os.access(schedule, os.W_OK):
        raise StartupError(f"om beat cannot write its schedule file {schedule} (Permission denied): {fix}")


def prepare_metrics_directory(configured: Path | None) -> tuple[Path, bool]:
    """The directory where a prefork worker's processes keep their metrics, emptied: ``configured``, or a
    new one of this process's own. Returns it and whether it is this process's own (to remove at exit).

    Files that dead processes left would otherwise be added to the live ones' across restarts."""
    if configured is None:
        return Path(tempfile.mkdtemp(prefix="om-worker-metrics-")), True
    try:
        configured.mkdir(parents=True, exist_ok=True)
        for stale in configured.glob(_METRIC_FILES):
            stale.unlink()
    except OSError as error:
        raise StartupError(
            f"the worker cannot use {configured} for its metrics ({error.strerror}): set "
            "OM_WORKER_METRICS_DIR to a directory it can write to, or unset it for one of its own"
        ) from None
    return configured, False


def remove_directory_of(owner_pid: int, directory: Path) -> None:
    """Remove ``directory`` when called in the process that made it (forked children inherit exit hooks)."""
    if os.getpid() == owner_pid:
        with contextlib.suppress(OSError):
            shutil.rmtree(directory)
