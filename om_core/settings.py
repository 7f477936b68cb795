"""Process settings, read from ``OM_*`` environment variables (docs/operations.md), and the memory profile.

The profile (``OM_PROFILE``) is a YAML or JSON file holding the default memory configuration; it is read
and validated once, when the settings are built, so a bad profile stops the process at start-up with an
error naming the file. A thread's own configuration layers over it (``ServerSettings.memory_config``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from om_core.adapters.store import DEFAULT_MAX_OVERFLOW, DEFAULT_POOL_SIZE
from om_core.domain.config import ConfigError, MemoryConfig, merge_config_layers, parse_memory_config
from om_core.domain.placeholders import is_placeholder
from om_core.domain.profiles import split_profile_document

ENV_PREFIX = "OM_"
DATABASE_SCHEMES = frozenset({"sqlite", "postgresql", "postgresql+psycopg"})
BROKER_SCHEMES = frozenset({"memory", "redis", "rediss"})
# kombu's in-memory transport, for the in-process worker. With no host in the URL kombu warns ("No hostname
# was supplied") each time it connects.
EMBEDDED_BROKER_URL = "memory://localhost/"
_POSTGRES_URL = "postgresql+psycopg://user:password@host:5432/database"
_SECRET_FIELDS = frozenset({"api_keys", "flower_password"})
_URL_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")
# the key docker-compose.yml gives the API when OM_API_KEYS is not set: its start-up line names it as such
DEV_API_KEY = "dev-key"


def masked_url(url: str) -> str:
    """``url`` with its password (if any) shown as ``***``, for logs and start-up lines."""
    return _URL_PASSWORD.sub(r"\1***@", url)


class SettingsError(ValueError):
    """Invalid process settings; the message names each offending ``OM_*`` variable."""


class ProfileError(ValueError):
    """The memory profile file cannot be read or holds an invalid configuration."""

    def __init__(self, path: Path, detail: str, config_error: ConfigError | None = None) -> None:
        self.path = path
        self.config_error = config_error
        super().__init__(f"memory profile {path}: {detail}")


def read_profile(path: str | Path) -> dict[str, Any]:
    """The profile file's document (validated): one configuration, the default profile, or ``profiles:``
    naming several (``split_profile_document``)."""
    profile = Path(path)
    try:
        text = profile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ProfileError(profile, f"cannot be read ({error})") from error
    try:
        document = json.loads(text) if profile.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        kind = "JSON" if profile.suffix.lower() == ".json" else "YAML"
        raise ProfileError(profile, f"is not valid {kind}: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ProfileError(profile, f"must hold an object of memory options, not {type(document).__name__}")
    try:
        split_profile_document(document)
    except ConfigError as error:
        raise ProfileError(profile, str(error), error) from error
    return dict(document)


def load_profile(path: str | Path) -> MemoryConfig:
    """Read and validate a YAML or JSON memory profile; every error names the file. The default profile's
    configuration."""
    return parse_memory_config(split_profile_document(read_profile(path))[0])


def _parse_api_keys(value: object) -> object:
    if not isinstance(value, str):
        return value
    keys: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        key, separator, tenant = (piece.strip() for piece in entry.partition("="))
        if not separator or not key or not tenant:
            raise ValueError("expected comma-separated key=tenant pairs, e.g. key1=tenantA,key2=tenantB")
        if key in keys:
            raise ValueError("the same key is listed twice")
        if is_placeholder(key):
            raise ValueError(
                f"the key {key!r} is a placeholder from an example: set a real key "
                "(e.g. from `openssl rand -hex 24`) or use `om keys create`"
            )
        keys[key] = tenant
    return keys


def _parse_model_list(value: object) -> object:
    if not isinstance(value, str):
        return value
    models = [entry.strip() for entry in value.split(",") if entry.strip()]
    for model in models:
        provider, separator, name = model.partition("/")
        if not separator or not provider or not name:
            raise ValueError(
                f"{model!r}: expected comma-separated provider/model ids, e.g. openai/gpt-4o-mini"
            )
    return models


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_scheme(url: str, allowed: frozenset[str]) -> str:
    scheme, separator, _ = url.partition("://")
    if not separator or scheme.lower() not in allowed:
        raise ValueError(f"must be a URL with one of the schemes {', '.join(sorted(allowed))}")
    return url


def _database_url(url: str) -> str:
    scheme = url.partition("://")[0].lower()
    if scheme == "postgres" or (scheme.startswith("postgresql+") and scheme != "postgresql+psycopg"):
        raise ValueError(f"om runs Postgres on psycopg 3: use {_POSTGRES_URL}")
    _check_scheme(url, DATABASE_SCHEMES)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as error:
        raise ValueError(f"is not a valid database URL ({error}); e.g. {_POSTGRES_URL}") from None
    if parsed.drivername == "postgresql":
        # SQLAlchemy's driver for a bare postgresql:// is psycopg2, which om does not install
        return "postgresql+psycopg://" + url.partition("://")[2]
    return url


class ServerSettings(BaseSettings):
    # an empty variable is an unset one: compose's ${VAR:-} passes variables the operator left empty
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", env_ignore_empty=True)

    database_url: str = "sqlite:///./.om/om.sqlite3"
    broker_url: str = EMBEDDED_BROKER_URL
    api_keys: Annotated[dict[str, str], NoDecode, BeforeValidator(_parse_api_keys)] = Field(
        default_factory=dict, repr=False
    )
    auth: Literal["enabled", "disabled"] = "enabled"
    profile: Path | None = None
    max_message_bytes: int = Field(default=1_000_000, gt=0)
    max_request_bytes: int = Field(default=8_000_000, gt=0)
    sync_wait_seconds: float = Field(default=10.0, ge=0)
    # how long a lease on work in flight (a cycle, a proxied model call) lasts unless its process renews it:
    # how soon the work of a process that died is taken back (docs/operations.md, Work in flight)
    lease_seconds: float = Field(default=30.0, ge=3)
    # how long `om serve` and `om worker` wait at start for `om migrate` to bring the schema to their
    # revision (an orchestrator may start them before the migration ends); 0: refuse at once
    schema_wait_seconds: float = Field(default=0.0, ge=0)
    # record states a process keeps parsed between requests (om_core/application/state_cache.py)
    state_cache_size: int = Field(default=256, ge=0)
    # Postgres connections a process keeps, opened as needed (om_core/adapters/store/__init__.py)
    db_pool_size: int = Field(default=DEFAULT_POOL_SIZE, ge=1)
    db_max_overflow: int = Field(default=DEFAULT_MAX_OVERFLOW, ge=0)
    # requests per second per tenant, in each API process (0: no limit); burst 0 means two seconds' worth
    rate_limit: float = Field(default=0.0, ge=0)
    rate_limit_burst: int = Field(default=0, ge=0)
    # the OpenAI-compatible proxy: models it offers beside the profile's and om-local/chat, and whether a
    # request's X-OM-Provider-Key header is used as the provider's key instead of the server's own
    chat_models: Annotated[list[str], NoDecode, BeforeValidator(_parse_model_list)] = Field(
        default_factory=list
    )
    chat_forward_provider_key: bool = False
    flower_user: str | None = None
    flower_password: SecretStr | None = None
    # a server or worker on a SQLite file with a network broker is refused unless this says its workers
    # all run on this machine, on the same file
    allow_sqlite_with_broker: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65_535)
    # a line per request from uvicorn: off by default, as formatting and writing it cost each request more
    # than checking its key (requests are counted in /metrics either way)
    access_log: bool = False

    _profile_layer: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise SettingsError(_describe(error)) from None

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        return _database_url(value)

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, value: str) -> str:
        return _check_scheme(value, BROKER_SCHEMES)

    @model_validator(mode="after")
    def _consistent(self) -> ServerSettings:
        if self.auth == "disabled" and not _is_loopback(self.host):
            raise ValueError(f"OM_AUTH=disabled is only allowed on a loopback host; OM_HOST is {self.host!r}")
        if self.max_request_bytes < self.max_message_bytes:
            raise ValueError(
                f"OM_MAX_REQUEST_BYTES ({self.max_request_bytes}) must be at least "
                f"OM_MAX_MESSAGE_BYTES ({self.max_message_bytes})"
            )
        if (self.flower_user is None) != (self.flower_password is None):
            raise ValueError("OM_FLOWER_USER and OM_FLOWER_PASSWORD must be set together")
        if self.flower_password is not None and is_placeholder(self.flower_password.get_secret_value()):
            raise ValueError("OM_FLOWER_PASSWORD is a placeholder from an example: set a real password")
        if self.profile is not None:
            try:
                self._profile_layer = read_profile(self.profile)
            except ProfileError as error:
                raise ValueError(f"OM_PROFILE: {error}") from None
        return self

    @property
    def profile_document(self) -> dict[str, Any]:
        """The profile file as written (validated): every profile it names."""
        return dict(self._profile_layer)

    @property
    def profile_layer(self) -> dict[str, Any]:
        """The default profile as written (validated), to layer a thread's own overrides on."""
        return split_profile_document(self._profile_layer)[0]

    def with_default_profile(self, layer: Mapping[str, Any]) -> ServerSettings:
        """These settings with ``layer`` as the profile when ``OM_PROFILE`` names none (the embedded mode's
        keyless model); a named profile is kept as it is."""
        if self.profile is not None:
            return self
        parse_memory_config(layer)
        settings = self.model_copy()
        settings._profile_layer = dict(layer)
        return settings

    @property
    def auth_enabled(self) -> bool:
        return self.auth == "enabled"

    @property
    def uses_broker(self) -> bool:
        """Whether model work is published to a network broker (not run by an in-process worker)."""
        return not self.broker_url.startswith("memory://")

    def memory_config(self, *overrides: Mapping[str, Any] | None) -> MemoryConfig:
        """The profile's configuration (defaults without a profile), with ``overrides`` (e.g. a thread's
        own ``config``) layered on top. Raises ``ConfigError`` when an override is invalid."""
        return parse_memory_config(merge_config_layers(self.profile_layer, *overrides))


def _describe(error: ValidationError) -> str:
    lines = []
    for detail in error.errors():
        message = str(detail["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
        if not detail["loc"]:
            lines.append(message)
            continue
        name = str(detail["loc"][0])
        variable = ENV_PREFIX + name.upper()
        shown = "<hidden>" if name in _SECRET_FIELDS else masked_url(str(detail["input"]))
        lines.append(f"{variable}={shown}: {message}")
    return "invalid settings: " + "; ".join(lines)
