"""A record read by a process another process has just written past: caught up from its cache, or read whole.
Prints JSON.

    .venv/bin/python -m bench.catch_up_bench [--database-url URL] [--reads 200]

What runs: two processes' worth of use cases (two ``build_inline`` compositions, each with its own state
cache) on one database, SQLite (a temporary file) and Postgres (a scratch database on ``--database-url``).
One appends the messages of a generated conversation, OM active with the profile of ``om bench turn``; after
each message the other reads the record (``load_state``) twice: from its cache, which holds the state of the
previous message and so gets the events written since and folds them onto it, and with no cache, which reads
the record's document and every message of its window. Reported per backend: CPU time (this process) per
read at the median, and the window's size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from bench.turn_bench import PROFILE, TENANT
from om_core.application.append import append_messages, configure_thread
from om_core.application.repository import load_state
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from testing.generator import generate
from testing.postgres import DEFAULT_SERVER, scratch_postgres

WARM_UP_MESSAGES = 60


def measure(url: str, reads: int) -> dict[str, Any]:
    conversation = generate("help", 1000, messages=WARM_UP_MESSAGES + reads + 10)
    messages = [m for turn in conversation.turns for m in (turn.user, turn.assistant)]
    writer, writer_work = build_inline(database_url=url, profile=PROFILE)
    reader, reader_work = build_inline(database_url=url, profile=PROFILE, migrate=False)
    try:
        configure_thread(writer, tenant=TENANT, thread_id="t")
        stream = thread_stream_id(TENANT, "t")
        for message in messages[:WARM_UP_MESSAGES]:
            append_messages(writer, tenant=TENANT, thread_id="t", messages=[message])
        load_state(reader.records, reader.store, stream, reader.states)
        caught_up: list[float] = []
        whole: list[float] = []
        window: list[int] = []
        for message in messages[WARM_UP_MESSAGES : WARM_UP_MESSAGES + reads]:
            append_messages(writer, tenant=TENANT, thread_id="t", messages=[message])
            began = time.process_time()
            state = load_state(reader.records, reader.store, stream, reader.states)
            caught_up.append(time.process_time() - began)
            window.append(len(state.window))
            began = time.process_time()
            load_state(reader.records, reader.store, stream)
            whole.append(time.process_time() - began)
    finally:
        writer_work.close()
        reader_work.close()
        writer.close()
        reader.close()
    return {
        "reads": reads,
        "window_messages_p50": statistics.median(window),
        "from_a_cache_one_message_behind_ms_p50": round(1000 * statistics.median(caught_up), 3),
        "whole_record_ms_p50": round(1000 * statistics.median(whole), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_SERVER, help="a Postgres server (any database)")
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    report: dict[str, Any] = {"benchmark": "catch_up", "profile": PROFILE}
    with tempfile.TemporaryDirectory(prefix="om-catch-up-") as scratch:
        report["sqlite"] = measure(f"sqlite:///{scratch}/om.sqlite3", args.reads)
    with scratch_postgres(args.database_url, "om_bench_catch_up") as url:
        report["postgres"] = measure(url, args.reads)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
