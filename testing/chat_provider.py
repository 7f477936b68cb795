"""A chat model provider on loopback that speaks OpenAI's chat-completions protocol, for the proxy's tests
of what reaches a provider: it counts every call it answers and can take its time answering, as a real
provider under load does.

It answers ``answer <n>`` to its n-th call (whole, or streamed in two chunks). om reaches it as any
OpenAI-compatible provider: ``OPENAI_BASE_URL`` pointing at it, a model ``openai/<name>`` in
``OM_CHAT_MODELS``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testing.processes import free_port


@dataclass
class ChatProvider:
    delay_s: float = 0.0
    port: int = field(default_factory=free_port)
    calls: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ChatProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with provider._lock:
                    provider.calls.append(body)
                    number = len(provider.calls)
                time.sleep(provider.delay_s)
                text = f"answer {number}"
                head = {"id": f"chatcmpl-{number}", "created": int(time.time()), "model": body["model"]}
                if body.get("stream"):
                    chunks = [
                        {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, **piece}]}
                        for piece in (
                            {"delta": {"role": "assistant", "content": text}, "finish_reason": None},
                            {"delta": {}, "finish_reason": "stop"},
                        )
                    ]
                    raw = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                    self._answer(raw.encode(), "text/event-stream")
                    return
                completion = {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
                }
                self._answer(json.dumps(completion).encode(), "application/json")

            def _answer(self, raw: bytes, content_type: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def call_count(self) -> int:
        with self._lock:
            return len(self.calls)
