"""FastAPI dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, Request

from om_core.application.deps import Deps
from om_core.settings import ServerSettings


def get_deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


def get_settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


ModelCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], None]


def get_model_check(request: Request) -> ModelCheck:
    """Refuses (ConfigError) a thread's overrides that name a model whose API key is not set (app state)."""
    check: ModelCheck = request.app.state.check_models
    return check


DepsDep = Annotated[Deps, Depends(get_deps)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
ModelCheckDep = Annotated[ModelCheck, Depends(get_model_check)]
