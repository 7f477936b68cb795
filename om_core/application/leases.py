"""Leases on work in flight: held while the work runs, renewed from a thread of the holding process.

A cycle (and a model call of the proxy) is held under a lease for ``Deps.lease_seconds``; the process that
holds it renews every lease it holds a few times per lease period, from one daemon thread, whatever the work
is doing meanwhile (a model call may take minutes). When the process dies, its leases lapse within one
period, and whoever looks next (beat's recovery, a redelivered task, a reader waiting on the cycle) takes
the work back. A holder on this host whose process is gone is known dead at once, without waiting for its
lease to lapse.

A holder is ``<host>/<pid>/<token>``; the token is new in every process (a fork child gets its own), so a
pid reused by a later process never inherits a dead one's leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Iterator

from om_core.application.deps import Deps
from om_core.application.ports import Leases

log = logging.getLogger(__name__)

# renewals per lease period: a holder may miss two and still hold its lease
RENEWALS_PER_PERIOD = 3


class _Identity:
    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self.pid = os.getpid()
        self.holder = f"{socket.gethostname()}/{self.pid}/{secrets.token_hex(4)}"


_identity = _Identity()


def holder_id() -> str:
    """This process's name as a lease holder."""
    return _identity.holder


def dead_on_this_host(holder: str) -> bool:
    """Whether ``holder`` is a process of this host that no longer runs (a killed prefork child, say)."""
    host, _, rest = holder.partition("/")
    pid_text = rest.partition("/")[0]
    if host != socket.gethostname() or not pid_text.isdigit() or holder == holder_id():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        # this pid, another token: an earlier process that had this pid
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits to be reaped (a killed worker's child whose parent died too,
    under an init that does not reap): it still answers a signal, but runs nothing."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # the command name is in parentheses and may hold spaces; the state is the field after it
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("Z", "X")


class LeaseKeeper:
    """Renews the leases this process holds on one store, every ``seconds / RENEWALS_PER_PERIOD``."""

    def __init__(self, leases: Leases, seconds: float) -> None:
        self._leases = leases
        self._seconds = seconds
        self._held: dict[str, int] = {}
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def add(self, key: str) -> None:
        with self._lock:
            self._add(key)

    def adopt(self, key: str) -> bool:
        """Hold ``key`` from now on, unless a block of this process already does (one look, under the lock,
        so two threads never both adopt it)."""
        with self._lock:
            if key in self._held:
                return False
            self._add(key)
            return True

    def _add(self, key: str) -> None:
        self._held[key] = self._held.get(key, 0) + 1
        self._lost.discard(key)
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            # a fork child inherits this object but not the thread
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._renew_forever, name="om-leases", daemon=True)
            self._thread.start()

    def remove(self, key: str) -> None:
        with self._lock:
            left = self._held.get(key, 0) - 1
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)
                self._lost.discard(key)

    def lost(self, key: str) -> bool:
        """Whether the lease on ``key`` was found taken by another holder at a renewal."""
        with self._lock:
            return key in self._lost

    def renew_now(self) -> None:
        """Renew every lease held; note those found taken by another holder."""
        with self._lock:
            keys = list(self._held)
        if not keys:
            return
        try:
            renewed = self._leases.renew_leases(keys, holder_id(), self._seconds)
        except Exception as error:  # the next renewal tries again; two may fail within a period
            log.warning("could not renew %d lease(s): %s", len(keys), error)
            return
        gone = set(keys) - renewed
        if not gone:
            return
        with self._lock:
            gone &= set(self._held)
            self._lost |= gone
        for key in sorted(gone):
            log.warning("the lease on %s was taken back: its result will be recorded as stale", key)

    def _renew_forever(self) -> None:
        interval = self._seconds / RENEWALS_PER_PERIOD
        while True:
            time.sleep(interval)
            self.renew_now()


_keepers: weakref.WeakKeyDictionary[Leases, LeaseKeeper] = weakref.WeakKeyDictionary()
_keepers_lock = threading.Lock()


def _keeper(deps: Deps) -> LeaseKeeper:
    with _keepers_lock:
        keeper = _keepers.get(deps.leases)
        if keeper is None:
            keeper = _keepers[deps.leases] = LeaseKeeper(deps.leases, deps.lease_seconds)
        return keeper


@contextlib.contextmanager
def held_lease(deps: Deps, key: str, stream_id: str) -> Iterator[str | None]:
    """Hold the lease on ``key`` while the block runs, renewed meanwhile, released after. Yields None when
    this process holds it, else the live holder (then the block must leave the work to it)."""
    holder = holder_id()
    keeper = _keeper(deps)
    current = deps.leases.acquire_lease(key, stream_id, holder, deps.lease_seconds)
    if current and dead_on_this_host(current):
        current = deps.leases.acquire_lease(key, stream_id, holder, deps.lease_seconds, replacing=current)
    if current is None:
        keeper.add(key)
    elif current == holder and keeper.adopt(key):
        # this process's own lease, left by a release that failed (the store was out of reach) and held
        # by no block of this process: the work is run again under it, not left waiting for it to lapse
        current = deps.leases.acquire_lease(key, stream_id, holder, deps.lease_seconds, replacing=holder)
        if current is not None:
            keeper.remove(key)
    if current is not None:
        # "" : released between our two looks; the caller treats it as taken and looks again
        yield current or "(released)"
        return
    try:
        yield None
    finally:
        keeper.remove(key)
        try:
            deps.leases.release_lease(key, holder)
        except Exception as error:  # it lapses on its own; recovery then finds the work already done
            log.warning("could not release the lease on %s: %s", key, error)
