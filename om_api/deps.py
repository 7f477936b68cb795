"""FastAPI dependencies shared by the routes.

They are ``async`` although they only read the app's state: FastAPI runs a plain ``def`` dependency on its
thread pool, a hop per dependency per request that costs more than the lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, Request

from om_core.application.deps import Deps
from om_core.settings import ServerSettings


async def get_deps(request: Request) -> Deps:
    deps: Deps = request.app.state.deps
    return deps


async def get_settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


ModelCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], None]


async def get_model_check(request: Request) -> ModelCheck:
    """Refuses (ConfigError) a thread's overrides that name a model whose API key is not set (app state)."""
    check: ModelCheck = request.app.state.check_models
    return check


ProfileKeyCheck = Callable[[Mapping[str, Any]], None]


async def get_profile_key_check(request: Request) -> ProfileKeyCheck:
    """Refuses (ConfigError) a tenant profile naming a model whose API key is not set (app state)."""
    check: ProfileKeyCheck = request.app.state.check_profile_keys
    return check


DepsDep = Annotated[Deps, Depends(get_deps)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
ModelCheckDep = Annotated[ModelCheck, Depends(get_model_check)]
ProfileKeyCheckDep = Annotated[ProfileKeyCheck, Depends(get_profile_key_check)]
