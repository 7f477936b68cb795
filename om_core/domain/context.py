"""The projected context window (docs/semantics.md, What the agent sees) and the ``data-om-status`` object,
built from the state.

Both are pure functions of (state, config, now): a context read at version N and a replay to version N give
the same answer, which is what time travel relies on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from om_core.domain.config import MemoryConfig
from om_core.domain.observation_log import optimize_observations_for_context, render_groups_for_context
from om_core.domain.policy import (
    Limits,
    activation_count,
    protected_from_seq,
    protected_tokens,
    resolve_limits,
    sync_observation,
)
from om_core.domain.state import RecordState, WindowMessage
from om_core.domain.transcript import obscure_thread_id

PREAMBLE = (
    "The observations below are your memory of earlier parts of this conversation with this user, "
    "written down as the conversation went on. Each line is dated; the newest lines are the most current. "
    "Use the specifics they hold (names, numbers, dates, decisions) to answer personally and precisely. "
    "When observations disagree, trust the most recent one. Plans recorded as future intentions have "
    "probably happened by now unless something says otherwise. The latest user message is what you answer; "
    "content inside <system-reminder> tags is guidance for you, never something the user said."
)

RETRIEVAL_INSTRUCTIONS = (
    "Each observation group carries the range of message ids it was written from (`start:end`). When you "
    "need the exact wording of something the observations only summarise (to quote it, repeat it, or check "
    "a detail), call the `recall` tool with a message id from that range as the cursor; page forward or "
    "backward with `page`, and ask for `detail: high` or a `partIndex` to read a single part in full."
)

CONTINUATION_REMINDER = (
    "<system-reminder>The conversation continues from here. Earlier turns are summarised in your memory "
    "above; treat them as background and carry on naturally without mentioning memory or summaries. "
    "{suggestion}Messages that follow take priority over anything remembered.</system-reminder>"
)

OBSERVATIONS_OPEN = "<observations>"
OTHER_PART_MAX_CHARS = 500
OBSERVATIONS_CLOSE = "</observations>"

WORKING_MEMORY_LEAD = (
    "Your working memory: durable facts about the user, kept up to date by your memory. Use them as "
    "background knowledge; newer messages take priority."
)


@dataclass(frozen=True)
class ContextWindow:
    """What an agent sends to its model: system messages, a continuation hint, the unobserved messages."""

    system: list[str]
    continuation: str | None
    # the unobserved messages as stored, each a JSON object's text: an answer that only passes them on
    # (the HTTP API) embeds the text as it is instead of parsing and re-encoding every message of the window
    message_json: list[str]
    status: dict[str, Any]
    version: int
    pending_tokens: int
    observation_tokens: int
    warnings: list[str] = field(default_factory=list)

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        parsed: list[dict[str, Any]] = [json.loads(text) for text in self.message_json]
        return parsed


def build_context(
    state: RecordState, config: MemoryConfig, now: datetime, *, thread_id: str | None = None
) -> ContextWindow:
    """The window for ``thread_id``. A resource record holds every thread's unobserved messages: the
    thread's own are its raw messages, the others' recent ones come as a block of other conversations."""
    system: list[str] = []
    shared = state.thread_id is None and thread_id is not None
    own = [m for m in state.window if not shared or m.thread_id in (thread_id, None)]
    others = [m for m in state.window if shared and m.thread_id not in (thread_id, None)]
    if state.log or others:
        preamble = PREAMBLE
        if config.retrieval is not None:
            preamble += "\n\n" + RETRIEVAL_INSTRUCTIONS
            if config.retrieval.instructions:
                preamble += "\n\n" + config.retrieval.instructions
        system.append(preamble)
        if others:
            system.append(_other_conversations(others, config))
        if state.log:
            system.append(OBSERVATIONS_OPEN)
            # one message per log segment: older segments never change, so prompt caches keep hitting them
            for segment in state.log:
                text = optimize_observations_for_context(segment.text, now)
                if text.strip():
                    system.append(render_groups_for_context(text) if config.retrieval is not None else text)
            system.append(OBSERVATIONS_CLOSE)
        if state.current_task and config.observation.continuation_hints:
            system.append(f"<current-task>\n{state.current_task}\n</current-task>")
        if state.suggested_response and config.observation.continuation_hints:
            system.append(f"<suggested-response>\n{state.suggested_response}\n</suggested-response>")
        # both lists write into one set of values: a name in both is one value, shown once
        shown: set[str] = set()
        for extractor in (*config.observation.extract, *config.reflection.extract):
            value = state.extracted.get(extractor.slug)
            if extractor.slug in shown or not extractor.include_previous_extraction:
                continue
            if value not in (None, "", {}, []):
                shown.add(extractor.slug)
                system.append(f"<{extractor.slug}>\n{_render_value(value)}\n</{extractor.slug}>")
    if state.working_memory and config.observation.manage_working_memory and config.working_memory.enabled:
        # last, as Mastra appends it: a new version of the document leaves every message before it alone
        system.append(f"{WORKING_MEMORY_LEAD}\n\n<working-memory>\n{state.working_memory}\n</working-memory>")
    continuation = None
    if state.log:
        suggestion = "If a suggested response is given above, follow it. " if state.suggested_response else ""
        continuation = CONTINUATION_REMINDER.format(suggestion=suggestion)
    status = build_status(state, config, reader_thread=thread_id if shared else None)
    over = status["overBudget"]
    warnings = []
    if over is not None and over["reason"] == NEWEST_TURN:
        warnings.append(
            f"the context holds {over['pendingTokens']} unobserved tokens, over the limit of "
            f"{over['limitTokens']}, because the newest user message and what follows it hold "
            f"{over['newestTurnTokens']} tokens: they stay raw so the model sees the question verbatim"
        )
    return ContextWindow(
        system=system,
        continuation=continuation,
        message_json=[m.body for m in own],
        status=status,
        version=state.version,
        pending_tokens=state.pending_tokens,
        observation_tokens=state.observation_tokens,
        warnings=warnings,
    )


NEWEST_TURN = "newest_turn"
UNOBSERVED = "unobserved"


def over_budget(state: RecordState, config: MemoryConfig, reader_thread: str | None) -> dict[str, Any] | None:
    """Why the window is at or over its limit (blockAfter, or messageTokens without buffering), or None.

    ``newest_turn``: everything before the newest user message that can be observed is; the rest is the
    newest turn, which is never observed (docs/semantics.md). ``unobserved``: observable messages remain,
    because observation failed (failurePolicy continue) or a read did not wait for it.
    """
    limits = resolve_limits(config, state)
    limit = limits.block_after if limits.block_after is not None else limits.message_threshold
    # with OM turned off (enabled: false) there is no budget to be over: the window is the raw messages
    if state.pending_tokens < limit or not config.enabled:
        return None
    protected = protected_from_seq(state, reader_thread)
    observable = activation_count(state, limits, protected) > 0 or (
        sync_observation(state, limits, "block_after", protected) is not None
    )
    return {
        "reason": UNOBSERVED if observable else NEWEST_TURN,
        "pendingTokens": state.pending_tokens,
        "limitTokens": limit,
        "newestTurnTokens": protected_tokens(state, protected),
    }


def _other_conversations(messages: list[WindowMessage], config: MemoryConfig) -> str:
    """Recent unobserved messages of the resource's other threads, each part cut at 500 characters."""
    blocks: list[str] = []
    by_thread: dict[str, list[WindowMessage]] = {}
    for message in messages:
        by_thread.setdefault(message.thread_id or "", []).append(message)
    for thread, items in by_thread.items():
        shown = obscure_thread_id(thread) if config.obscure_thread_ids else thread
        lines = []
        for item in items:
            text = " ".join(
                str(part.get("text", ""))
                for part in item.message.get("parts", [])
                if isinstance(part, dict) and part.get("type") == "text"
            )
            if len(text) > OTHER_PART_MAX_CHARS:
                cut = len(text) - OTHER_PART_MAX_CHARS
                text = f"{text[:OTHER_PART_MAX_CHARS]}... [truncated {cut} characters]"
            lines.append(f"{item.role.capitalize()}: {text}")
        blocks.append(f'<other-conversation id="{shown}">\n' + "\n".join(lines) + "\n</other-conversation>")
    return (
        "Content from OTHER conversations with this user, not yet in your memory. Use it as background; "
        "answer the current conversation.\n\n" + "\n\n".join(blocks)
    )


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def build_status(
    state: RecordState, config: MemoryConfig, *, step_number: int = 0, reader_thread: str | None = None
) -> dict[str, Any]:
    """The ``data-om-status`` data object, with Mastra's field names, and om's ``overBudget``."""
    limits = resolve_limits(config, state)
    return {
        "windows": {
            "active": {
                "messages": {"tokens": state.pending_tokens, "threshold": limits.message_threshold},
                "observations": {
                    "tokens": state.observation_tokens,
                    "threshold": limits.observation_threshold,
                },
            },
            "buffered": {
                "observations": {
                    "chunks": len(state.chunks),
                    "messageTokens": min(state.chunk_message_tokens, state.pending_tokens),
                    "projectedMessageRemoval": _projected_removal(state, limits),
                    "observationTokens": state.chunk_observation_tokens,
                    "status": _buffer_status(state),
                },
                "reflection": {
                    "inputObservationTokens": (
                        state.buffered_reflection.input_tokens if state.buffered_reflection else 0
                    ),
                    "observationTokens": (
                        state.buffered_reflection.tokens if state.buffered_reflection else 0
                    ),
                    "status": _reflection_status(state),
                },
            },
        },
        "recordId": state.stream_id,
        # a resource's record is every thread's: the status names the one it was read for
        "threadId": state.thread_id or reader_thread,
        "stepNumber": step_number,
        "generationCount": state.generation,
        "overBudget": over_budget(state, config, reader_thread),
    }


def _projected_removal(state: RecordState, limits: Limits) -> int:
    count = activation_count(state, limits, protected_from_seq(state))
    return sum(c.message_tokens for c in state.chunks[:count])


def _buffer_status(state: RecordState) -> str:
    if state.buffer_in_flight is not None:
        return "running"
    return "complete" if state.chunks else "idle"


def _reflection_status(state: RecordState) -> str:
    flight = state.reflection_in_flight
    if flight is not None and flight.mode == "buffered":
        return "running"
    return "complete" if state.buffered_reflection is not None else "idle"


def om_metadata(state: RecordState, config: MemoryConfig) -> dict[str, Any]:
    """The thread's OM metadata as Mastra keeps it (``thread.metadata.mastra.om``): continuation hints,
    title, and each extractor's value at its ``metadataKeyPath`` (``extracted.<name>`` by default; an
    extractor with ``metadataKeyPath: false`` is not persisted there)."""
    meta: dict[str, Any] = {}
    if state.current_task:
        meta["currentTask"] = state.current_task
    if state.suggested_response:
        meta["suggestedResponse"] = state.suggested_response
    if state.title:
        meta["threadTitle"] = state.title
    for extractor in (*config.observation.extract, *config.reflection.extract):
        path = extractor.persisted_key_path
        if path is None or extractor.slug not in state.extracted:
            continue
        *parents, leaf = path.split(".")
        node = meta
        for key in parents:
            child = node.get(key)
            node[key] = child = child if isinstance(child, dict) else {}
            node = child
        node[leaf] = state.extracted[extractor.slug]
    return meta
