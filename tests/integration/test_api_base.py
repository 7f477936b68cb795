"""An Observer or Reflector served by any OpenAI-compatible server: ``model: openai/<name>`` with
``modelSettings.apiBase`` (or ``OPENAI_BASE_URL``), no API key needed, and the address set by the server
profile only."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from om_core.adapters.models.litellm_gateway import LiteLLMGateway, RetryPolicy, completion_kwargs
from om_core.application.append import configure_thread
from om_core.application.ports import ModelConfigurationError, ModelRequest
from om_core.bootstrap import build_inline, check_profile_models
from om_core.domain.config import ConfigError, parse_memory_config

MESSAGES = [{"role": "user", "content": "hello"}]


class _Compatible(BaseHTTPRequestHandler):
    """The chat-completions endpoint of an OpenAI-compatible server; remembers what it was sent."""

    seen: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.path, self.headers.get("Authorization", ""), body))
        reply = {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Compatible.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Compatible)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _request(api_base: str) -> ModelRequest:
    return ModelRequest(
        model="openai/smollm2", messages=MESSAGES, purpose="observer", settings={"api_base": api_base}
    )


def test_a_call_goes_to_the_api_base_without_a_key(server: str) -> None:
    gateway = LiteLLMGateway(RetryPolicy(max_retries=0), environ={})
    response = gateway.complete(_request(server))
    assert response.text == "hi" and response.usage.input_tokens == 7
    path, authorization, body = _Compatible.seen[0]
    assert path == "/v1/chat/completions" and body["model"] == "smollm2"
    # the OpenAI client insists on some key; a local server checks none
    assert authorization == "Bearer no-key"


def test_the_key_variable_is_sent_when_set(server: str) -> None:
    gateway = LiteLLMGateway(RetryPolicy(max_retries=0), environ={"OPENAI_API_KEY": "sk-served"})
    gateway.complete(_request(server))
    assert _Compatible.seen[0][1] == "Bearer sk-served"


def test_openai_base_url_variable_serves_every_openai_model(server: str) -> None:
    gateway = LiteLLMGateway(RetryPolicy(max_retries=0), environ={"OPENAI_BASE_URL": server})
    request = ModelRequest(model="openai/smollm2", messages=MESSAGES, purpose="observer")
    assert gateway.complete(request).text == "hi"


def test_api_base_is_a_model_setting() -> None:
    config = parse_memory_config({"observation": {"modelSettings": {"apiBase": "http://127.0.0.1:8080/v1/"}}})
    assert config.observation.model_settings.api_base == "http://127.0.0.1:8080/v1"
    kwargs, _ = completion_kwargs(_request("http://127.0.0.1:8080/v1"))
    assert kwargs["api_base"] == "http://127.0.0.1:8080/v1"
    with pytest.raises(ConfigError) as excinfo:
        parse_memory_config({"reflection": {"modelSettings": {"apiBase": "127.0.0.1:8080"}}})
    assert "apiBase" in str(excinfo.value)


def test_provider_options_cannot_choose_the_address() -> None:
    request = ModelRequest(
        model="openai/gpt-4o-mini",
        messages=MESSAGES,
        purpose="observer",
        provider_options={"openai": {"baseURL": "http://attacker.example/v1"}},
    )
    with pytest.raises(ModelConfigurationError, match=r"modelSettings\.apiBase"):
        completion_kwargs(request)


def _served(observer: bool, reflector: bool) -> dict[str, Any]:
    base = {"modelSettings": {"apiBase": "http://127.0.0.1:8080/v1"}}
    return {
        "model": "openai/smollm2",
        "observation": base if observer else {},
        "reflection": base if reflector else {},
    }


def test_start_up_needs_no_key_for_a_served_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    check_profile_models(_served(observer=True, reflector=True))
    # the Reflector would call OpenAI itself with this model: its key is needed
    with pytest.raises(ModelConfigurationError, match="OPENAI_API_KEY"):
        check_profile_models(_served(observer=True, reflector=False))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    check_profile_models({"model": "openai/smollm2"})


def test_a_thread_cannot_choose_the_address(tmp_path: Path) -> None:
    deps, _ = build_inline(
        database_url=f"sqlite:///{tmp_path / 'om.sqlite3'}", profile={"model": "om-local/extractive"}
    )
    try:
        with pytest.raises(ConfigError) as excinfo:
            configure_thread(
                deps,
                tenant="t",
                thread_id="th",
                config={"observation": {"model_settings": {"api_base": "http://attacker.example/v1"}}},
            )
        assert "observation.modelSettings.apiBase" in str(excinfo.value)
    finally:
        deps.close()
