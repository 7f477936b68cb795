"""`om flower` as an operator starts it: Flower on the project's Celery app, behind basic auth."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from testing.processes import free_port

from .conftest import REDIS_URL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_flower_starts_behind_basic_auth_and_refuses_to_start_without_it(tmp_path: Path) -> None:
    env = {**os.environ, "OM_BROKER_URL": REDIS_URL, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("OM_FLOWER_USER", None)
    env.pop("OM_FLOWER_PASSWORD", None)
    refused = subprocess.run(
        [sys.executable, "-m", "om_api.cli", "flower", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and "OM_FLOWER_USER" in refused.stderr

    port = free_port()
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [sys.executable, "-m", "om_api.cli", "flower", "--port", str(port)],
        env={**env, "OM_FLOWER_USER": "ops", "OM_FLOWER_PASSWORD": "s3cret"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert flower.poll() is None, (tmp_path / "flower.log").read_text()
            try:
                anonymous = httpx.get(f"{base}/", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
                time.sleep(0.3)
        assert anonymous.status_code == 401
        assert httpx.get(f"{base}/", auth=("ops", "wrong"), timeout=5).status_code == 401
        assert httpx.get(f"{base}/", auth=("ops", "s3cret"), timeout=5).status_code == 200
        # the password travels in Flower's environment, never on a command line another user can read
        assert b"s3cret" not in Path(f"/proc/{flower.pid}/cmdline").read_bytes()
    finally:
        flower.terminate()
        flower.wait(timeout=20)
        log.close()
