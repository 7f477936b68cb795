"""Named memory profiles: several memory configurations in one deployment, one per kind of agent.

A deployment's profile file holds either one configuration (the ``default`` profile) or ``profiles:``, a
mapping of names to configurations. A tenant keeps its own profiles as event streams (``ProfileSet``,
``ProfileDeleted``); their fold, ``fold_profile``, is here. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from om_core.domain.config import ConfigError, MemoryConfig, merge_config_layers, parse_memory_config
from om_core.domain.events import DomainEvent, ProfileDeleted, ProfileSet

DEFAULT_PROFILE = "default"
PROFILE_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,63}"


def valid_profile_name(name: str) -> bool:
    return re.fullmatch(PROFILE_NAME_PATTERN, name) is not None


def split_profile_document(document: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A profile file's default layer and its other named layers, each validated.

    A file without ``profiles:`` is the default profile itself. With it, every option lives inside a
    profile: a top-level option beside it would be ambiguous (the default's, or everyone's?). Each named
    profile stands on the built-in defaults alone, not on ``default``, as each Mastra agent has its own
    ``Memory``. Raises ConfigError naming the profile and the option.
    """
    if "profiles" not in document:
        parse_memory_config(document)
        return dict(document), {}
    stray = sorted(k for k in document if k != "profiles")
    if stray:
        raise ConfigError(
            stray[0],
            document[stray[0]],
            "beside `profiles`, every option goes inside a profile (e.g. profiles.default)",
        )
    profiles = document["profiles"]
    if not isinstance(profiles, Mapping):
        raise ConfigError("profiles", profiles, "must map profile names to memory configurations")
    named: dict[str, dict[str, Any]] = {}
    for name, layer in profiles.items():
        if not isinstance(name, str) or not valid_profile_name(name):
            raise ConfigError(f"profiles.{name}", "…", f"a profile name must match {PROFILE_NAME_PATTERN}")
        if layer is None:
            layer = {}
        if not isinstance(layer, Mapping):
            raise ConfigError(f"profiles.{name}", layer, "must be an object of memory options")
        try:
            parse_memory_config(layer)
        except ConfigError as error:
            raise ConfigError.of([p.under(f"profiles.{name}") for p in error.problems]) from None
        named[name] = dict(layer)
    return named.pop(DEFAULT_PROFILE, {}), named


def check_tenant_profile(options: Mapping[str, Any]) -> MemoryConfig:
    """A tenant's profile, validated as a profile file is, less what only the deployment may set.

    A tenant choosing where the service sends requests (webhook URLs, a model server's address) could
    point the service, and with ``apiBase`` the deployment's API keys, at any address it reaches.
    """
    if "profiles" in options:
        raise ConfigError("profiles", "…", "a tenant profile is one configuration: PUT each name on its own")
    if "webhooks" in options:
        raise ConfigError("webhooks", "…", "is set by the deployment's profile file, not by a tenant")
    config = parse_memory_config(options)
    for role, section in merge_config_layers(options).items():
        settings = section.get("modelSettings") if isinstance(section, dict) else None
        if isinstance(settings, dict) and "apiBase" in settings:
            raise ConfigError(
                f"{role}.modelSettings.apiBase",
                "…",
                "is set by the deployment's profile file, not by a tenant",
            )
    return config


@dataclass(frozen=True)
class ProfileChange:
    """One recorded change of a tenant profile: who made it, when, and what it set (None: deleted)."""

    version: int
    at: str
    by: str
    options: dict[str, Any] | None


@dataclass
class ProfileState:
    """A tenant profile folded from its stream: its options now (None: it does not exist) and every change."""

    name: str
    version: int = 0
    options: dict[str, Any] | None = None
    changes: list[ProfileChange] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.options is not None


def fold_profile(name: str, events: Iterable[DomainEvent]) -> ProfileState:
    state = ProfileState(name=name)
    for event in events:
        state.version += 1
        if isinstance(event, ProfileSet):
            state.options = dict(event.options)
            state.changes.append(ProfileChange(state.version, event.at, event.by, dict(event.options)))
        elif isinstance(event, ProfileDeleted):
            state.options = None
            state.changes.append(ProfileChange(state.version, event.at, event.by, None))
        else:
            raise ValueError(f"a profile stream holds no {event.event_type} event")
    return state
