"""Without an integration's extra installed, om still runs, and the integration says how to install it: the
API answers 501 on /mcp, ``om mcp`` prints one line, an adapter fails to import with the install line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from om_api.app import create_app
from om_core.bootstrap import build_inline
from om_core.settings import ServerSettings
from testing.processes import OM

HIDE = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n"


def test_the_api_answers_501_on_mcp_without_the_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the SDK's modules this process already imported (another test's) are hidden with it
    for name in ["mcp", *(n for n in sys.modules if n.startswith("mcp."))]:
        monkeypatch.setitem(sys.modules, name, None)
    for loaded in [name for name in sys.modules if name.startswith("om_mcp.") and name != "om_mcp.mount"]:
        monkeypatch.delitem(sys.modules, loaded)
    url = f"sqlite:///{tmp_path / 'om.sqlite3'}"
    deps, dispatcher = build_inline(database_url=url, profile={"model": "om-local/extractive"}, migrate=True)
    try:
        app = create_app(ServerSettings(database_url=url, api_keys="key=alpha"), deps)
        with TestClient(app) as client:
            for method in ("GET", "POST", "DELETE"):
                answer = client.request(method, "/mcp", headers={"Authorization": "Bearer key"})
                assert answer.status_code == 501
                error = answer.json()["error"]
                assert error["code"] == "mcp_not_installed" and "pip install 'om[mcp]'" in error["message"]
            assert client.get("/healthz").status_code == 200
    finally:
        dispatcher.close()


def test_om_mcp_without_the_sdk_is_one_line(tmp_path: Path) -> None:
    # a stand-in package that fails as an absent one does, found before the installed SDK
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    result = subprocess.run(
        [*OM, "mcp"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "error: om mcp needs the MCP SDK: pip install 'om[mcp]'\n"


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("om_integrations.openai_agents", ["agents"], "openai-agents"),
        ("om_integrations.langchain", ["langchain", "langchain.agents"], "langchain"),
    ],
)
def test_an_adapter_without_its_framework_names_its_extra(module: str, hidden: list[str], extra: str) -> None:
    code = HIDE.format(names=hidden) + f"import {module}\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert f"pip install 'om[{extra}]'" in result.stderr.strip().splitlines()[-1]
