"""Named memory profiles over HTTP: the deployment's (read-only) and the tenant's own (PUT, DELETE)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Response

from om_api.auth import Caller, Tenant
from om_api.deps import DepsDep, ProfileKeyCheckDep
from om_api.json_body import JsonBodyRoute
from om_api.routes.threads import _ERRORS
from om_api.schemas import PROFILE_PATTERN, ProfileOut, ProfilesOut
from om_core.application.profile_admin import (
    ProfileView,
    delete_profile,
    describe_profile,
    list_profiles,
    put_profile,
)

router = APIRouter(prefix="/v1/profiles", tags=["profiles"], route_class=JsonBodyRoute)

ProfileName = Annotated[
    str, Path(min_length=1, max_length=64, pattern=PROFILE_PATTERN, description="a-z, 0-9, _ and -")
]


def _profile_json(view: ProfileView) -> dict[str, Any]:
    return {
        "name": view.name,
        "source": view.source,
        "scope": view.scope,
        "version": view.version,
        "options": view.options,
        "changes": [
            {"version": c.version, "at": c.at, "by": c.by, "options": c.options} for c in view.changes
        ],
    }


@router.get("", response_model=ProfilesOut, responses=_ERRORS, summary="every profile")
def get_profiles(deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return {"profiles": [_profile_json(v) for v in list_profiles(deps, tenant=tenant)]}


@router.get(
    "/{profile_name}", response_model=ProfileOut, responses=_ERRORS, summary="a profile and its changes"
)
def get_profile(profile_name: ProfileName, deps: DepsDep, tenant: Tenant) -> dict[str, Any]:
    return _profile_json(describe_profile(deps, tenant=tenant, name=profile_name))


@router.put("/{profile_name}", response_model=ProfileOut, responses=_ERRORS, summary="set a tenant profile")
def put_tenant_profile(
    profile_name: ProfileName,
    options: Annotated[dict[str, Any], Body(description="memory options, as in a profile file")],
    deps: DepsDep,
    tenant: Tenant,
    caller: Caller,
    check_keys: ProfileKeyCheckDep,
) -> dict[str, Any]:
    view = put_profile(
        deps, tenant=tenant, name=profile_name, options=options, by=caller, check_keys=check_keys
    )
    return _profile_json(view)


@router.delete("/{profile_name}", status_code=204, responses=_ERRORS, summary="delete a tenant profile")
def delete_tenant_profile(
    profile_name: ProfileName, deps: DepsDep, tenant: Tenant, caller: Caller
) -> Response:
    delete_profile(deps, tenant=tenant, name=profile_name, by=caller)
    return Response(status_code=204)
