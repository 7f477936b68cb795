"""Use cases that write what clients send: configure a thread, append messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from om_core.application.configuration import counter_for, profile_scope, record_config
from om_core.application.decisions import plan_decisions
from om_core.application.deps import Deps
from om_core.application.ports import DuplicateMessageError, MessageConflictError
from om_core.application.profile_admin import ProfileConflictError
from om_core.application.profiles import check_profile_name, profile_layer
from om_core.application.repository import load_state
from om_core.application.streams import place_thread, thread_stream_id
from om_core.application.unit_of_work import Plan, commit, retry_on_conflict
from om_core.domain import thresholds
from om_core.domain.config import ConfigError, merge_config_layers, parse_memory_config
from om_core.domain.dates import temporal_gap_marker
from om_core.domain.events import DomainEvent, MessageAppended, TemporalMarkerInserted, ThreadConfigured
from om_core.domain.message_input import (
    MessageValidationError,
    content_hash,
    format_timestamp,
    message_text,
    normalize_message,
)
from om_core.domain.messages import Message
from om_core.domain.parts import needs_prior_state
from om_core.domain.profiles import DEFAULT_PROFILE
from om_core.domain.state import RecordState
from om_core.domain.timeutil import format_time, parse_time
from om_core.domain.tokens import MAX_MESSAGE_TOKENS

_UNTIMED = format_timestamp(datetime(1970, 1, 1, tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class AppendedMessage:
    message_id: str
    seq: int
    tokens: int


@dataclass(frozen=True)
class AppendOutcome:
    stream_id: str
    version: int
    appended: list[AppendedMessage]
    duplicates: list[str]
    events: list[DomainEvent] = field(default_factory=list)
    state: RecordState | None = None
    # (index, state just before events[index]): the first event whose description needs what came before
    prior: tuple[int, RecordState] | None = None


def configure_thread(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    resource_id: str | None = None,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    profile: str | None = None,
    check_models: Callable[[Mapping[str, Any], Mapping[str, Any]], None] | None = None,
) -> RecordState:
    """Create a thread or change its title, metadata, configuration overrides or profile.

    The overrides are validated against the thread's profile before anything is stored. A thread changes
    profile only between two thread-scoped ones: in resource scope its record is the resource's under
    that profile, and a thread's lineage cannot move (ProfileConflictError). ``check_models`` refuses
    overrides naming a model the server holds no key for (``check_thread_models``).
    """
    wanted = check_profile_name(deps, tenant, profile)
    stream_id = thread_stream_id(tenant, thread_id)

    def attempt() -> RecordState:
        state = load_state(deps.records, deps.store, stream_id, deps.states)
        name = wanted if profile is not None else state.profile
        if state.version and name != state.profile:
            _check_profile_change(deps, tenant, thread_id, state.profile, name)
        if config is not None:
            layer = profile_layer(deps, tenant, name)
            _check_thread_overrides(layer, config)
            if check_models is not None:
                check_models(layer, config)
        plan = Plan(state)
        plan.add(
            ThreadConfigured(
                thread_id=thread_id,
                resource_id=resource_id,
                title=title,
                metadata=dict(metadata) if metadata is not None else None,
                config=dict(config) if config is not None else None,
                # moving back to the default names it: None would mean unchanged
                profile=(name or DEFAULT_PROFILE) if name != state.profile else None,
                at=format_time(deps.clock()),
            )
        )
        commit(deps, plan)
        return plan.state

    return retry_on_conflict(attempt)


def append_messages(
    deps: Deps,
    *,
    tenant: str,
    thread_id: str,
    messages: Sequence[Mapping[str, Any]],
    resource_id: str | None = None,
    caller_model: str | None = None,
    profile: str | None = None,
) -> AppendOutcome:
    """Append messages to a thread: count their tokens once, and let the policy react in the same commit.

    ``profile`` names the profile a new thread runs under; for an existing thread it must be its own.

    Images and files are counted with the heuristics of the provider that will read them: the caller's
    model when it says (``caller_model``), else the message's own model, else the thread's last assistant
    model; OpenAI's when none is known (docs/semantics.md, Counting tokens).

    Every message is validated before anything is stored, so a bad one rejects the whole request.
    Message ids are idempotency keys: a re-sent message with the same content is reported as a duplicate;
    different content under a known id is a MessageConflictError.
    """
    if not messages:
        raise MessageValidationError("messages", "at least one message is required")
    now = deps.clock()
    normalized = [
        normalize_message(
            raw, now=now, max_bytes=deps.max_message_bytes, thread_id=thread_id, path_prefix=f"messages[{i}]"
        )
        for i, raw in enumerate(messages)
    ]
    client_timed = [any(k in raw for k in ("createdAt", "created_at")) for raw in messages]
    batch = _dedupe_batch(normalized, client_timed)

    def attempt(careful: bool, trust_cache: bool) -> AppendOutcome:
        # the first try starts from the state this process last saw, without asking the store whether it
        # is current: the commit's compare-and-set answers that, and a lost one places the thread and
        # reads the record again
        placement = place_thread(
            deps, tenant, thread_id, resource_id, profile=profile, trust_cache=trust_cache
        )
        stream_id, name, layer = placement.stream_id, placement.profile, placement.layer
        shared_record = stream_id != thread_stream_id(tenant, thread_id)
        if shared_record and deps.store.stream_version(thread_stream_id(tenant, thread_id)) == 0:
            # resource scope: the thread itself is still recorded on its own stream, with its resource
            configure_thread(deps, tenant=tenant, thread_id=thread_id, resource_id=resource_id, profile=name)
        # the held state is lent: the plan below copies it when it adds the first event
        held = deps.states.latest(stream_id) if trust_cache else None
        state = held if held is not None else load_state(deps.records, deps.store, stream_id, deps.states)
        # the layer, not the state: a thread created by this very plan has no profile in its state yet
        config = record_config(layer, state)
        counter = counter_for(config)
        stored = deps.messages.find_messages(stream_id, [m.id for m, _, _ in batch]) if careful else {}
        duplicates: list[str] = []
        fresh: list[tuple[Message, dict[str, Any], str]] = []
        for message, stored_form, digest in batch:
            known = stored.get(message.id)
            if known is None:
                fresh.append((message, stored_form, digest))
            elif known.content_hash == digest:
                duplicates.append(message.id)
            else:
                raise MessageConflictError(stream_id, message.id)
        plan = Plan(state, capture_before=needs_prior_state, borrowed=held is not None)
        if state.thread_id is None and not shared_record:
            plan.add(
                ThreadConfigured(
                    thread_id=thread_id, resource_id=resource_id, profile=name, at=format_time(now)
                )
            )
        appended: list[AppendedMessage] = []
        for message, stored_form, digest in fresh:
            if config.temporal_markers and message.role == "user":
                _add_gap_marker(plan, message, counter.count_text)
            # images and files are priced by the provider the message will be sent to: the caller's model,
            # the message's, the thread's last assistant model, else the provider the profile observes with
            reader = (
                caller_model
                or message.model
                or plan.state.last_assistant_model
                or thresholds.resolve_model(config, "observer", 0)
            )
            tokens = counter_for(config, reader).count_message(message)
            if tokens > MAX_MESSAGE_TOKENS:
                index = next(i for i, (m, _) in enumerate(normalized) if m.id == message.id)
                raise MessageValidationError(
                    f"messages[{index}]",
                    f"counts {tokens:,} tokens (its attachments' sizes or estimates); "
                    f"a message counts at most {MAX_MESSAGE_TOKENS:,}",
                )
            seq = plan.state.next_seq
            plan.add(
                MessageAppended(
                    seq=seq,
                    message_id=message.id,
                    thread_id=thread_id,
                    resource_id=resource_id or state.resource_id,
                    role=message.role,
                    created_at=format_time(message.created_at),
                    model=message.model,
                    tokens=tokens,
                    content_hash=digest,
                    message=stored_form,
                    text=message_text(message),
                )
            )
            appended.append(AppendedMessage(message_id=message.id, seq=seq, tokens=tokens))
        if appended:
            # an assistant message closes the turn: that is when bufferOnIdle buffers
            turn_ended = fresh[-1][0].role == "assistant"
            plan_decisions(plan, config, now, mode="idle" if turn_ended else "append")
        version = commit(deps, plan)
        return AppendOutcome(
            stream_id=stream_id,
            version=version,
            appended=appended,
            duplicates=duplicates,
            events=plan.events,
            state=plan.state,
            prior=plan.prior,
        )

    tries = 0

    def optimistic() -> AppendOutcome:
        nonlocal tries
        tries += 1
        # most appends are new messages: let the store's key catch repeats instead of reading ids first
        try:
            return attempt(careful=False, trust_cache=tries == 1)
        except DuplicateMessageError:
            return attempt(careful=True, trust_cache=False)

    return retry_on_conflict(optimistic)


def idempotency_hash(stored: Mapping[str, Any], *, client_timed: bool) -> str:
    """What makes two sends of one message id "the same message", from the message's stored form.

    A message sent without a time is stamped with the server's clock on arrival; that stamp is not part
    of what the client said, so a re-send of it must still count as a duplicate.
    """
    return content_hash(stored if client_timed else {**stored, "createdAt": _UNTIMED})


def _check_profile_change(
    deps: Deps, tenant: str, thread_id: str, current: str | None, wanted: str | None
) -> None:
    scopes = (
        profile_scope(profile_layer(deps, tenant, current)),
        profile_scope(profile_layer(deps, tenant, wanted)),
    )
    if scopes != ("thread", "thread"):
        raise ProfileConflictError(
            wanted or "default",
            f"thread {thread_id!r} runs under profile {current or 'default'!r} ({scopes[0]} scope); "
            f"moving it "
            f"to {wanted or 'default'!r} ({scopes[1]} scope) would move its record to another stream, "
            "and a thread's lineage cannot move: use a new thread",
            [thread_id],
        )


def _check_thread_overrides(profile: Mapping[str, Any], config: Mapping[str, Any]) -> None:
    """A thread's overrides are validated on top of its profile before anything is stored."""
    if "scope" in config:
        raise ConfigError("scope", config["scope"], "is set by the server profile, not per thread")
    if "webhooks" in config:
        # a client choosing where the service sends requests could point it at any address it can reach
        raise ConfigError("webhooks", "…", "is set by the server profile, not per thread")
    for role, section in merge_config_layers(config).items():
        settings = section.get("modelSettings") if isinstance(section, dict) else None
        if isinstance(settings, dict) and "apiBase" in settings:
            # as with webhooks: the calls would take the server's API key to an address the client chose
            raise ConfigError(
                f"{role}.modelSettings.apiBase", "…", "is set by the server profile, not per thread"
            )
    if profile_scope(profile) == "resource" and config:
        raise ConfigError(
            "config",
            dict(config),
            "per-thread overrides do not apply in resource scope: the record belongs to the resource",
        )
    parse_memory_config(merge_config_layers(profile, config))


def _dedupe_batch(
    messages: list[tuple[Message, dict[str, Any]]], client_timed: list[bool]
) -> list[tuple[Message, dict[str, Any], str]]:
    seen: dict[str, str] = {}
    batch: list[tuple[Message, dict[str, Any], str]] = []
    for index, (message, stored) in enumerate(messages):
        digest = idempotency_hash(stored, client_timed=client_timed[index])
        if message.id in seen:
            if seen[message.id] != digest:
                raise MessageValidationError(
                    f"messages[{index}].id", f"id {message.id!r} appears twice with different content"
                )
            continue
        seen[message.id] = digest
        batch.append((message, stored, digest))
    return batch


def _add_gap_marker(plan: Plan, message: Message, count_text: Any) -> None:
    previous = plan.state.last_message_at
    if previous is None:
        return
    text = temporal_gap_marker(parse_time(previous), message.created_at)
    if text is None:
        return
    marker_at = message.created_at
    plan.add(
        TemporalMarkerInserted(
            seq=plan.state.next_seq,
            marker_id=f"__temporal_gap_{message.id}",
            thread_id=message.thread_id,
            before_message_id=message.id,
            text=text,
            tokens=int(count_text(text)),
            created_at=format_time(marker_at),
        )
    )
