"""The curl examples of docs/api.md, run as a reader pastes them into a shell against ``om serve``: each
answers 2xx (the live stream sends parts until it is cut)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_BASE = "http://127.0.0.1:8080"


def _commands() -> list[str]:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("## Examples") :]
    block = section[section.index("```sh") + 5 : section.index("```", section.index("```sh") + 5)]
    # one command per line once continuations are joined; a trailing comment is the reader's, not curl's
    return [
        re.sub(r"\s+#\s.*$", "", line) for line in block.replace("\\\n", " ").splitlines() if line.strip()
    ]


def test_every_curl_example_answers(om_serve: tuple[str, dict[str, str]]) -> None:
    base, env = om_serve
    commands = _commands()
    assert commands[0].startswith(f"export OM={DOCUMENTED_BASE} KEY=$(om keys create")
    script = ["set -u", commands[0].replace(DOCUMENTED_BASE, base)]
    for index, command in enumerate(commands[1:], 1):
        assert command.startswith("curl "), command
        if "/stream" in command:
            # a live stream never ends by itself: cut it after a moment, as a reader does with ^C
            command = command.replace("curl -sN", "curl -sN --max-time 3") + " || true"
        elif " -w " not in command:
            command += " -w '\\n%{http_code}\\n'"
        script += [f"echo '>>> {index}'", command]
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    answers = result.stdout.split(">>> ")[1:]
    assert len(answers) == len(commands) - 1
    for answer, command in zip(answers, commands[1:], strict=True):
        lines = answer.strip().splitlines()
        if "/stream" in command:
            assert any(line.startswith("data: ") for line in lines), answer
            continue
        assert re.fullmatch(r"2\d\d", lines[-1]), f"{command}\n{answer}"
