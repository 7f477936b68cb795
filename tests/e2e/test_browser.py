"""The web page in Debian's headless Chromium against a real `om serve --embedded` process.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands on its fd 3,
answers on its fd 4, each a JSON text ending in NUL), so the test types into the page, clicks and reads the
live DOM with nothing but the standard library. Skipped where Debian's Chromium is not installed
(docs/operations.md, Tests in CI).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.processes import om_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

KEY = "ui-test-key"
THREAD = "browser-demo"


def _call(base: str, method: str, path: str, body: object | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read() or b"{}")
        return answer


def _say(base: str, i: int) -> None:
    text = f"My colleague number {i} is Person{i}, who lives in City{i} and plays chess on Sundays."
    _call(
        base,
        "POST",
        f"/v1/threads/{THREAD}/messages",
        {"messages": [{"id": f"m{i}", "role": "user", "content": text}]},
    )


def _until(predicate: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


class Page:
    """One tab of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, profile_dir: Path) -> None:
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile_dir}",
        ]
        # the protocol's descriptors must be 3 and 4 in Chromium: the shell places them there
        script = f'exec "$0" "$@" 3<&{commands_read} 4>&{answers_write} {commands_read}<&- {answers_write}>&-'
        self._browser = subprocess.Popen(
            ["bash", "-c", script, str(CHROMIUM), *flags],
            pass_fds=(commands_read, answers_write),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            while b"\0" not in self._buffer:
                ready, _, _ = select.select([self._answers], [], [], max(0.0, deadline - time.monotonic()))
                assert ready, f"Chromium did not answer {method}"
                chunk = os.read(self._answers, 1 << 16)
                assert chunk, "Chromium exited"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:  # anything else is an event nobody subscribed to
                assert "error" not in answer, answer["error"]
                result: dict[str, Any] = answer["result"]
                return result

    def js(self, expression: str) -> Any:
        answer = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")

    def wait(self, expression: str, what: str, timeout: float = 30) -> Any:
        return _until(lambda: self.js(expression), what, timeout)

    def type_into(self, selector: str, text: str) -> None:
        """Focus the field and type as a keyboard would (trusted input events)."""
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def close(self) -> None:
        try:
            self._session = None
            self.send("Browser.close")
            self._browser.wait(timeout=30)
        finally:
            if self._browser.poll() is None:
                self._browser.kill()
                self._browser.wait()
            os.close(self._commands)
            os.close(self._answers)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"model": "om-local/extractive", "observation": {"messageTokens": 300}}))
    env = {
        **{k: v for k, v in os.environ.items() if k != "OM_AUTH"},
        "OM_API_KEYS": f"{KEY}=acme",
        "OM_PROFILE": str(profile),
        "OM_DATABASE_URL": f"sqlite:///{tmp_path / 'om.sqlite3'}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    with om_server(["serve", "--embedded"], env, tmp_path / "serve.log") as base:
        yield base


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    tab = Page(tmp_path / "chromium")
    try:
        yield tab
    finally:
        tab.close()


def _digits(text: str) -> int:
    return int(re.sub(r"\D", "", text))


def test_the_page_shows_a_thread_its_usage_generations_and_work_in_flight(server: str, page: Page) -> None:
    _call(server, "PUT", f"/v1/threads/{THREAD}", {"resource_id": "u1", "title": "Browser demo"})
    for i in range(30):
        _say(server, i)
    _call(server, "GET", f"/v1/threads/{THREAD}/context")
    _until(lambda: _call(server, "GET", f"/v1/threads/{THREAD}/observations")["log"], "an observation")
    _call(server, "POST", f"/v1/threads/{THREAD}/reflect", {"wait": True})
    observations = _call(server, "GET", f"/v1/threads/{THREAD}/observations")
    assert observations["generation"] == 1

    page.send("Page.navigate", url=f"{server}/ui")
    page.wait("document.readyState === 'complete'", "the page to load")
    # the key goes into a password field; without it the server refuses the list
    assert page.js("document.getElementById('key').type") == "password"
    page.wait("document.getElementById('threads').textContent.length > 0", "the refused list")
    assert page.js("document.querySelectorAll('.thread').length") == 0
    bars = (
        "[...document.querySelectorAll('.bar')]"
        ".map(b => [b.firstElementChild.style.width, b.lastElementChild.textContent])"
    )
    assert page.js(bars) == [["0%", ""], ["0%", ""]]
    assert page.js("document.getElementById('title').textContent") == "Select a thread"

    page.type_into("#key", KEY)
    page.js("document.getElementById('reload').click()")
    page.wait("document.querySelectorAll('.thread').length === 1", "the tenant's threads")
    # kept for the tab only, never in localStorage
    assert page.js("sessionStorage.getItem('omKey')") == KEY
    assert page.js("localStorage.getItem('omKey')") is None
    assert page.js(bars) == [["0%", ""], ["0%", ""]]  # still empty: no thread chosen yet

    page.js(f"document.querySelector('.thread[data-id=\"{THREAD}\"]').click()")
    page.wait("document.getElementById('title').textContent === 'Browser demo'", "the title as heading")
    assert page.js("document.getElementById('tid').textContent") == THREAD
    label = page.wait("document.querySelector('#mbar span').textContent", "the messages bar")
    status = _call(server, "GET", f"/v1/threads/{THREAD}/status")
    assert label.endswith("/ 300 tokens")
    assert page.js("document.querySelector('#obar span').textContent").endswith(" tokens")

    # the models each role may call, and the thresholds, as the API resolves them
    assert _call(server, "GET", f"/v1/threads/{THREAD}")["models"] == {
        "observer": ["om-local/extractive"],
        "reflector": ["om-local/extractive"],
    }
    meta = page.wait("document.getElementById('meta').textContent", "the model line")
    assert "observer: om-local/extractive" in meta and "reflector: om-local/extractive" in meta
    assert _digits(page.js("document.getElementById('mthreshold').textContent")) == 300
    threshold = status["windows"]["active"]["observations"]["threshold"]
    assert _digits(page.js("document.getElementById('othreshold').textContent")) == threshold

    # usage and cost per cycle: one row per outcome the events record, with its figures
    events = _call(server, "GET", f"/v1/threads/{THREAD}/events?limit=1000")["events"]
    outcomes = {e["data"]["cycle_id"]: e["data"]["usage"] for e in events if "usage" in e["data"]}
    assert len(outcomes) >= 3  # buffered observations, a synchronous one, the reflection
    rows_js = (
        "Object.fromEntries([...document.querySelectorAll('#usage tbody tr')].map("
        "r => [r.dataset.cycle, [...r.cells].map(c => c.textContent)]))"
    )
    rows = page.wait(f"(r => Object.keys(r).length >= {len(outcomes)} && r)({rows_js})", "the usage rows")
    for cycle, usage in outcomes.items():
        _, _, model, inputs, outputs, total, cost, latency, attempts = rows[cycle]
        assert model == usage["model"] == "om-local/extractive"
        assert (_digits(inputs), _digits(outputs)) == (usage["input_tokens"], usage["output_tokens"])
        assert _digits(total) == usage["input_tokens"] + usage["output_tokens"]
        assert cost == f"${usage['cost_usd']:.6f}"
        assert latency.endswith(" ms") and int(attempts) == usage["calls"]
    total = sum(u["input_tokens"] + u["output_tokens"] for u in outcomes.values())
    assert _digits(page.js("document.getElementById('totaltokens').textContent")) == total

    # earlier generations: the picker lists both, the current one shown first
    assert page.js("[...document.getElementById('gen').options].map(o => o.value)") == ["0", "1"]
    assert page.js("document.getElementById('gen').value") == "1"
    log_js = "[...document.querySelectorAll('#log pre')].map(p => p.textContent)"
    current = [segment["text"] for segment in observations["log"]]
    assert page.js(log_js) == current
    earlier = [
        s["text"] for s in _call(server, "GET", f"/v1/threads/{THREAD}/observations?generation=0")["log"]
    ]
    assert earlier and earlier != current
    page.js("const g = document.getElementById('gen'); g.value = '0'; g.dispatchEvent(new Event('change'))")
    _until(lambda: page.js(log_js) == earlier, "generation 0's log")

    # work in flight, with a clock that runs: a slow Observer keeps a buffer run open for seconds
    slow = {"observation": {"providerOptions": {"omLocal": {"latencyMs": 5000}}}}
    _call(server, "PUT", f"/v1/threads/{THREAD}", {"config": slow})
    i = 30
    while not (flight := _call(server, "GET", f"/v1/threads/{THREAD}/observations")["in_flight"]["buffer"]):
        _say(server, i)
        i += 1
        assert i < 60, "no buffer run was requested"
    cycle = flight["cycle_id"]
    page.wait(
        f"document.querySelector('.flight code')?.textContent === {json.dumps(cycle)}", "work in flight"
    )
    elapsed = "parseFloat(document.querySelector('.flight .elapsed').textContent)"
    first = page.js(elapsed)
    time.sleep(1.2)
    assert page.js(elapsed) >= first + 1.0
    # once the run ends the page says so, and the run's usage joins the table
    page.wait("document.querySelectorAll('.flight').length === 0", "the run to end", timeout=40)
    page.wait(f"document.querySelector('#usage tr[data-cycle={json.dumps(cycle)}]') !== null", "its usage")
