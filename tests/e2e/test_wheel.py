"""om from its wheel, as a user or the Docker image installs it: built from what the Dockerfile copies,
installed into a fresh virtualenv outside the checkout, and run from a directory that is not the checkout.

The virtualenv borrows the dependencies already installed beside the test's interpreter (a ``.pth`` line),
so the test needs no index; om itself, and its migrations, come only from the wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from alembic.script import ScriptDirectory

from om_core.adapters.store.migrations import alembic_config, current_revision
from testing.postgres import scratch_postgres
from testing.processes import om_server

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Install:
    wheel: Path
    venv: Path
    cwd: Path

    @property
    def om(self) -> str:
        return str(self.venv / "bin" / "om")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OM_") and k != "PYTHONPATH"}
        return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}

    def run(self, *argv: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _stages() -> list[list[list[str]]]:
    """The Dockerfile's stages, each a list of its instructions split into words (no line continuations)."""
    stages: list[list[list[str]]] = []
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            stages.append([])
        stages[-1].append(words)
    return stages


def _build_context(into: Path) -> Path:
    """What the build stage COPYs, laid out as it lays it out in its WORKDIR."""
    build, *_ = _stages()
    into.mkdir()
    for words in build:
        if words[0] != "COPY":
            continue
        *sources, destination = words[1:]
        for source in sources:
            matches = sorted(ROOT.glob(source))
            assert matches or source.endswith("*"), (
                f"the Dockerfile copies {source}, which is not in the repo"
            )
            for match in matches:
                assert destination in ("./", ".", source), f"unexpected COPY form: {' '.join(words)}"
                target = into / match.relative_to(ROOT)
                if match.is_dir():
                    shutil.copytree(match, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(match, target)
    return into


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Install:
    base = tmp_path_factory.mktemp("wheel")
    source = _build_context(base / "src")
    dist = base / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(dist), str(source)], check=True, timeout=180
    )
    (wheel,) = dist.glob("om-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], check=True
    )
    # Only now: pip would otherwise see (and offer to replace) the checkout's editable om through this line.
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site_packages) / "_om_test_dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    cwd = base / "elsewhere"
    cwd.mkdir()
    return Install(wheel=wheel, venv=venv, cwd=cwd)


def test_the_wheel_carries_every_module_and_the_migrations(installed: Install) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    for package in ("om_core", "om_api", "om_workers", "om_mcp", "om_integrations"):
        for module in (ROOT / package).rglob("*.py"):
            assert module.relative_to(ROOT).as_posix() in names
    migrations = {p.relative_to(ROOT / "alembic").as_posix() for p in (ROOT / "alembic").rglob("*.*")}
    migrations = {m for m in migrations if "__pycache__" not in m}
    assert {"env.py", "script.py.mako", "versions/0001_initial.py"} <= migrations
    assert {f"om_migrations/{m}" for m in migrations} <= names
    # the Alembic library owns the import name "alembic"
    assert not any(name.startswith("alembic/") for name in names)
    # what supports the tests and benchmarks stays in the checkout
    assert not any(name.startswith(("testing/", "tests/", "bench/")) for name in names)


# What every install pulls in. An integration's packages are an extra's (mcp, openai-agents, langchain),
# never these: a new name here is a decision for the core install, to be made on purpose.
CORE_REQUIREMENTS = {
    "alembic",
    "celery",
    "fastapi",
    # the API docs' Swagger UI and ReDoc assets, served by the API itself (no CDN): a decision of issue 21
    "fastapi-offline",
    "flower",
    "httpx",
    "jsonschema",
    "kombu",
    "litellm",
    "orjson",
    "prometheus-client",
    "psycopg",
    "pydantic",
    "pydantic-settings",
    "pyyaml",
    "redis",
    "rich",
    "sqlalchemy",
    "tiktoken",
    "typer",
    "uvicorn",
}
INTEGRATION_EXTRAS = {"mcp": {"mcp"}, "openai-agents": {"openai-agents"}, "langchain": {"langchain"}}


def _requirement_name(line: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", line, maxsplit=1)[0].lower().replace("_", "-")


def test_the_core_requirements_are_unchanged_and_the_integrations_are_extras(installed: Install) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        lines = [
            line.removeprefix("Requires-Dist:").strip()
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    core = {_requirement_name(line) for line in lines if "extra ==" not in line}
    assert core == CORE_REQUIREMENTS
    for extra, names in INTEGRATION_EXTRAS.items():
        assert {_requirement_name(line) for line in lines if f'extra == "{extra}"' in line} == names


def test_om_and_its_migrations_come_from_the_virtualenv_not_the_checkout(installed: Install) -> None:
    code = (
        "import om_core\n"
        "from om_core.adapters.store.migrations import script_location\n"
        "print(om_core.__file__)\n"
        "print(script_location())\n"
    )
    result = installed.run(str(installed.venv / "bin" / "python"), "-c", code)
    assert result.returncode == 0, result.stderr
    package, migrations = map(Path, result.stdout.split())
    assert package.is_relative_to(installed.venv)
    assert migrations.is_relative_to(installed.venv) and migrations.name == "om_migrations"


def test_demo_runs(installed: Install) -> None:
    result = installed.run(installed.om, "demo", "--turns", "40", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["turns"] == 40


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    with scratch_postgres(prefix="om_test_wheel", migrate=False) as url:
        yield url


def test_migrate_upgrades_an_empty_postgres_database_to_head(
    installed: Install, empty_postgres_url: str
) -> None:
    result = installed.run(installed.om, "migrate", OM_DATABASE_URL=empty_postgres_url)
    assert result.returncode == 0, result.stderr
    head = ScriptDirectory.from_config(alembic_config(empty_postgres_url)).get_current_head()
    assert head is not None
    assert current_revision(empty_postgres_url) == head


def test_serve_embedded_answers_healthz_and_serves_its_docs(installed: Install) -> None:
    profile = installed.cwd / "profile.json"
    profile.write_text(json.dumps({"model": "om-local/extractive"}))
    env = installed.env(
        OM_PROFILE=str(profile), OM_DATABASE_URL=f"sqlite:///{installed.cwd / 'serve.sqlite3'}"
    )
    # om_server fails unless /healthz answers and the server stops cleanly on SIGTERM
    with om_server(
        ["serve", "--embedded"], env, installed.cwd / "serve.log", om=[installed.om], cwd=installed.cwd
    ) as base:
        assert httpx.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        # the API docs' scripts and styles come from the server itself (fastapi-offline), not a CDN
        for page in ("/docs", "/redoc"):
            html = httpx.get(f"{base}{page}", timeout=10).text
            assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
            assert assets and all(a.startswith("/") for a in assets), html
            for asset in assets:
                answer = httpx.get(f"{base}{asset}", timeout=10)
                assert answer.status_code == 200 and len(answer.content) > 10_000, asset


def test_the_image_installs_the_wheel_and_copies_nothing_beside_it() -> None:
    _, runtime = _stages()
    copies = [words for words in runtime if words[0] == "COPY"]
    assert copies
    assert all(words[1] == "--from=build" and words[2:] == ["/wheels", "/wheels"] for words in copies), copies


def test_the_installed_om_lists_no_benchmarks_and_says_why_in_one_line(installed: Install) -> None:
    """The benchmarks live in bench/ of a checkout, not in the package."""
    listed = installed.run(installed.om, "--help", COLUMNS="200")
    assert listed.returncode == 0 and " bench " not in listed.stdout
    called = installed.run(installed.om, "bench", "turn", "--turns", "3")
    assert called.returncode == 2, called.stderr
    (line,) = called.stderr.splitlines()
    assert line.startswith("error: om bench runs the benchmarks in bench/ of a checkout of om")
