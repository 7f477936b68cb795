"""``om bench instructions`` end to end: the turns run under callgrind and their count comes back by
library (a few turns only; the figures themselves are for docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # valgrind is on every machine CI runs on: there a missing one fails the test rather than skipping it
    pytest.mark.skipif(
        shutil.which("valgrind") is None and os.environ.get("CI") != "true", reason="needs valgrind"
    ),
]


def test_a_turn_is_counted_in_instructions_by_library() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "om_api.cli", "bench", "instructions", "--turns", "3", "--warmup", "2"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["turns"] == 3
    libraries = report["by_library"]
    # the interpreter and SQLite both ran, and the split adds up to the whole
    assert any(name.startswith("libpython") for name in libraries)
    assert any(name.startswith("libsqlite3") for name in libraries)
    assert abs(sum(libraries.values()) - report["instructions_per_turn"]) <= len(libraries)
    assert 100_000 < report["instructions_per_turn"] < 100_000_000
