"""Request and response bodies of the HTTP API (snake_case resources; ``data-om-*`` parts keep Mastra's
camelCase). They are the OpenAPI document's schemas, so clients and schemathesis see the real contract."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from om_api.json_body import contains_nul
from om_core.domain.profiles import PROFILE_NAME_PATTERN

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@~+=-]{0,255}$"
PROFILE_PATTERN = f"^{PROFILE_NAME_PATTERN}$"
ID_RULE = "1–256 characters: ASCII letters, digits and . _ : @ ~ + = - (starting with a letter or digit)"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        # JSON allows \u0000 but no database text type stores it (Postgres refuses it in jsonb and text)
        if contains_nul(data):
            raise ValueError("strings must not contain the NUL character (\\u0000)")
        return data


class Part(BaseModel):
    """A data part framed as the AI SDK frames one in a UI message stream."""

    type: str = Field(examples=["data-om-status"])
    id: str
    data: dict[str, Any]


class Error(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    error: Error


class ThreadIn(_Body):
    resource_id: str | None = Field(default=None, max_length=256, pattern=ID_PATTERN)
    title: str | None = Field(default=None, max_length=1000)
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = Field(
        default=None,
        description="Memory options (Mastra names) overriding the thread's profile for this thread",
    )
    profile: str | None = Field(
        default=None,
        max_length=64,
        pattern=PROFILE_PATTERN,
        description="the named memory profile the thread runs under (default: `default`); changeable later "
        "only between two thread-scoped profiles",
    )


class Thread(BaseModel):
    thread_id: str
    resource_id: str | None
    title: str | None
    metadata: dict[str, Any]
    config: dict[str, Any]
    version: int
    profile: str = "default"
    updated_at: str | None = None
    models: dict[str, list[str]] | None = Field(
        default=None,
        description="the models the observer and the reflector may call, resolved from the profile and the "
        "thread's config (one per upTo tier); in the answers of GET and PUT, not in lists",
    )


class MessagesIn(_Body):
    resource_id: str | None = Field(default=None, max_length=256, pattern=ID_PATTERN)
    messages: list[dict[str, Any]] = Field(
        min_length=1,
        max_length=1000,
        description="OpenAI chat messages or AI SDK UI messages (parts: text, image, file, tool-invocation, "
        "reasoning, data-*)",
    )
    profile: str | None = Field(
        default=None,
        max_length=64,
        pattern=PROFILE_PATTERN,
        description="the profile a new thread runs under; for an existing thread, when given, its own",
    )


class AppendedOut(BaseModel):
    message_id: str
    seq: int
    tokens: int


class AppendOut(BaseModel):
    thread_id: str
    version: int
    appended: list[AppendedOut]
    duplicates: list[str]
    status: dict[str, Any]
    parts: list[Part]


class ContextOut(BaseModel):
    thread_id: str
    version: int
    system: list[str]
    continuation: str | None
    messages: list[dict[str, Any]]
    status: dict[str, Any]
    pending_tokens: int
    observation_tokens: int
    warnings: list[str]
    parts: list[Part]


class OpenAIContextOut(BaseModel):
    thread_id: str
    version: int
    messages: list[dict[str, Any]]
    status: dict[str, Any]
    warnings: list[str]
    parts: list[Part]


class TurnOut(ContextOut):
    """A turn: what the append stored, then the context to send (``POST …/turn``)."""

    appended: list[AppendedOut]
    duplicates: list[str]


class OpenAITurnOut(OpenAIContextOut):
    appended: list[AppendedOut]
    duplicates: list[str]


class EventOut(BaseModel):
    position: int
    version: int
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    time: str


class EventsOut(BaseModel):
    thread_id: str
    events: list[EventOut]
    next_after: int | None = Field(description="pass as ?after= for the next page; null at the end")


class ObservationsOut(BaseModel):
    thread_id: str
    version: int
    generation: int
    observation_tokens: int
    log: list[dict[str, Any]]
    buffered_chunks: list[dict[str, Any]]
    buffered_reflection: dict[str, Any] | None
    generations: list[dict[str, Any]]
    in_flight: dict[str, Any]
    current_task: str | None
    suggested_response: str | None
    stats: dict[str, Any]


class ProfileChangeOut(BaseModel):
    version: int
    at: str
    by: str
    options: dict[str, Any] | None = Field(description="what the change set; null: the profile was deleted")


class ProfileOut(BaseModel):
    name: str
    source: Literal["deployment", "tenant"] = Field(
        description="deployment: the profile file's, read-only over HTTP; tenant: the caller's own"
    )
    scope: Literal["thread", "resource"]
    version: int = Field(description="the tenant profile's stream version (0 for a deployment profile)")
    options: dict[str, Any]
    changes: list[ProfileChangeOut]


class ProfilesOut(BaseModel):
    profiles: list[ProfileOut]


class CycleIn(_Body):
    wait: bool = True


class CycleOut(BaseModel):
    thread_id: str
    cycle_id: str | None
    outcome: Literal["completed", "failed", "stale", "duplicate", "queued"] | None
    version: int
    status: dict[str, Any]
    parts: list[Part]


class ThreadsOut(BaseModel):
    threads: list[Thread]


class RecallOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    mode: str
