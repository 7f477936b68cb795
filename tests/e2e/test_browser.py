"""The web page in Debian's headless Chromium against a real `om serve --embedded` process.

Skipped where Debian's Chromium is not installed (docs/operations.md, Tests in CI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.processes import om_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def _call(base: str, method: str, path: str, body: object | None = None) -> dict[str, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"model": "om-local/extractive", "observation": {"messageTokens": 300}}))
    env = {
        **os.environ,
        "OM_AUTH": "disabled",
        "OM_PROFILE": str(profile),
        "OM_DATABASE_URL": f"sqlite:///{tmp_path / 'om.sqlite3'}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    with om_server(["serve", "--embedded"], env, tmp_path / "serve.log") as base:
        yield base


def test_the_page_shows_a_threads_windows_and_log(server: str, tmp_path: Path) -> None:
    _call(server, "PUT", "/v1/threads/browser-demo", {"resource_id": "u1", "title": "Browser demo"})
    for i in range(30):
        text = f"My colleague number {i} is Person{i}, who lives in City{i} and plays chess on Sundays."
        _call(
            server,
            "POST",
            "/v1/threads/browser-demo/messages",
            {"messages": [{"id": f"m{i}", "role": "user", "content": text}]},
        )
    _call(server, "GET", "/v1/threads/browser-demo/context")
    deadline = time.monotonic() + 30
    while not _call(server, "GET", "/v1/threads/browser-demo/observations")["log"]:
        assert time.monotonic() < deadline, "no observation reached the log"
        time.sleep(0.5)
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=8000",
        "--dump-dom",
        f"{server}/ui#browser-demo",
    ]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "Browser demo" in dom, dom[dom.find('id="threads"') : dom.find('id="threads"') + 600]
    assert "/ 300 tokens" in dom  # the messages window bar, filled from /status
    assert "Person1" in dom  # the observation log, from /observations
