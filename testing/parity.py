"""Parity with Mastra: the recorded conversations replayed through om's engine, set against Mastra's record.

Each trace of ``tests/fixtures/parity/traces`` was run through Mastra 1.31's own engine with deterministic
mock models (see the README next to it); ``tests/fixtures/parity/mastra`` holds Mastra's per-turn record.
Here the same turns go through om in this process (SQLite scratch file, inline dispatcher, a clock that
follows the trace's times), with ``ParityModels`` answering as Mastra's mocks did, and the event stream is
read back into a per-turn record of the same shape as Mastra's ``summary``.

``python -m testing.parity`` prints the comparison of both traces as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from om_core.adapters.store.migrations import upgrade_to_head
from om_core.application.append import AppendOutcome, append_messages, configure_thread
from om_core.application.context import read_context
from om_core.application.deps import Deps
from om_core.application.ports import (
    EmbeddingRequest,
    EmbeddingResponse,
    ModelGateway,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    PermanentModelError,
)
from om_core.application.streams import thread_stream_id
from om_core.bootstrap import build_inline
from om_core.domain.events import (
    ChunksActivated,
    DomainEvent,
    MessageAppended,
    ObservationBufferCompleted,
    ObservationBufferRequested,
    ReflectionActivated,
    ReflectionCompleted,
    ReflectionRequested,
    SyncObservationCompleted,
    from_recorded,
)
from om_core.domain.prompts import (
    OBSERVER_HISTORY_HEADING,
    REFLECTOR_LEVEL_LINE,
    REFLECTOR_OBSERVATIONS_HEADING,
    REFLECTOR_TARGET_LINE,
    TRANSCRIPT_END_MARKER,
)
from om_core.domain.state import RecordState, apply, initial_state
from om_core.domain.tokens import make_tokenizer

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "parity"
TRACES = ("small-200", "nobuffer-200")
TENANT = "parity"
THREAD = "trace"
# what the profile names as every role's model: the double answers whatever it is asked, so the id only
# has to be one the configuration accepts (and not gemini-2.5-flash, whose ladder starts one level higher)
MODEL = "parity/mock"

# The kinds of work a turn can hold, with Mastra's names (``summary.turnsWith``).
KINDS = (
    "observationBuffering",
    "observationActivation",
    "syncObservation",
    "reflectionBuffering",
    "reflectionActivation",
    "syncReflection",
)

_TOKENX = make_tokenizer("tokenx")
_T = TypeVar("_T")


def tokenx(text: str) -> int:
    """Tokens as Mastra counted them (tokenx 1.3.0)."""
    return _TOKENX.count(text)


# --- the test double: Mastra's mock Observer and Reflector -------------------------------------------------

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DATE_HEADER = re.compile(r"^([A-Z][a-z]{2}) (\d{1,2}),? (\d{4}):\s*$")
_PART_LINE = re.compile(r"^(User|Assistant)(?: \((\d{1,2}):(\d{2})\s*([AP]M)\))?:(?: (.*))?$")
_LEVEL = re.compile(re.escape(REFLECTOR_LEVEL_LINE.partition("{")[0]) + r"(\d+)")


def _section(text: str, start: str, end: str) -> str:
    after = text.split(start, 1)[1] if start in text else ""
    return after.split(end, 1)[0]


def _words(text: str, limit: int) -> str:
    """The first ``limit`` words, with `` …`` when some were cut (how Mastra's mocks shortened text)."""
    words = text.split()
    return " ".join(words[:limit]) + (" …" if len(words) > limit else "")


def _date_line(day: date) -> str:
    return f"Date: {_MONTHS[day.month - 1]} {day.day}, {day.year}"


@dataclass
class _Line:
    day: date | None
    clock: str
    role: str
    text: str


def _transcript_lines(transcript: str) -> list[_Line]:
    """The user and assistant lines of om's transcript, each with its date and 24-hour time."""
    lines: list[_Line] = []
    day: date | None = None
    clock = "00:00"
    for raw in transcript.splitlines():
        header = _DATE_HEADER.match(raw)
        if header:
            month, number, year = header.groups()
            day = date(int(year), _MONTHS.index(month) + 1, int(number))
            continue
        part = _PART_LINE.match(raw)
        if part is None:
            continue
        role, hour, minute, meridiem, text = part.groups()
        if hour is not None:
            clock = f"{int(hour) % 12 + (12 if meridiem == 'PM' else 0):02d}:{minute}"
        lines.append(_Line(day, clock, role, text or ""))
    return lines


def mock_observations(transcript: str) -> str:
    """Mastra's mock Observer: one 🔴 line per user line, first 15 words, under date headers; a batch
    without a user line gets one 🟡 line for its last assistant line, first 12 words."""
    lines = _transcript_lines(transcript)
    users = [line for line in lines if line.role == "User"]
    if users:
        notes = [(line, f"* 🔴 ({line.clock}) User said: {_words(line.text, 15)}") for line in users]
    elif lines:
        last = lines[-1]
        notes = [(last, f"* 🟡 ({last.clock}) Assistant replied: {_words(last.text, 12)}")]
    else:
        return ""
    out: list[str] = []
    day: date | None = None
    for line, note in notes:
        if line.day is not None and line.day != day:
            day = line.day
            out.append(_date_line(day))
        out.append(note)
    return "\n".join(out)


def mock_reflection(observations: str, level: int) -> str:
    """Mastra's mock Reflector: the date headers, and one bullet in every ``2 + level``, cut to 12 words."""
    keep_every = 2 + level
    out: list[str] = []
    bullet = 0
    for line in observations.splitlines():
        stripped = line.strip()
        if stripped.startswith("Date:"):
            out.append(stripped)
        elif stripped.startswith("* "):
            if bullet % keep_every == 0:
                out.append(_words(stripped, 12))
            bullet += 1
    return "\n".join(out)


class ParityModels(ModelGateway):
    """Answers the Observer and the Reflector as Mastra's mock models did in the recorded runs."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {"observer": 0, "reflector": 0}

    def complete(self, request: ModelRequest) -> ModelResponse:
        system = "\n".join(str(m["content"]) for m in request.messages if m["role"] == "system")
        user = "\n".join(str(m["content"]) for m in request.messages if m["role"] == "user")
        if request.purpose == "observer":
            text = self._observe(system, user)
        elif request.purpose == "reflector":
            text = self._reflect(user)
        else:
            raise PermanentModelError(
                f"the parity double answers no {request.purpose!r} call", model=request.model
            )
        self.calls[request.purpose] += 1
        return ModelResponse(
            text=text,
            model=request.model,
            usage=ModelUsage(input_tokens=_TOKENX.count(user), output_tokens=_TOKENX.count(text)),
            latency_ms=0.0,
            attempts=1,
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        raise PermanentModelError(
            "the parity double has no embedder: the traces run without retrieval", model=request.model
        )

    @staticmethod
    def _observe(system: str, user: str) -> str:
        transcript = _section(user, OBSERVER_HISTORY_HEADING, TRANSCRIPT_END_MARKER)
        reply = f"<observations>\n{mock_observations(transcript)}\n</observations>"
        lines = _transcript_lines(transcript)
        # the hints only when the prompt's output format asks for them, as Mastra's synchronous path did
        if "<current-task>" in system and lines:
            newest = lines[-1].text
            reply += f"\n<current-task>\nPrimary: {_words(newest, 8)}\n</current-task>"
            reply += "\n<suggested-response>\nContinue from the latest message.\n</suggested-response>"
        return reply

    @staticmethod
    def _reflect(user: str) -> str:
        observations = _section(user, REFLECTOR_OBSERVATIONS_HEADING, REFLECTOR_TARGET_LINE.partition("{")[0])
        found = _LEVEL.search(user)
        level = int(found.group(1)) if found else 0
        return f"<observations>\n{mock_reflection(observations, level)}\n</observations>"


# --- the driver --------------------------------------------------------------------------------------------


def load_trace(name: str, root: Path = FIXTURES) -> dict[str, Any]:
    trace: dict[str, Any] = json.loads((root / "traces" / f"{name}.json").read_text())
    return trace


def load_mastra(name: str, root: Path = FIXTURES) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((root / "mastra" / f"{name}.json").read_text())
    return record


@dataclass(frozen=True)
class Turn:
    """One agent call: the user message, and the assistant texts that answered it joined as Mastra did."""

    index: int
    user_text: str
    user_at: datetime
    assistant_text: str | None
    assistant_at: datetime | None


def user_turns(trace: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    pending: dict[str, Any] | None = None
    replies: list[dict[str, Any]] = []

    def close() -> None:
        if pending is None:
            return
        turns.append(
            Turn(
                index=len(turns),
                user_text=pending["text"],
                user_at=_time(pending["at"]),
                assistant_text="\n\n".join(r["text"] for r in replies) if replies else None,
                assistant_at=_time(replies[0]["at"]) if replies else None,
            )
        )

    for item in trace["turns"]:
        if item["role"] == "user":
            close()
            pending, replies = item, []
        else:
            replies.append(item)
    close()
    return turns


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def profile_for(trace: dict[str, Any]) -> dict[str, Any]:
    """The trace's OM options, counted with tokenx, every role on the double's model id."""
    return {**trace["config"], "model": MODEL, "tokenizer": "tokenx"}


class VirtualClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass(frozen=True)
class Phase:
    """The events one step of a turn committed: ``user`` (appending the user message), ``read`` (the
    context read before the model call), ``assistant`` (appending the reply)."""

    turn: int
    name: str
    first_version: int
    last_version: int


@dataclass
class Replay:
    """What om did on one trace: every event with the turn and phase that committed it, and per turn the
    token counts and the window the read returned."""

    name: str
    events: list[tuple[int, DomainEvent]]
    phases: list[Phase]
    message_tokens: dict[int, tuple[int, int | None]]  # turn -> (user, assistant)
    context: dict[int, tuple[int, int]]  # turn -> (message tokens, observation tokens) the read returned
    newest_user_raw: dict[int, bool]  # turn -> whether the read's window held the turn's user message
    observer_calls: int
    reflector_calls: int
    final: RecordState = field(repr=False)

    def phase_of(self, version: int) -> Phase:
        for phase in self.phases:
            if phase.first_version <= version <= phase.last_version:
                return phase
        raise LookupError(f"event version {version} belongs to no turn")


_template: Path | None = None


@contextmanager
def scratch_database() -> Iterator[str]:
    """A migrated SQLite file of its own, copied from one migrated once per process."""
    global _template
    if _template is None or not _template.exists():
        _template = Path(tempfile.mkdtemp(prefix="om-parity-")) / "template.sqlite3"
        upgrade_to_head(f"sqlite:///{_template}")
    folder = Path(tempfile.mkdtemp(prefix="om-parity-"))
    target = folder / "db.sqlite3"
    shutil.copy(_template, target)
    try:
        yield f"sqlite:///{target}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def replay(name: str, trace: dict[str, Any]) -> Replay:
    """Drive every user turn through om as Mastra's harness drove it through Mastra: append the user
    message, read the context (the step-0 work), append the reply. Background work runs inline right
    after the commit that asks for it, so it has completed before the next step, as Mastra's awaited
    buffering had before the next turn."""
    turns = user_turns(trace)
    models = ParityModels()
    clock = VirtualClock(turns[0].user_at)
    with scratch_database() as url:
        deps, dispatcher = build_inline(
            database_url=url, profile=profile_for(trace), models=models, migrate=False
        )
        deps.clock = clock
        stream = thread_stream_id(TENANT, THREAD)
        try:
            configure_thread(deps, tenant=TENANT, thread_id=THREAD)
            phases = [Phase(-1, "setup", 1, deps.store.stream_version(stream))]
            tokens: dict[int, tuple[int, int | None]] = {}
            context: dict[int, tuple[int, int]] = {}
            raw: dict[int, bool] = {}

            def step(turn: int, phase: str, action: Callable[[], _T]) -> _T:
                before = deps.store.stream_version(stream)
                result = action()
                phases.append(Phase(turn, phase, before + 1, deps.store.stream_version(stream)))
                return result

            for turn in turns:
                clock.now = turn.user_at
                appended = step(turn.index, "user", partial(_append, deps, turn, "user"))
                read = step(turn.index, "read", partial(read_context, deps, tenant=TENANT, thread_id=THREAD))
                context[turn.index] = (read.window.pending_tokens, read.window.observation_tokens)
                raw[turn.index] = any(m.get("id") == f"user-{turn.index}" for m in read.window.messages)
                reply_tokens: int | None = None
                if turn.assistant_text is not None and turn.assistant_at is not None:
                    clock.now = turn.assistant_at
                    reply = step(turn.index, "assistant", partial(_append, deps, turn, "assistant"))
                    reply_tokens = reply.appended[0].tokens
                tokens[turn.index] = (appended.appended[0].tokens, reply_tokens)
            recorded = deps.store.read_stream(stream)
        finally:
            dispatcher.close()
            deps.close()
    events = [(r.stream_version, from_recorded(r)) for r in recorded]
    state = initial_state(stream)
    for _, event in events:
        state = apply(state, event)
    return Replay(
        name=name,
        events=events,
        phases=phases,
        message_tokens=tokens,
        context=context,
        newest_user_raw=raw,
        observer_calls=models.calls["observer"],
        reflector_calls=models.calls["reflector"],
        final=state,
    )


def _append(deps: Deps, turn: Turn, role: str) -> AppendOutcome:
    text, at = (turn.user_text, turn.user_at) if role == "user" else (turn.assistant_text, turn.assistant_at)
    if at is None:
        raise ValueError(f"turn {turn.index} has no {role} message")
    message = {
        "id": f"{role}-{turn.index}",
        "role": role,
        "parts": [{"type": "text", "text": text}],
        "createdAt": _iso(at),
    }
    return append_messages(deps, tenant=TENANT, thread_id=THREAD, messages=[message])


# --- Mastra's rendering of the log for the context ---------------------------------------------------------
#
# ``optimizeObservationsForContext`` and ``addRelativeTimeToObservations`` of Mastra 1.31, transcribed
# statement by statement with their own regular expressions and JavaScript's date arithmetic (a date
# string is local midnight, "now" an instant), to hold om's rendering against. The one departure is the
# one the reference makes: a markdown link keeps its text.


def mastra_context_observations(observations: str, now: datetime) -> str:
    optimized = re.sub(r"(^|\n)([^\S\n]*)\[(O\d+(?:-N\d+)?)\][^\S\n]*", r"\1\2", observations)
    optimized = re.sub(r"🟡\s*", "", optimized)
    optimized = re.sub(r"🟢\s*", "", optimized)
    optimized = re.sub(r"\[(?![\d\s]*items collapsed)[^\]]+\](?!\()", "", optimized)
    optimized = re.sub(r"\s*->\s*", " ", optimized)
    optimized = re.sub(r"  +", " ", optimized)
    optimized = re.sub(r"\n{3,}", "\n\n", optimized).strip()
    return _mastra_add_relative_time(optimized, now)


def _js_date(month: str, day: str, year: str, now: datetime) -> datetime | None:
    """``new Date("May 15, 2023")``: local midnight (here: in ``now``'s zone); days past a month's end roll
    into the next month, as JavaScript's do."""
    index = {name.lower(): i for i, name in enumerate(_MONTHS, 1)}.get(month[:3].lower())
    if index is None:
        return None
    first = datetime(int(year), index, 1, tzinfo=now.tzinfo)
    return first + timedelta(days=int(day) - 1)


def _js_days(earlier: datetime, later: datetime) -> int:
    return int((later - earlier).total_seconds() // 86400)


def _mastra_relative(target: datetime, now: datetime) -> str:
    days = _js_days(target, now)
    if days < 0:
        future = -days
        if future == 1:
            return "tomorrow"
        if future < 7:
            return f"in {future} days"
        if future < 14:
            return "in 1 week"
        if future < 30:
            return f"in {future // 7} weeks"
        if future < 60:
            return "in 1 month"
        if future < 365:
            return f"in {future // 30} months"
        years = future // 365
        return f"in {years} year{'s' if years > 1 else ''}"
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days < 7:
        return f"{days} days ago"
    if days < 14:
        return "1 week ago"
    if days < 30:
        return f"{days // 7} weeks ago"
    if days < 60:
        return "1 month ago"
    if days < 365:
        return f"{days // 30} months ago"
    return f"{days // 365} year{'s' if days // 365 > 1 else ''} ago"


def _mastra_gap(earlier: datetime, later: datetime) -> str | None:
    days = _js_days(earlier, later)
    if days <= 1:
        return None
    if days < 7:
        return f"[{days} days later]"
    if days < 14:
        return "[1 week later]"
    if days < 30:
        return f"[{days // 7} weeks later]"
    if days < 60:
        return "[1 month later]"
    return f"[{days // 30} months later]"


def _mastra_date_from_content(content: str, now: datetime) -> datetime | None:
    simple = re.search(r"([A-Z][a-z]+)\s+(\d{1,2}),?\s+(\d{4})", content)
    if simple and (found := _js_date(*simple.groups(), now)) is not None:
        return found
    ranged = re.search(r"([A-Z][a-z]+)\s+(\d{1,2})-\d{1,2},?\s+(\d{4})", content)
    if ranged and (found := _js_date(*ranged.groups(), now)) is not None:
        return found
    vague = re.search(
        r"(late|early|mid)[- ]?(?:to[- ]?(?:late|early|mid)[- ]?)?([A-Z][a-z]+)\s+(\d{4})", content, re.I
    )
    if vague:
        day = {"early": "7", "late": "23"}.get(vague.group(1).lower(), "15")
        if (found := _js_date(vague.group(2), day, vague.group(3), now)) is not None:
            return found
    cross = re.search(r"([A-Z][a-z]+)\s+to\s+(?:early\s+)?([A-Z][a-z]+)\s+(\d{4})", content, re.I)
    if cross:
        return _js_date(cross.group(2), "1", cross.group(3), now)
    return None


_MASTRA_FUTURE_INTENT = (
    r"\bwill\s+(?:be\s+)?(?:\w+ing|\w+)\b",
    r"\bplans?\s+to\b",
    r"\bplanning\s+to\b",
    r"\blooking\s+forward\s+to\b",
    r"\bgoing\s+to\b",
    r"\bintends?\s+to\b",
    r"\bwants?\s+to\b",
    r"\bneeds?\s+to\b",
    r"\babout\s+to\b",
)


def _mastra_add_relative_time(observations: str, now: datetime) -> str:
    def expand(match: re.Match[str]) -> str:
        prefix, content = match.group(1), match.group(2)
        target = _mastra_date_from_content(content, now)
        if target is None:
            return match.group(0)
        relative = _mastra_relative(target, now)
        before = observations[observations.rfind("\n", 0, match.start()) + 1 : match.start()]
        if target < now and any(re.search(p, before, re.I) for p in _MASTRA_FUTURE_INTENT):
            return f"({prefix} {content} - {relative}, likely already happened)"
        return f"({prefix} {content} - {relative})"

    with_inline = re.sub(r"\((estimated|meaning)\s+([^)]+\d{4})\)", expand, observations, flags=re.I)
    headers = []
    for found in re.finditer(r"^(Date:\s*)([A-Z][a-z]+) (\d{1,2}), (\d{4})$", with_inline, re.M):
        day = _js_date(found.group(2), found.group(3), found.group(4), now)
        if day is not None:
            headers.append((found, day))
    result = ""
    last = 0
    for index, (found, day) in enumerate(headers):
        result += with_inline[last : found.start()]
        if index > 0 and (gap := _mastra_gap(headers[index - 1][1], day)) is not None:
            result += f"\n{gap}\n\n"
        result += f"{found.group(1)}{found.group(0)[len(found.group(1)) :]} ({_mastra_relative(day, now)})"
        last = found.end()
    return result + with_inline[last:]


# --- om's record, shaped like Mastra's ---------------------------------------------------------------------


@dataclass(frozen=True)
class Activation:
    turn: int
    phase: str
    chunks: int
    messages: int
    message_tokens: int
    observation_tokens: int
    tokens_left: int  # the window's unobserved tokens right after the activation


@dataclass(frozen=True)
class Coverage:
    """Which messages each observation took: (kind, cycle, from_seq, to_seq, turn)."""

    ranges: list[tuple[str, str, int, int, int]]
    messages: list[int]  # every message seq of the stream
    observed_through: int  # the final cursor


def om_record(run: Replay) -> dict[str, Any]:
    """om's run as Mastra's record has it: ``summary`` (counts and ``turnsWith``) and ``turns`` (per user
    turn the message tokens, the window sent, the work done), with the phase each piece of work ran in."""
    per_turn: dict[int, dict[str, Any]] = {
        turn: {
            "turn": turn,
            "userMessageTokens": user,
            "assistantMessageTokens": assistant,
            "contextMessageTokens": run.context[turn][0],
            "contextObservationTokens": run.context[turn][1],
            "events": {},
        }
        for turn, (user, assistant) in sorted(run.message_tokens.items())
    }
    for kind, turn, phase, details in _work(run):
        entry = per_turn[turn]["events"].setdefault(kind, {"count": 0, "phases": []})
        entry["count"] += 1
        if phase not in entry["phases"]:
            entry["phases"].append(phase)
        for key, value in details.items():
            entry.setdefault(key, []).append(value)
    turns_with = {
        kind: [t for t, record in sorted(per_turn.items()) if kind in record["events"]] for kind in KINDS
    }
    activations = activations_of(run)
    summary = {
        "userTurns": len(per_turn),
        "observerCalls": run.observer_calls,
        "reflectorCalls": run.reflector_calls,
        "observationBufferingStarted": _count(run, ObservationBufferRequested),
        "observationBufferingCompleted": _count(run, ObservationBufferCompleted),
        "observationActivations": len(activations),
        "observationChunksActivated": sum(a.chunks for a in activations),
        "syncObservations": _count(run, SyncObservationCompleted),
        "reflectionBufferingStarted": sum(
            1 for _, e in run.events if isinstance(e, ReflectionRequested) and e.mode == "buffered"
        ),
        "reflectionActivations": _count(run, ReflectionActivated),
        "syncReflections": _count(run, ReflectionCompleted),
        "turnsWith": turns_with,
        "maxContextMessageTokens": max(r["contextMessageTokens"] for r in per_turn.values()),
        "activation": _activation_figures(activations),
        "generations": run.final.generation,
        "finalObservationTokens": run.final.observation_tokens,
    }
    return {"summary": summary, "turns": [per_turn[t] for t in sorted(per_turn)]}


def _count(run: Replay, kind: type[DomainEvent]) -> int:
    return sum(1 for _, event in run.events if isinstance(event, kind))


def _work(run: Replay) -> Iterator[tuple[str, int, str, dict[str, Any]]]:
    for version, event in run.events:
        phase = run.phase_of(version)
        if isinstance(event, ObservationBufferRequested):
            yield "observationBuffering", phase.turn, phase.name, {"tokensToBuffer": event.message_tokens}
        elif isinstance(event, ChunksActivated):
            yield (
                "observationActivation",
                phase.turn,
                phase.name,
                {"messageTokensActivated": event.message_tokens, "chunks": len(event.cycle_ids)},
            )
        elif isinstance(event, SyncObservationCompleted):
            yield (
                "syncObservation",
                phase.turn,
                phase.name,
                {"tokensObserved": event.message_tokens, "observationTokens": event.observation_tokens},
            )
        elif isinstance(event, ReflectionRequested) and event.mode == "buffered":
            yield "reflectionBuffering", phase.turn, phase.name, {"inputTokens": event.input_tokens}
        elif isinstance(event, ReflectionActivated):
            yield (
                "reflectionActivation",
                phase.turn,
                phase.name,
                {"observationTokens": event.observation_tokens},
            )
        elif isinstance(event, ReflectionCompleted):
            yield "syncReflection", phase.turn, phase.name, {"observationTokens": event.observation_tokens}


def activations_of(run: Replay) -> list[Activation]:
    """Every chunk activation, with the window's unobserved tokens right after it (folded event by
    event, so an activation in the middle of a commit is measured before what follows it)."""
    state = initial_state(run.final.stream_id)
    chunk_messages: dict[str, int] = {}
    found: list[Activation] = []
    for version, event in run.events:
        state = apply(state, event)
        if isinstance(event, ObservationBufferCompleted):
            chunk_messages[event.cycle_id] = len(event.message_ids)
        if isinstance(event, ChunksActivated):
            phase = run.phase_of(version)
            found.append(
                Activation(
                    turn=phase.turn,
                    phase=phase.name,
                    chunks=len(event.cycle_ids),
                    messages=sum(chunk_messages[c] for c in event.cycle_ids),
                    message_tokens=event.message_tokens,
                    observation_tokens=event.observation_tokens,
                    tokens_left=state.pending_tokens,
                )
            )
    return found


def _activation_figures(activations: Sequence[Activation]) -> dict[str, Any]:
    if not activations:
        return {"count": 0}
    return {
        "count": len(activations),
        "meanTokensActivated": round(sum(a.message_tokens for a in activations) / len(activations)),
        "meanTokensLeft": round(sum(a.tokens_left for a in activations) / len(activations)),
        "tokensLeft": [a.tokens_left for a in activations],
        "turns": [a.turn for a in activations],
        "phases": [a.phase for a in activations],
    }


def coverage(run: Replay) -> Coverage:
    """The message ranges taken out of the window, from the event stream: a buffered chunk counts once it
    is activated, a synchronous observation when it completes."""
    chunks: dict[str, tuple[int, int]] = {}
    ranges: list[tuple[str, str, int, int, int]] = []
    messages: list[int] = []
    for version, event in run.events:
        turn = run.phase_of(version).turn
        if isinstance(event, MessageAppended):
            messages.append(event.seq)
        elif isinstance(event, ObservationBufferCompleted):
            chunks[event.cycle_id] = (event.from_seq, event.to_seq)
        elif isinstance(event, ChunksActivated):
            for cycle in event.cycle_ids:
                first, last = chunks[cycle]
                ranges.append(("activation", cycle, first, last, turn))
        elif isinstance(event, SyncObservationCompleted):
            ranges.append(("sync", event.cycle_id, event.from_seq, event.to_seq, turn))
    return Coverage(ranges=ranges, messages=messages, observed_through=run.final.observed_seq)


def mastra_activations(mastra: dict[str, Any]) -> list[Activation]:
    found: list[Activation] = []
    for turn in mastra["turns"]:
        event = turn["events"].get("observationActivation")
        if event:
            found.append(
                Activation(
                    turn=turn["turn"],
                    phase="read",
                    chunks=event["chunks"],
                    messages=event["messagesActivated"],
                    message_tokens=event["messageTokensActivated"],
                    observation_tokens=event["observationTokensAdded"],
                    # Mastra activates at step 0: what the model was sent is what the activation left
                    tokens_left=turn["contextMessageTokens"],
                )
            )
    return found


# --- the comparison ----------------------------------------------------------------------------------------


def compare(name: str, run: Replay, mastra: dict[str, Any]) -> dict[str, Any]:
    """om against Mastra on one trace: token counts, the turns of each kind of work, activation figures."""
    om = om_record(run)
    token_mismatches = [
        {
            "turn": m["turn"],
            "mastra": [m["userMessageTokens"], m["assistantMessageTokens"]],
            "om": [o["userMessageTokens"], o["assistantMessageTokens"]],
        }
        for m, o in zip(mastra["turns"], om["turns"], strict=True)
        if [m["userMessageTokens"], m["assistantMessageTokens"]]
        != [o["userMessageTokens"], o["assistantMessageTokens"]]
    ]
    ours = om["summary"]["turnsWith"]
    theirs = mastra["summary"]["turnsWith"]
    # until either engine first takes messages out of the window, both windows hold the same messages
    taken = ("observationActivation", "syncObservation")
    first_work = min(
        (turn for kind in taken for turn in (*ours[kind], *theirs[kind])), default=len(om["turns"])
    )
    window_mismatches = [
        {"turn": m["turn"], "mastra": m["contextMessageTokens"], "om": o["contextMessageTokens"]}
        for m, o in zip(mastra["turns"][:first_work], om["turns"][:first_work], strict=True)
        if m["contextMessageTokens"] != o["contextMessageTokens"]
    ]
    mastra_summary = mastra["summary"]
    return {
        "trace": name,
        "messages": sum(2 if t["assistantMessageTokens"] is not None else 1 for t in om["turns"]),
        "tokenMismatches": token_mismatches,
        "windowComparedThroughTurn": first_work - 1,
        "windowMismatches": window_mismatches,
        "turnsWith": {
            kind: {
                "mastra": theirs[kind],
                "om": ours[kind],
                "onlyMastra": sorted(set(theirs[kind]) - set(ours[kind])),
                "onlyOm": sorted(set(ours[kind]) - set(theirs[kind])),
            }
            for kind in KINDS
        },
        "activation": {
            "mastra": _activation_figures(mastra_activations(mastra)),
            "om": om["summary"]["activation"],
        },
        "calls": {
            "mastra": {
                "observer": mastra_summary["observerCalls"],
                "reflector": mastra_summary["reflectorCalls"],
            },
            "om": {"observer": run.observer_calls, "reflector": run.reflector_calls},
        },
        "syncObservations": {
            "mastra": [
                {
                    "turn": t["turn"],
                    "tokensObserved": t["events"]["syncObservation"]["tokensObserved"][0],
                    "windowAfter": t["contextMessageTokens"],
                }
                for t in mastra["turns"]
                if "syncObservation" in t["events"]
            ],
            "om": [
                {
                    "turn": t["turn"],
                    "tokensObserved": t["events"]["syncObservation"]["tokensObserved"][0],
                    "windowAfter": t["contextMessageTokens"],
                }
                for t in om["turns"]
                if "syncObservation" in t["events"]
            ],
        },
        "maxContextMessageTokens": {
            "mastra": mastra_summary["maxContextMessageTokens"],
            "om": om["summary"]["maxContextMessageTokens"],
        },
        "phases": {
            kind: [
                phase for t in om["turns"] if kind in t["events"] for phase in t["events"][kind]["phases"][:1]
            ]
            for kind in KINDS
        },
        "observationTokens": {
            "mastra": mastra["turns"][-1]["contextObservationTokens"],
            "om": om["turns"][-1]["contextObservationTokens"],
        },
        "generations": om["summary"]["generations"],
        "observedTwice": observed_twice(run),
        "newestUserMessageObserved": [t for t, raw in sorted(run.newest_user_raw.items()) if not raw],
    }


# --- the documented differences, as checkable rules ----------------------------------------------------
#
# Each rule is one row of the table of deliberate differences in docs/architecture.md. A kind of work whose
# turns differ from Mastra's must satisfy every rule listed for it; a kind with differences and no rule is
# an undocumented difference.

COMMIT = "om decides after every commit"
FRESH = "activation selects chunks with the fresh pending count"
TAIL = "a synchronous observation keeps a raw tail"
BOUNDARY = "a buffer boundary stays at the pending count it was requested at"
REFLECTION = "a reflection follows the observation that filled the log"


@dataclass(frozen=True)
class Finding:
    kind: str  # the work whose turns differ (a ``summary.turnsWith`` key)
    rule: str  # the documented difference checked
    holds: bool
    detail: str


def differences(comparison: dict[str, Any]) -> list[Finding]:
    """Every rule checked against every kind of work whose turns differ from Mastra's."""
    findings: list[Finding] = []
    for kind in KINDS:
        turns = comparison["turnsWith"][kind]
        if turns["om"] == turns["mastra"]:
            continue
        checks = _RULES.get(kind)
        if checks is None:
            findings.append(
                Finding(kind, "undocumented", False, f"om {turns['om']} vs Mastra {turns['mastra']}")
            )
            continue
        for check in checks:
            findings.extend(check(kind, comparison))
    return findings


def _first_turn_rule(kind: str, comparison: dict[str, Any]) -> list[Finding]:
    """Up to the first piece of work the window is the same in both engines, so it must come in the same
    turn, or one turn earlier when om saw the threshold crossed at the commit of the previous reply, which
    Mastra does not decide at."""
    om, mastra = comparison["turnsWith"][kind]["om"], comparison["turnsWith"][kind]["mastra"]
    if not om or not mastra:
        return [Finding(kind, COMMIT, False, f"only one engine did it: om {om}, Mastra {mastra}")]
    phase = comparison["phases"][kind][0]
    same = om[0] == mastra[0]
    earlier = om[0] == mastra[0] - 1 and phase == "assistant"
    return [
        Finding(
            kind,
            COMMIT,
            same or earlier,
            f"first: om turn {om[0]} ({phase} commit), Mastra turn {mastra[0]} (step 0)",
        )
    ]


def _fresh_count_rule(kind: str, comparison: dict[str, Any]) -> list[Finding]:
    """The fresh count takes more per activation: no more activations than Mastra, at least as many tokens
    each on average, fewer left behind, and so each one no earlier than Mastra's of the same rank (save the
    one turn that deciding at every commit gains)."""
    om, mastra = comparison["activation"]["om"], comparison["activation"]["mastra"]
    early = [
        (k, o, m) for k, (o, m) in enumerate(zip(om["turns"], mastra["turns"], strict=False)) if o < m - 1
    ]
    return [
        Finding(
            kind, FRESH, om["count"] <= mastra["count"], f"count: om {om['count']}, Mastra {mastra['count']}"
        ),
        Finding(
            kind,
            FRESH,
            om["meanTokensActivated"] >= mastra["meanTokensActivated"]
            and om["meanTokensLeft"] <= mastra["meanTokensLeft"],
            f"mean tokens activated: om {om['meanTokensActivated']}, Mastra {mastra['meanTokensActivated']}; "
            f"mean tokens left: om {om['meanTokensLeft']}, Mastra {mastra['meanTokensLeft']}",
        ),
        Finding(
            kind,
            FRESH,
            not early,
            "activations more than one turn before Mastra's of the same rank (rank, om, Mastra): "
            f"{early or 'none'}",
        ),
    ]


def _raw_tail_rule(kind: str, comparison: dict[str, Any]) -> list[Finding]:
    """om observes all but a raw tail (Mastra: everything), so it observes less each time, is back at the
    threshold sooner, and observes at least as often, each no later than Mastra's of the same rank."""
    om, mastra = comparison["syncObservations"]["om"], comparison["syncObservations"]["mastra"]
    tails = [o["windowAfter"] for o in om]
    late = [
        (k, o["turn"], m["turn"])
        for k, (o, m) in enumerate(zip(om, mastra, strict=False))
        if o["turn"] > m["turn"]
    ]
    return [
        Finding(
            kind,
            TAIL,
            all(t > 0 for t in tails) and all(m["windowAfter"] == 0 for m in mastra),
            f"window after: om {tails}, Mastra {[m['windowAfter'] for m in mastra]}",
        ),
        Finding(
            kind,
            TAIL,
            bool(om) and bool(mastra) and om[0]["tokensObserved"] < mastra[0]["tokensObserved"],
            f"first observation took: om {om[0]['tokensObserved'] if om else None}, "
            f"Mastra {mastra[0]['tokensObserved'] if mastra else None}",
        ),
        Finding(
            kind,
            TAIL,
            len(om) >= len(mastra) and not late,
            f"count: om {len(om)}, Mastra {len(mastra)}; "
            f"later than Mastra's of the same rank: {late or 'none'}",
        ),
    ]


def _boundary_rule(kind: str, comparison: dict[str, Any]) -> list[Finding]:
    """Both engines buffer once per interval of growth; the turns differ because om decides at every
    commit and keeps the boundary where the request was made, where Mastra moves it to the finished chunk's
    size. The number of chunks stays within a tenth of Mastra's."""
    om, mastra = comparison["turnsWith"][kind]["om"], comparison["turnsWith"][kind]["mastra"]
    slack = max(2, len(mastra) // 10)
    return [
        Finding(
            kind,
            BOUNDARY,
            abs(len(om) - len(mastra)) <= slack,
            f"buffer runs: om {len(om)}, Mastra {len(mastra)} (allowed difference {slack})",
        )
    ]


def _reflection_rule(kind: str, comparison: dict[str, Any]) -> list[Finding]:
    """A reflection starts in the commit chain of the observation that took the log over its threshold,
    so its turn moves with the observation turns; om never reflects more often than Mastra."""
    om, mastra = comparison["turnsWith"][kind]["om"], comparison["turnsWith"][kind]["mastra"]
    observed = set(comparison["turnsWith"]["observationActivation"]["om"]) | set(
        comparison["turnsWith"]["syncObservation"]["om"]
    )
    return [
        Finding(kind, REFLECTION, len(om) <= len(mastra), f"count: om {len(om)}, Mastra {len(mastra)}"),
        Finding(
            kind,
            REFLECTION,
            set(om) <= observed,
            f"om turns {om}; om observation turns among them: {sorted(set(om) & observed)}",
        ),
    ]


_RULES = {
    "observationBuffering": (_first_turn_rule, _boundary_rule),
    "observationActivation": (_first_turn_rule, _fresh_count_rule),
    "syncObservation": (_first_turn_rule, _raw_tail_rule),
    "reflectionBuffering": (_reflection_rule,),
    "reflectionActivation": (_reflection_rule,),
    "syncReflection": (_reflection_rule,),
}


def observed_twice(run: Replay) -> list[str]:
    """Every message not observed exactly once: each seq through the final cursor must lie in exactly one
    activated chunk or synchronous observation, and none after it in any."""
    found = coverage(run)
    counts: dict[int, list[str]] = {seq: [] for seq in found.messages}
    for kind, cycle, first, last, turn in found.ranges:
        for seq in range(first, last + 1):
            counts.setdefault(seq, []).append(f"{kind} {cycle} (turn {turn})")
    problems = []
    for seq, by in sorted(counts.items()):
        expected = 1 if seq <= found.observed_through else 0
        if len(by) != expected:
            problems.append(f"message seq {seq} observed {len(by)} times (expected {expected}): {by}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.parity", description=__doc__)
    parser.add_argument("--dir", type=Path, default=FIXTURES, help="a folder with traces/ and mastra/")
    parser.add_argument("traces", nargs="*", default=list(TRACES))
    args = parser.parse_args(argv)
    report = []
    for name in args.traces:
        comparison = compare(name, replay(name, load_trace(name, args.dir)), load_mastra(name, args.dir))
        comparison["differences"] = [asdict(f) for f in differences(comparison)]
        report.append(comparison)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
