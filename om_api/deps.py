"""FastAPI dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from om_core.application.deps import Deps
from om_core.settings import ServerSettings


def get_deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def get_settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


DepsDep = Annotated[Deps, Depends(get_deps)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
