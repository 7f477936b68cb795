"""Webhooks at least once under ``om serve --embedded`` (docs/operations.md, Webhooks): a delivery the
receiver refuses is retried on the embedded worker's own broker, and one still waiting when the server
stops is delivered after it starts again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from om_core.domain.webhooks import ID_HEADER
from testing.processes import free_port, om_server, process_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SECRET = "whsec-embedded-0123456789"


@dataclass
class Receiver:
    """Answers each delivery with the next status of ``statuses`` (then 204), noting the delivery ids."""

    statuses: list[int]
    port: int = field(default_factory=free_port)
    attempts: list[tuple[str, int]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                with receiver._lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 204
                    receiver.attempts.append((self.headers[ID_HEADER], status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def seen(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self.attempts)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(statuses=[500]).start()
    yield made
    made.stop()


def _env(tmp: Path, receiver: Receiver, **extra: str) -> dict[str, str]:
    profile = tmp / "profile.json"
    profile.write_text(
        json.dumps(
            {
                "model": "om-local/extractive",
                "observation": {"messageTokens": 300, "bufferTokens": 0.25},
                "webhooks": [
                    {
                        "url": f"http://127.0.0.1:{receiver.port}/hooks",
                        "secret": SECRET,
                        "events": ["buffering.start"],
                    }
                ],
            }
        )
    )
    return process_env(
        database_url=f"sqlite:///{tmp}/om.sqlite3",
        broker_url="memory://",
        profile=profile,
        extra={"OM_AUTH": "disabled", **extra},
    )


def _talk(base: str, thread: str) -> None:
    """Enough turns for background observation to start (a buffering.start delivery)."""
    with httpx.Client(base_url=base, timeout=30) as http:
        for index in range(12):
            text = f"Note {index}: the harbour crane moved {index} containers " + "cargo " * 40
            answer = http.post(
                f"/v1/threads/{thread}/messages", json={"messages": [{"role": "user", "content": text}]}
            )
            assert answer.status_code == 200, answer.text


def test_a_refused_delivery_is_retried_under_the_same_id(tmp_path: Path, receiver: Receiver) -> None:
    with om_server(["serve", "--embedded"], _env(tmp_path, receiver), tmp_path / "serve.log") as base:
        _talk(base, "retried")
        first, status = wait_for(lambda: receiver.seen()[:1], 60, 0.1, what="the first attempt")[0]
        assert status == 500
        again = wait_for(
            lambda: [a for a in receiver.seen()[1:] if a[0] == first],
            60,
            0.1,
            what="the retry of the delivery",
        )
        assert again[0] == (first, 204)


def test_a_delivery_waiting_when_the_server_stops_is_delivered_after_it_starts_again(
    tmp_path: Path, receiver: Receiver
) -> None:
    # refused for longer than the server runs; the retry waits in the server's memory when it stops
    receiver.statuses = [500] * 4
    env = _env(tmp_path, receiver, OM_WORKER_WEBHOOK_BACKOFF_MAX="30", OM_WORKER_REQUEUE_AFTER="2")
    with om_server(["serve", "--embedded"], env, tmp_path / "first.log") as base:
        _talk(base, "restarted")
        first, _ = wait_for(lambda: receiver.seen()[:1], 60, 0.1, what="the first attempt")[0]
        wait_for(lambda: len(receiver.seen()) >= 2, 60, 0.1, what="a second refused attempt")
    refused = len(receiver.seen())
    receiver.statuses = []
    with om_server(["serve", "--embedded"], env, tmp_path / "second.log"):
        delivered = wait_for(
            lambda: [a for a in receiver.seen()[refused:] if a == (first, 204)],
            90,
            0.2,
            what="the delivery after the restart",
        )
    assert delivered == [(first, 204)]
