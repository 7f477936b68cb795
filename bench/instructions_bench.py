"""Instructions per in-process turn, counted by callgrind: a figure that does not move with the machine's
load or its clock. Prints JSON.

    .venv/bin/python -m bench.instructions_bench [--turns 30] [--warmup 20]
    om bench instructions

What runs: ``take_turn`` on ``build_inline`` over a scratch SQLite file, with OM active (the profile of
``om bench turn``) and the user messages of the same generated conversation. The program runs itself under
``valgrind --tool=callgrind`` with instrumentation off, switches it on around each measured ``take_turn``
only, and drains the background model work between turns, so no model call runs inside a measured turn.
Reported: instructions per turn of the calling thread, in all and by the library they ran in (the Python
interpreter, SQLite, pydantic-core, …). Needs valgrind (Debian's ``valgrind``); about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_CHILD = "OM_BENCH_INSTRUCTIONS_CHILD"
# ``fn=`` and ``obj=`` lines name a function and its library by id after their first mention
_NAMED = re.compile(r"^(ob|fn|cob|cfn)=\((\d+)\)(?: (.*))?$")


def run_turns(turns: int, warmup: int) -> None:
    """The measured program (under callgrind): ``warmup`` turns, then ``turns`` instrumented ones."""
    from bench.turn_bench import PROFILE, TENANT
    from om_core.application.append import append_messages, configure_thread
    from om_core.application.turn import take_turn
    from om_core.bootstrap import build_inline
    from testing.generator import generate

    conversation = generate("help", 1000, messages=2 * (turns + warmup) + 10)
    with tempfile.TemporaryDirectory(prefix="om-instructions-") as scratch:
        deps, dispatcher = build_inline(
            database_url=f"sqlite:///{scratch}/om.sqlite3", profile=PROFILE, background=True
        )
        configure_thread(deps, tenant=TENANT, thread_id="t")
        pid = str(os.getpid())

        def instrument(on: bool) -> None:
            subprocess.run(
                ["callgrind_control", "-i", "on" if on else "off", pid],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

        for index, turn in enumerate(conversation.turns[: warmup + turns]):
            measured = index >= warmup
            if measured:
                instrument(True)
            take_turn(deps, tenant=TENANT, thread_id="t", messages=[turn.user])
            if measured:
                instrument(False)
            append_messages(deps, tenant=TENANT, thread_id="t", messages=[turn.assistant])
            dispatcher.drain()
        dispatcher.close()
        deps.close()


def by_library(profile: Path) -> tuple[int, Counter[str]]:
    """The thread's total instructions and their split by library, from a callgrind output file."""
    names: dict[str, str] = {}
    libraries: Counter[str] = Counter()
    total = 0
    library = ""
    in_call = False
    for line in profile.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            total = int(line.split()[1])
            continue
        named = _NAMED.match(line)
        if named:
            kind, key, name = named.groups()
            if name is not None:
                names[f"{kind[-2:]}{key}"] = name
            if kind == "ob":
                library = names.get(f"ob{key}", "?")
            continue
        if line.startswith("calls="):
            in_call = True  # the next cost line is the inclusive cost of a call: counted in its callee
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) >= 2 and not in_call:
                libraries[Path(library).name] += int(parts[1])
            in_call = False
    return total, libraries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30, help="measured turns")
    parser.add_argument("--warmup", type=int, default=20, help="turns before the measured ones")
    args = parser.parse_args()
    if os.environ.get(_CHILD):
        run_turns(args.turns, args.warmup)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("om bench instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="om-callgrind-") as scratch:
        out = Path(scratch) / "callgrind.out"
        began = time.monotonic()
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}.%p",
                sys.executable,
                "-m",
                "bench.instructions_bench",
                f"--turns={args.turns}",
                f"--warmup={args.warmup}",
            ],
            env={**os.environ, _CHILD: "1"},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # the calling thread is the first of the process's files
        [main_thread] = sorted(Path(scratch).glob("callgrind.out.*-01"))
        total, libraries = by_library(main_thread)
        elapsed = time.monotonic() - began
    per_turn = {name: round(count / args.turns) for name, count in libraries.most_common() if count}
    report: dict[str, Any] = {
        "benchmark": "instructions_per_turn",
        "turns": args.turns,
        "instructions_per_turn": round(total / args.turns),
        "by_library": per_turn,
        "note": "the calling thread only; the switches of the instrumentation itself are included",
        "seconds": round(elapsed, 1),
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
