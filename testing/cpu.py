"""CPU time of the processes a benchmark drives, read from ``/proc``: what an operation costs the server,
its workers and Postgres, beside the latency the client sees.

The processes are picked by what they run (``om serve``'s interpreter, ``om worker`` and its children,
``postgres``), so a benchmark needs no handle on them; a process that starts during the measurement counts
from zero, one that ends during it is lost from its group (a database connection a pool closes takes its
backend with it). The whole machine's busy time is read beside them, and holds what the groups miss. On a
machine without ``/proc`` every figure is None.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Process:
    pid: int
    name: str
    command: str


def _processes() -> list[Process]:
    found = []
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append(Process(int(entry.name), name, command))
    return found


def _cpu_seconds(pid: int) -> float | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: utime and stime are the 12th and 13th
    # fields after it
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


def is_om_server(process: Process) -> bool:
    return "om_api.cli" in process.command and " serve" in process.command


def is_om_worker(process: Process) -> bool:
    # ``om worker`` and its prefork children (which keep the parent's command line)
    return "om_api.cli" in process.command and " worker" in process.command


def is_postgres(process: Process) -> bool:
    return process.name == "postgres" or process.command.startswith("postgres:")


DEPLOYED: Mapping[str, Callable[[Process], bool]] = {
    "server": is_om_server,
    "worker": is_om_worker,
    "postgres": is_postgres,
}


class CpuMeter:
    """Snapshots of the CPU seconds of each group of processes; ``since`` gives the seconds spent by each
    group after a snapshot."""

    def __init__(self, groups: Mapping[str, Callable[[Process], bool]] = DEPLOYED) -> None:
        self.groups = dict(groups)

    def snapshot(self) -> dict[str, dict[int, float]]:
        taken: dict[str, dict[int, float]] = {group: {} for group in self.groups}
        for process in _processes():
            for group, member in self.groups.items():
                if member(process):
                    seconds = _cpu_seconds(process.pid)
                    if seconds is not None:
                        taken[group][process.pid] = seconds
        # the whole machine and this process (a benchmark's clients), which no group holds
        taken["machine"] = {0: machine_busy_seconds() or 0.0}
        own = os.times()
        taken["this process"] = {0: own.user + own.system}
        return taken

    def since(self, before: Mapping[str, Mapping[int, float]]) -> dict[str, float | None]:
        """CPU seconds per group since ``before``; "machine" is every process's (busy time of all CPUs),
        "this process" the caller's own. A process of a group that exited meanwhile (an idle database
        connection closed by the pool) is missing from its group but not from the machine."""
        if not _PROC.is_dir():
            return dict.fromkeys([*self.groups, "machine", "this process"])
        now = self.snapshot()
        return {
            group: sum(seconds - before.get(group, {}).get(pid, 0.0) for pid, seconds in now[group].items())
            for group in now
        }


def machine_busy_seconds() -> float | None:
    """Non-idle CPU time of the whole machine so far, every CPU added up (None without ``/proc``)."""
    try:
        first = (_PROC / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait
    ticks = [int(v) for v in first[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS_PER_SECOND


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None
