"""The OpenAI-compatible memory proxy's turn (``POST /v1/chat/completions``, docs/api.md).

An app sends what it would send its model. om stores the messages it does not hold yet, builds the context
(the app's own system messages first, then om's memory and the unobserved window), calls the model, stores
the reply, and hands the model's answer back.

A request is answered once, however often it is sent (a client's automatic retry after a timeout or a lost
response): with an ``Idempotency-Key``, a repeat answers the reply stored under that key; without one, a
request whose messages are all stored and already answered by a stored reply is a retry, and gets that
reply. Neither calls the model. A repeat that arrives while the first is still with the model waits for it
(the first holds a lease on the answer). ``regenerate`` asks for a new answer deliberately.

Chat messages carry no ids, so om places the sent history against the thread's stored tail by role and
content: an app that resends the whole conversation each call and one that sends only the new message
both store each message once. A new message's id is derived from the thread, the id of the message before
it and its content, so a message sent again in the same place gets the same id and is a duplicate.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from om_core.application.append import AppendOutcome, append_messages
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.leases import dead_on_this_host, held_lease
from om_core.application.ports import ChatCall, ChatModels
from om_core.application.repository import load_state
from om_core.application.streams import record_stream_for
from om_core.domain.context import ContextWindow
from om_core.domain.envelope import JSONDict, StoredMessage
from om_core.domain.message_input import (
    MessageValidationError,
    canonical_json,
    normalize_message,
)

LOCAL_CHAT_MODEL = "om-local/chat"
INSTRUCTION_ROLES = frozenset({"system", "developer"})
CHAT_ID_PREFIX = "chat-"
# replies om stored that the app may never have received (a lost response retried, a regenerated answer):
# a resent history may end this many assistant messages before the stored end
TRAILING_REPLIES = 4
_SIGNATURE_CLOCK = datetime(1970, 1, 1, tzinfo=UTC)
# how often a repeat looks whether the first request's answer is stored yet
_REPEAT_POLL_S = 0.05

Render = Callable[[ContextWindow], list[JSONDict]]


class ChatRequestError(ValueError):
    """A proxied request refused before any model is called, with OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


@dataclass(frozen=True)
class ChatProxy:
    """What the proxy runs with: the chat models, the models it offers, and whether a request may bring
    its provider's key (``OM_CHAT_FORWARD_PROVIDER_KEY``) instead of the server's own."""

    models: ChatModels
    offered: tuple[str, ...]
    forward_provider_key: bool = False


@dataclass(frozen=True)
class ChatTurn:
    tenant: str
    thread_id: str
    model: str
    messages: Sequence[Mapping[str, Any]]
    # the app's other request parameters, passed to the model as they are
    options: Mapping[str, Any] = field(default_factory=dict)
    resource_id: str | None = None
    provider_key: str | None = None
    # the named profile the thread runs under (X-OM-Profile); a new thread is created under it
    profile: str | None = None
    # a repeat of a request with the same key answers the reply stored for it (Idempotency-Key)
    idempotency_key: str | None = None
    # a new answer even when the sent messages are answered already (X-OM-Regenerate)
    regenerate: bool = False


@dataclass(frozen=True)
class TurnStatus:
    """om's view of the thread, for the response headers."""

    version: int
    pending_tokens: int
    observation_tokens: int
    generation: int
    # how many of the sent messages this turn stored (the rest om held already)
    appended: int
    # the answer is a stored reply, given again without calling the model (a retried request)
    replayed: bool = False


@dataclass(frozen=True)
class ChatAnswer:
    body: JSONDict
    # the thread once the reply is stored
    status: TurnStatus


@dataclass(frozen=True)
class ChatStreamAnswer:
    # the model's chunks; once the last is out, the reply is stored
    chunks: Iterator[JSONDict]
    # the thread as the model saw it (the reply is stored after the headers are sent)
    status: TurnStatus


@dataclass(frozen=True)
class _Prepared:
    call: ChatCall
    stream_id: str
    # the id the reply's id is derived from: the last message the app sent
    last_id: str
    status: TurnStatus
    # the lease the model call is made under, so that a repeat waits for it (None: regenerate)
    lease_key: str | None
    # the reply's id when the request names an idempotency key
    keyed_reply_id: str | None


@dataclass(frozen=True)
class _Replay:
    """A stored reply that answers the request: it is sent again, the model is not called."""

    reply: StoredMessage
    status: TurnStatus


# --- placing the sent history ---------------------------------------------------------------------------


def _signature_of_json(stored: Mapping[str, Any]) -> str:
    parts = [{k: v for k, v in part.items() if k != "createdAt"} for part in stored.get("parts", [])]
    return canonical_json({"role": stored.get("role"), "parts": parts})


def signature(raw: Mapping[str, Any], *, thread_id: str | None = None, max_bytes: int = 1_000_000) -> str:
    """What a message says, as the history is matched on: its role and parts, not its id or times.

    Raises MessageValidationError for a message om would not accept.
    """
    _, stored = normalize_message(raw, now=_SIGNATURE_CLOCK, max_bytes=max_bytes, thread_id=thread_id)
    return _signature_of_json(stored)


def derive_message_id(thread_id: str, previous_id: str, message_signature: str) -> str:
    """The id of a message sent without one: stable for the same content after the same message."""
    digest = hashlib.sha256(f"{thread_id}\n{previous_id}\n{message_signature}".encode()).hexdigest()
    return CHAT_ID_PREFIX + digest[:32]


def known_prefix(
    sent: Sequence[tuple[str, str]], stored: Sequence[tuple[str, str]], *, whole_thread: bool
) -> tuple[int, int]:
    """How many of the sent messages, from the first, the thread holds already, and the index in
    ``stored`` right after that run. Both are ``(role, signature)`` lists; ``stored`` is the thread's tail
    (``whole_thread``: all of it).

    The run ends at the stored end (the app resent the history and added to it), or before replies the app
    does not show (it lost the answer and retried, or asked for another answer) when it is at least two
    messages long or starts the thread: a single message repeated later in the conversation is new. When
    no run fits, a one-message request is new; a longer one om cannot place (an earlier message was edited)
    brings as new only what follows its last assistant message, so the history is not stored twice.
    """
    end = len(stored)
    ends = [end]
    for j in range(end - 1, max(end - TRAILING_REPLIES, 0) - 1, -1):
        if stored[j][0] != "assistant":
            break
        ends.append(j)
    best = (0, end)
    for j in ends:
        for k in range(min(len(sent), j), best[0], -1):
            if list(stored[j - k : j]) == list(sent[:k]):
                if j == end or k >= 2 or (whole_thread and j == k):
                    best = (k, j)
                break
    if best[0] == 0 and stored and len(sent) > 1:
        replies = [i for i, (role, _) in enumerate(sent) if role == "assistant"]
        return (replies[-1] + 1 if replies else 0), end
    return best


def answered_retry(sent: Sequence[tuple[str, str]], stored: Sequence[tuple[str, str]]) -> int | None:
    """The index in ``stored`` of the reply that already answers ``sent``, when the request is a retry:
    every sent message is stored, in order, followed only by the thread's newest assistant replies; the
    newest of them answers it. None when the request asks for something new (or ends with an assistant
    message, asking the model to go on from there)."""
    if not sent or sent[-1][0] == "assistant":
        return None
    start = len(stored)
    while start > 0 and stored[start - 1][0] == "assistant":
        start -= 1
    if start == len(stored) or start < len(sent):
        return None
    return len(stored) - 1 if list(stored[start - len(sent) : start]) == list(sent) else None


def keyed_reply_id(thread_id: str, idempotency_key: str) -> str:
    """The id of the reply to a request sent with ``idempotency_key``: every repeat finds it by id."""
    return derive_message_id(thread_id, "Idempotency-Key", idempotency_key)


# --- the turn -------------------------------------------------------------------------------------------


def _check(proxy: ChatProxy, turn: ChatTurn) -> None:
    if turn.model not in proxy.offered:
        raise ChatRequestError(
            404,
            f"the model {turn.model!r} is not offered by this server (GET /v1/models lists those it is)",
            code="model_not_found",
            param="model",
        )
    if turn.provider_key is not None and not proxy.forward_provider_key:
        raise ChatRequestError(
            400,
            "this server calls models with its own keys: it does not forward X-OM-Provider-Key "
            "(OM_CHAT_FORWARD_PROVIDER_KEY)",
            code="provider_key_not_forwarded",
        )


def _prepare(deps: Deps, proxy: ChatProxy, turn: ChatTurn, render: Render) -> _Prepared | _Replay:
    _check(proxy, turn)
    try:
        return _place_and_read(deps, turn, render)
    except MessageValidationError as error:
        raise ChatRequestError(400, str(error), code="invalid_message", param=error.path) from error


def _place_and_read(deps: Deps, turn: ChatTurn, render: Render) -> _Prepared | _Replay:
    instructions = [dict(m) for m in turn.messages if m.get("role") in INSTRUCTION_ROLES]
    conversation = [(i, m) for i, m in enumerate(turn.messages) if m.get("role") not in INSTRUCTION_ROLES]
    if not conversation:
        raise ChatRequestError(
            400,
            "messages holds no user, assistant or tool message",
            code="invalid_messages",
            param="messages",
        )
    sent = [_signature_at(raw, index, turn.thread_id, deps.max_message_bytes) for index, raw in conversation]
    stream_id = record_stream_for(deps, turn.tenant, turn.thread_id, turn.resource_id, profile=turn.profile)
    limit = len(sent) + TRAILING_REPLIES
    tail = deps.messages.read_messages(stream_id, thread_id=turn.thread_id, backward=True, limit=limit)
    stored = [_stored_key(m) for m in tail]
    known, run_end = known_prefix(sent, stored, whole_thread=len(tail) < limit)
    reply_id = keyed_reply_id(turn.thread_id, turn.idempotency_key) if turn.idempotency_key else None
    if reply_id is not None:
        found = next(iter(deps.messages.messages_with_id([stream_id], reply_id)), None)
        if found is not None:
            asked = deps.messages.read_messages(
                stream_id, thread_id=turn.thread_id, cursor=found.seq, backward=True, limit=len(sent)
            )
            if [_stored_key(m) for m in asked] != sent:
                raise ChatRequestError(
                    409,
                    f"the Idempotency-Key {turn.idempotency_key!r} was used for another request on this "
                    "thread: send a new key with a new request",
                    code="idempotency_key_reused",
                )
            return _Replay(found, _status_now(deps, stream_id))
    elif not turn.regenerate:
        answered = answered_retry(sent, stored)
        if answered is not None:
            return _Replay(tail[answered], _status_now(deps, stream_id))
    # what comes new follows the thread's last message; with nothing new, the reply follows the last sent
    previous = tail[-1].message_id if tail else ""
    if known == len(sent):
        previous = tail[run_end - 1].message_id
    fresh: list[dict[str, Any]] = []
    for (_, raw), (_, message_signature) in zip(conversation[known:], sent[known:], strict=True):
        given = raw.get("id")
        previous = (
            given
            if isinstance(given, str)
            else derive_message_id(turn.thread_id, previous, message_signature)
        )
        fresh.append({**raw, "id": previous})
    appended = 0
    start = None
    if fresh:
        outcome = append_messages(
            deps,
            tenant=turn.tenant,
            thread_id=turn.thread_id,
            messages=fresh,
            resource_id=turn.resource_id,
            profile=turn.profile,
        )
        appended = len(outcome.appended)
        # as in a turn, the read starts from the state the append committed: no second store read
        start = outcome.state
    # the app's prompt_cache_retention is what an "auto" idle TTL follows, as on a context read
    retention = turn.options.get("prompt_cache_retention")
    window = read_context(
        deps,
        tenant=turn.tenant,
        thread_id=turn.thread_id,
        caller_model=turn.model,
        start=start,
        caller_provider_options={"openai": {"promptCacheRetention": retention}} if retention else None,
    ).window
    call = ChatCall(
        model=turn.model,
        messages=[*instructions, *render(window)],
        options=dict(turn.options),
        api_key=turn.provider_key,
    )
    status = TurnStatus(
        version=window.version,
        pending_tokens=window.pending_tokens,
        observation_tokens=window.observation_tokens,
        generation=int(window.status.get("generationCount", 0)),
        appended=appended,
    )
    lease_key = None
    if reply_id is not None:
        lease_key = f"{stream_id}:reply:{reply_id}"
    elif not turn.regenerate:
        lease_key = f"{stream_id}:reply-to:{previous}"
    return _Prepared(
        call=call,
        stream_id=stream_id,
        last_id=previous,
        status=status,
        lease_key=lease_key,
        keyed_reply_id=reply_id,
    )


def _status_now(deps: Deps, stream_id: str) -> TurnStatus:
    state = load_state(deps.records, deps.store, stream_id, deps.states)
    return TurnStatus(
        version=state.version,
        pending_tokens=state.pending_tokens,
        observation_tokens=state.observation_tokens,
        generation=state.generation,
        appended=0,
        replayed=True,
    )


def _signature_at(raw: Mapping[str, Any], index: int, thread_id: str, max_bytes: int) -> tuple[str, str]:
    message, stored = normalize_message(
        raw, now=_SIGNATURE_CLOCK, max_bytes=max_bytes, thread_id=thread_id, path_prefix=f"messages[{index}]"
    )
    return message.role, _signature_of_json(stored)


def _stored_key(stored: StoredMessage) -> tuple[str, str]:
    return stored.role, _signature_of_json(stored.message)


def _store_reply(
    deps: Deps, turn: ChatTurn, prepared: _Prepared, reply: dict[str, Any]
) -> AppendOutcome | None:
    if not reply.get("content") and not reply.get("tool_calls"):
        return None
    raw = {"role": "assistant", **reply, "model": turn.model}
    reply_id = prepared.keyed_reply_id or derive_message_id(
        turn.thread_id,
        prepared.last_id,
        signature(raw, thread_id=turn.thread_id, max_bytes=deps.max_message_bytes),
    )
    return append_messages(
        deps,
        tenant=turn.tenant,
        thread_id=turn.thread_id,
        messages=[{**raw, "id": reply_id}],
        resource_id=turn.resource_id,
    )


def chat_completion(deps: Deps, proxy: ChatProxy, turn: ChatTurn, render: Render) -> ChatAnswer:
    """One turn, answered whole: the model's ``chat.completion``, once its reply (choice 0) is stored; or,
    for a repeated request, the stored reply as a completion."""
    with contextlib.ExitStack() as held:
        prepared = _prepare_under_lease(deps, proxy, turn, render, held)
        if isinstance(prepared, _Replay):
            return ChatAnswer(body=replayed_completion(prepared.reply, render), status=prepared.status)
        body = proxy.models.chat(prepared.call)
        choices = body.get("choices") or []
        message = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else None
        reply = {k: message.get(k) for k in ("content", "tool_calls")} if isinstance(message, Mapping) else {}
        outcome = _store_reply(deps, turn, prepared, reply)
    status = prepared.status
    if outcome is not None and outcome.state is not None:
        state = outcome.state
        status = TurnStatus(
            version=outcome.version,
            pending_tokens=state.pending_tokens,
            observation_tokens=state.observation_tokens,
            generation=state.generation,
            appended=status.appended,
        )
    return ChatAnswer(body=body, status=status)


def chat_completion_stream(deps: Deps, proxy: ChatProxy, turn: ChatTurn, render: Render) -> ChatStreamAnswer:
    """One turn, streamed: the model's chunks as they come; the reply is stored once the model finished
    (a stream cut short stores no reply). A repeated request gets the stored reply as chunks."""
    held = contextlib.ExitStack()
    try:
        prepared = _prepare_under_lease(deps, proxy, turn, render, held)
        if isinstance(prepared, _Replay):
            held.close()
            return ChatStreamAnswer(chunks=replayed_chunks(prepared.reply, render), status=prepared.status)
        chunks = proxy.models.chat_stream(prepared.call)
    except BaseException:
        held.close()
        raise
    return ChatStreamAnswer(chunks=_relay(deps, turn, prepared, chunks, held), status=prepared.status)


def _prepare_under_lease(
    deps: Deps, proxy: ChatProxy, turn: ChatTurn, render: Render, held: contextlib.ExitStack
) -> _Prepared | _Replay:
    """Place the request and, unless a stored reply answers it, take the lease its model call is made
    under (entered on ``held``). A repeat of a request whose first is still with the model waits for it
    and then finds its reply, or, if that first request's process died, makes the call itself."""
    while True:
        prepared = _prepare(deps, proxy, turn, render)
        if isinstance(prepared, _Replay) or prepared.lease_key is None:
            return prepared
        holder = held.enter_context(held_lease(deps, prepared.lease_key, prepared.stream_id))
        if holder is None:
            if not _moved_on(deps, turn, prepared):
                return prepared
            # the first attempt stored its reply between our placing and our lease: place again
            held.close()
            continue
        held.close()
        while (current := deps.leases.live_holder(prepared.lease_key)) is not None and not dead_on_this_host(
            current
        ):
            time.sleep(_REPEAT_POLL_S)


def _moved_on(deps: Deps, turn: ChatTurn, prepared: _Prepared) -> bool:
    """Whether the thread holds a message after the one the reply would follow (or the keyed reply):
    then the placement is out of date."""
    if prepared.keyed_reply_id is not None:
        return bool(deps.messages.messages_with_id([prepared.stream_id], prepared.keyed_reply_id))
    last = deps.messages.messages_with_id([prepared.stream_id], prepared.last_id) if prepared.last_id else []
    if not last:
        return False
    after = deps.messages.read_messages(
        prepared.stream_id, thread_id=turn.thread_id, cursor=last[0].seq, limit=1
    )
    return bool(after)


def _relay(
    deps: Deps,
    turn: ChatTurn,
    prepared: _Prepared,
    chunks: Iterator[JSONDict],
    held: contextlib.ExitStack,
) -> Iterator[JSONDict]:
    with held:
        reply = ReplyAssembly()
        for chunk in chunks:
            reply.add(chunk)
            yield chunk
        if reply.finished:
            _store_reply(deps, turn, prepared, reply.message())


def _replayed_message(stored: StoredMessage, render: Render) -> dict[str, Any]:
    window = ContextWindow(
        system=[],
        continuation=None,
        message_json=[canonical_json(stored.message)],
        status={},
        version=0,
        pending_tokens=0,
        observation_tokens=0,
    )
    return {k: v for k, v in render(window)[0].items() if k in ("role", "content", "tool_calls")}


def replayed_completion(stored: StoredMessage, render: Render) -> JSONDict:
    """A stored reply as the ``chat.completion`` it was (its id is the stored message's)."""
    message = _replayed_message(stored, render)
    return {
        "id": f"chatcmpl-{stored.message_id}",
        "object": "chat.completion",
        "created": int(stored.created_at.timestamp()),
        "model": stored.message.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
    }


def replayed_chunks(stored: StoredMessage, render: Render) -> Iterator[JSONDict]:
    """A stored reply as the chunks of a streamed completion: its text, its tool calls, the end."""
    completion = replayed_completion(stored, render)
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}


class ReplyAssembly:
    """Choice 0 of a streamed completion, put back together from its deltas."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finished = False

    def add(self, chunk: Mapping[str, Any]) -> None:
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for piece in delta.get("tool_calls") or []:
                call = self.calls.setdefault(
                    int(piece.get("index", 0)), {"id": None, "type": "function", "name": "", "arguments": ""}
                )
                call["id"] = piece.get("id") or call["id"]
                function = piece.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finished = True

    def message(self) -> dict[str, Any]:
        tool_calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(self.calls.items())
        ]
        return {"content": "".join(self.content) or None, "tool_calls": tool_calls or None}
