"""``om-local/extractive``: a deterministic model that observes, reflects and extracts with no network.

It reads the requests built by ``om_core.domain.prompts`` by that module's own headings, markers and line
templates, and answers in the Observer/Reflector output format: user facts near-verbatim, questions,
assistant outcomes and tool results, relative dates resolved against the transcript's dates. The Reflector
condenses by priority and compression level while keeping every fact that carries a name or a number.

Everything here is pure Python and imports nothing of litellm: the litellm handler that wraps ``respond``,
and its registration, live in ``om_local_llm``, which imports this module and is never imported by it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from om_core.domain.config import DEFAULT_TOKENIZER
from om_core.domain.observation_log import is_truncation_marker
from om_core.domain.prompts import (
    EXTRACTOR_END_MARKER,
    EXTRACTOR_SECTIONS_LINE_PREFIX,
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_VALUE_HEADING,
    PRIOR_METADATA_HEADING,
    REFLECTOR_END_MARKER,
    REFLECTOR_LEVEL_LINE,
    REFLECTOR_OBSERVATIONS_HEADING,
    REFLECTOR_TARGET_LINE,
    TRANSCRIPT_END_MARKER,
)
from om_core.domain.thresholds import MAX_COMPRESSION_LEVEL
from om_core.domain.tokens import make_tokenizer

EMPTY_OBSERVATIONS = "<observations>\n</observations>"

OutputMode = Literal["normal", "empty", "degenerate"]
_OUTPUT_MODES: tuple[OutputMode, ...] = ("normal", "empty", "degenerate")


class OmLocalRequestError(ValueError):
    """The request cannot be answered (bad options, unrecognised prompt): retrying cannot help."""


class OmLocalTransientError(RuntimeError):
    """An injected transient failure (``errorRate``); ``status`` is the HTTP status it imitates."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


# --- tokens ----------------------------------------------------------------------------------------------


def count_tokens(text: str) -> int:
    """Tokens by the service's default tokenizer, so Reflector targets land where they are measured (the
    encoding is loaded offline, once per process, by ``om_core.domain.tokens``)."""
    return make_tokenizer(DEFAULT_TOKENIZER).count(text)


# --- dates and sentences ---------------------------------------------------------------------------------

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_INDEX = {name.lower(): i + 1 for i, name in enumerate(_MONTHS)}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
_COUNT = r"(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"


def format_date(day: date) -> str:
    """``Jan 6, 2026``: the form of ``Date:`` headers and ``(meaning …)`` annotations."""
    return f"{_MONTHS[day.month - 1]} {day.day}, {day.year}"


def _parse_month_day_year(month: str, day: str, year: str) -> date | None:
    index = _MONTH_INDEX.get(month[:3].lower())
    if index is None:
        return None
    try:
        return date(int(year), index, int(day))
    except ValueError:
        return None


def _add_months(day: date, months: int) -> date:
    month_index = day.year * 12 + day.month - 1 + months
    year, month = divmod(month_index, 12)
    for candidate in (day.day, 30, 29, 28):
        try:
            return date(year, month + 1, candidate)
        except ValueError:
            continue
    raise AssertionError("every month has 28 days")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _shift(day: date, amount: int, unit: str) -> date:
    if unit.startswith("month"):
        return _add_months(day, amount)
    return day + timedelta(days=amount * (7 if unit.startswith("week") else 1))


_RELATIVE_PATTERNS: tuple[tuple[re.Pattern[str], str, Callable[[re.Match[str], date], date]], ...] = (
    (re.compile(r"\bday after tomorrow\b", re.I), "meaning", lambda m, d: d + timedelta(days=2)),
    (re.compile(r"\bday before yesterday\b", re.I), "meaning", lambda m, d: d - timedelta(days=2)),
    (re.compile(r"(?<!after )\btomorrow\b", re.I), "meaning", lambda m, d: d + timedelta(days=1)),
    (re.compile(r"(?<!before )\byesterday\b", re.I), "meaning", lambda m, d: d - timedelta(days=1)),
    (
        re.compile(rf"\bin {_COUNT} (days?|weeks?|months?)\b", re.I),
        "meaning",
        lambda m, d: _shift(d, _count(m.group(1).lower()), m.group(2).lower()),
    ),
    (
        re.compile(rf"\b{_COUNT} (days?|weeks?|months?) ago\b", re.I),
        "meaning",
        lambda m, d: _shift(d, -_count(m.group(1).lower()), m.group(2).lower()),
    ),
    (
        re.compile(rf"\b(next|this|on|last) ({'|'.join(_WEEKDAYS)})\b", re.I),
        "meaning",
        lambda m, d: _weekday_from(d, m.group(1).lower(), m.group(2).lower()),
    ),
    (re.compile(r"\bnext week\b", re.I), "estimated", lambda m, d: d + timedelta(days=7)),
    (re.compile(r"\blast week\b", re.I), "estimated", lambda m, d: d - timedelta(days=7)),
    (re.compile(r"\bnext month\b", re.I), "estimated", lambda m, d: _add_months(d, 1)),
    (re.compile(r"\blast month\b", re.I), "estimated", lambda m, d: _add_months(d, -1)),
)


def _weekday_from(day: date, qualifier: str, weekday: str) -> date:
    target = _WEEKDAYS.index(weekday)
    if qualifier == "last":
        return day - timedelta(days=(day.weekday() - target - 1) % 7 + 1)
    # "next Friday" and "this Friday" both name the first Friday after today: the reading most people use
    # when today is early in the week, and the only one that never skips a week.
    return day + timedelta(days=(target - day.weekday() - 1) % 7 + 1)


def resolve_relative_dates(text: str, day: date) -> str:
    """``(meaning Jan 6, 2026)``-style annotations for the relative dates in ``text``, or ``""``."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern, kind, resolve in _RELATIVE_PATTERNS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            taken.append(match.span())
            found.append((match.start(), f"{kind} {format_date(resolve(match, day))}"))
    return " ".join(f"({note})" for _, note in sorted(found))


_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "prof", "no"}
)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def split_sentences(text: str) -> list[str]:
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*", text):
        start = 0
        for match in _SENTENCE_END.finditer(paragraph):
            head = paragraph[start : match.start()].rstrip(".!?\"')]")
            last_word = head.rsplit(maxsplit=1)[-1].lower() if head.split() else ""
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
            sentences.append(paragraph[start : match.end()].strip())
            start = match.end()
        sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*|\d[\d,.:/-]*")
_FILLER_WORDS = _word_set(
    """ok okay k kk thanks thank thx ty you lol lmao rofl haha hah hehe hi hello hey yo sure cool great
    nice awesome sounds sound good yes yeah yep yup no nope nah alright right got it bye see ya cheers
    perfect wow hmm um uh oh ah please np welcome morning evening afternoon night gotcha fine indeed
    exactly agreed that that's thats works will do much so very a lot of course certainly absolutely
    happy to help glad understood noted makes sense"""
)
_STOPWORDS = _word_set(
    """a an the and or but if then so to of in on at for with from by about as into over after before
    is are was were be been being am do does did have has had i me my mine we our us you your he she it
    they them their this that these those there here what which who whom whose when where why how can
    could would should will shall may might must not no yes just also very really please let lets let's
    i'm i've i'd i'll it's that's what's don't can't want need like know tell help make get give some any
    all more most other such only own same than too s t"""
)
_FIRST_PERSON_FACT = re.compile(
    r"\b(my|mine|our|ours|we|we're|we've|we'll|call me|remember|i'm|im|i am|i've|i have|i had|i was|"
    r"i'll|i will|i'd|i live|i work|i like|i love|i hate|i prefer|i need|i want|i own|i use|i moved|"
    r"i bought|i started|i got|i usually|i always|i never|i plan|i'm planning|born)\b",
    re.I,
)
_NOT_PROPER = frozenset({"I", "I'm", "I've", "I'll", "I'd", "User", "Assistant", "Tool", "OK", "Ok"})
_CAPITALISED = re.compile(r"\b[A-Z][\w'’&-]*")
_QUESTION_START = re.compile(
    r"^(what|what's|how|why|when|where|who|which|whose|is|are|was|were|do|does|did|can|could|would|"
    r"should|will|shall|may|have|has)\b",
    re.I,
)
_REQUEST_START = re.compile(
    r"^(please|pls|let's|lets|help|write|create|make|build|find|show|give|tell|explain|list|add|remove|"
    r"fix|update|change|plan|book|schedule|remind|send|draft|summari[sz]e|translate|check|compare|"
    r"suggest|recommend|calculate|generate|set|draft|can you|could you|would you|i need you|i want you)\b",
    re.I,
)
_COMPLETION = re.compile(
    r"\b(done|completed?|fixed|finished|resolved|deployed|merged|implemented|booked|scheduled|sent|saved)\b"
    r"|\bi(?:'ve| have) (?:now |just |already )?\w+ed\b",
    re.I,
)
_NEGATION = re.compile(r"\b(not|n't|never|couldn't|can't|unable|failed)\b|n't\b", re.I)


def _content_words(sentence: str) -> list[str]:
    return [w for w in _WORD.findall(sentence) if w.lower().strip("'’") not in _STOPWORDS]


def is_filler(sentence: str) -> bool:
    """Greetings, thanks and acknowledgements: nothing worth remembering."""
    words = [w.lower().strip("'’") for w in _WORD.findall(sentence)]
    return not words or all(w in _FILLER_WORDS or w in _STOPWORDS for w in words)


def _proper_nouns(text: str) -> list[str]:
    words = list(_CAPITALISED.finditer(text))
    return [
        m.group(0)
        for m in words
        if m.start() > 0 and not re.search(r"[.!?:]\s*$", text[: m.start()]) and m.group(0) not in _NOT_PROPER
    ]


def carries_fact_detail(text: str) -> bool:
    """Names and numbers: the details a condensed memory must never lose."""
    return bool(re.search(r"\d", text)) or bool(_proper_nouns(text))


def _clip_words(sentence: str, limit: int) -> str:
    words = sentence.split()
    return sentence if len(words) <= limit else " ".join(words[:limit]).rstrip(",;:") + "…"


def _looks_like_code(line: str) -> bool:
    symbols = sum(1 for ch in line if ch in "{}[]();=<>$#\\|`")
    return len(line) > 0 and symbols / len(line) > 0.08


# --- request sections ------------------------------------------------------------------------------------


def _template_line(template: str, value: str) -> re.Pattern[str]:
    """A line of a prompt template with one ``{field}``, as a pattern capturing the field's ``value``."""
    head, tail = re.split(r"\{\w+\}", template)
    return re.compile(rf"^{re.escape(head)}({value}){re.escape(tail)}", re.M)


_TARGET_LINE = _template_line(REFLECTOR_TARGET_LINE, r"[\d,_]+")
_LEVEL_LINE = _template_line(REFLECTOR_LEVEL_LINE, r"\d")
# where the observations end: the first of these lines
_REFLECTOR_INPUT_ENDS = (
    REFLECTOR_TARGET_LINE.partition("{")[0],
    REFLECTOR_LEVEL_LINE.partition("{")[0],
    REFLECTOR_END_MARKER,
)


def _section(text: str, heading: str, ends: Sequence[str]) -> str | None:
    match = re.search(rf"^{re.escape(heading)}\s*$", text, re.I | re.M)
    if match is None:
        return None
    rest = text[match.end() :]
    stop = len(rest)
    for end in ends:
        found = re.search(rf"^{re.escape(end)}", rest, re.I | re.M)
        if found is not None:
            stop = min(stop, found.start())
    return rest[:stop].strip("\n")


def _metadata_values(metadata: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in metadata.splitlines():
        match = re.match(r"^\s*[-*]\s*([^:()]+?)(?:\s*\([^)]*\))?\s*:\s*(.+)$", line)
        if match:
            values[match.group(1).strip().lower()] = match.group(2).strip()
    return values


# --- transcript ------------------------------------------------------------------------------------------

_DATE_HEADER = re.compile(r"^([A-Z][a-z]{2}) (\d{1,2}),? (\d{4}):\s*$")
_PART_LINE = re.compile(
    r"^(User|Assistant|System|Tool|Reasoning|Image|File|Tool (?:Call|Result|Error|Denied) [\w.:-]+?)"
    r"(?: \((\d{1,2}):(\d{2})\s*([AP]M)\))?:(?: (.*))?$"
)
_THREAD_OPEN = re.compile(r'^<thread id="([^"]*)">\s*$')


@dataclass(slots=True)
class _Part:
    title: str
    day: date | None
    clock: str
    text: str


@dataclass(slots=True)
class _Thread:
    thread_id: str | None
    parts: list[_Part] = field(default_factory=list)


def parse_transcript(transcript: str) -> list[_Thread]:
    """Parts per thread. Unindented lines that are neither headers nor parts are gap markers."""
    threads: list[_Thread] = [_Thread(None)]
    day: date | None = None
    clock = "00:00"
    current: _Part | None = None
    for raw in transcript.splitlines():
        line = raw.rstrip()
        opened = _THREAD_OPEN.match(line.strip())
        if opened:
            threads.append(_Thread(opened.group(1)))
            day, clock, current = None, "00:00", None
            continue
        if line.strip() == "</thread>":
            threads.append(_Thread(None))
            current = None
            continue
        header = _DATE_HEADER.match(line)
        if header:
            day = _parse_month_day_year(*header.groups()) or day
            current = None
            continue
        part = _PART_LINE.match(line)
        if part:
            title, hour, minute, meridiem, text = part.groups()
            if hour is not None:
                clock = f"{int(hour) % 12 + (12 if meridiem == 'PM' else 0):02d}:{minute}"
            current = _Part(title, day, clock, text or "")
            threads[-1].parts.append(current)
        elif current is not None and (raw.startswith((" ", "\t")) or not line):
            current.text += "\n" + line.strip()
        else:
            current = None
    return [t for t in threads if t.parts]


# --- observer --------------------------------------------------------------------------------------------

Priority = Literal["🔴", "🟡", "🟢", "✅"]
_MAX_LINES_PER_PART = 8


@dataclass(slots=True)
class _Observation:
    day: date | None
    clock: str
    priority: Priority
    text: str


@dataclass(slots=True)
class _ThreadNotes:
    observations: list[_Observation] = field(default_factory=list)
    last_request: str | None = None
    last_request_kind: Literal["question", "request"] | None = None
    first_topic: str | None = None
    last_speaker: str | None = None
    assistant_asked: bool = False
    user_sentences: list[str] = field(default_factory=list)


def _with_dates(text: str, day: date | None) -> str:
    note = resolve_relative_dates(text, day) if day is not None else ""
    return f"{text} {note}" if note else text


def classify_user_sentence(sentence: str) -> Literal["fact", "question", "request", "statement", "filler"]:
    if is_filler(sentence):
        return "filler"
    if sentence.rstrip("\"')").endswith("?") or (
        _QUESTION_START.match(sentence) and len(sentence.split()) <= 12 and not sentence.endswith(".")
    ):
        return "question"
    if _FIRST_PERSON_FACT.search(sentence) or carries_fact_detail(sentence):
        return "fact"
    if _REQUEST_START.match(sentence):
        return "request"
    return "statement"


def _observe_user(part: _Part, notes: _ThreadNotes) -> None:
    added = 0
    for sentence in split_sentences(part.text):
        if added >= _MAX_LINES_PER_PART or _looks_like_code(sentence):
            continue
        kind = classify_user_sentence(sentence)
        if kind == "filler":
            continue
        notes.user_sentences.append(sentence)
        if kind in ("question", "request"):
            notes.last_request = sentence
            notes.last_request_kind = "question" if kind == "question" else "request"
        if notes.first_topic is None and kind in ("question", "request"):
            notes.first_topic = sentence
        priority: Priority
        if kind == "fact":
            priority, text = "🔴", f"User said: {sentence}"
        elif kind == "question":
            priority, text = "🟡", f"User asked: {sentence}"
        elif kind == "request":
            priority, text = "🔴", f"User requested: {sentence}"
        else:
            priority, text = "🟢", f"User said: {sentence}"
        notes.observations.append(_Observation(part.day, part.clock, priority, _with_dates(text, part.day)))
        added += 1


def _observe_assistant(part: _Part, notes: _ThreadNotes) -> None:
    sentences = [s for s in split_sentences(part.text) if not is_filler(s) and not _looks_like_code(s)]
    if not sentences:
        return
    notes.assistant_asked = sentences[-1].rstrip("\"')").endswith("?")
    done = next(
        (s for s in sentences if _COMPLETION.search(s) and not _NEGATION.search(s) and not s.endswith("?")),
        None,
    )
    priority: Priority
    if done is not None:
        text, priority = f"Assistant: {_clip_words(done, 25)}", "✅"
    else:
        text, priority = f"Assistant: {_clip_words(sentences[0], 20)}", "🟢"
    notes.observations.append(_Observation(part.day, part.clock, priority, _with_dates(text, part.day)))


def _first_line(text: str, limit: int) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit].rstrip() + "…"


def _observe_tool(part: _Part, notes: _ThreadNotes, pending: dict[str, _Observation]) -> None:
    kind, _, name = part.title[len("Tool ") :].partition(" ")
    if kind == "Call":
        observation = _Observation(part.day, part.clock, "🟡", f"Called {name}({_first_line(part.text, 80)})")
        pending[name] = observation
        notes.observations.append(observation)
        return
    outcome = {
        "Result": f"returned {_first_line(part.text, 120)}",
        "Error": f"failed: {_first_line(part.text, 120)}",
        "Denied": "was denied",
    }[kind]
    call = pending.pop(name, None)
    if call is not None:
        call.text = f"{call.text} {outcome}"
    else:
        notes.observations.append(_Observation(part.day, part.clock, "🟡", f"Tool {name} {outcome}"))


def _observe_thread(thread: _Thread) -> _ThreadNotes:
    notes = _ThreadNotes()
    pending: dict[str, _Observation] = {}
    for part in thread.parts:
        if part.title == "User":
            if re.fullmatch(r"\[(Image|File) #\d+: [^\]]*\]", part.text.strip()):
                notes.observations.append(
                    _Observation(part.day, part.clock, "🟡", f"User shared {part.text.strip()}")
                )
            else:
                _observe_user(part, notes)
        elif part.title == "Assistant":
            _observe_assistant(part, notes)
        elif part.title.startswith("Tool "):
            _observe_tool(part, notes, pending)
        elif part.title in ("Image", "File"):
            notes.observations.append(_Observation(part.day, part.clock, "🟡", f"Shared {part.text.strip()}"))
        else:
            # Reasoning, system text and tool-role text are the assistant's machinery, not memories.
            continue
        notes.last_speaker = "assistant" if part.title != "User" else "user"
    return notes


def _render_observation_groups(observations: Iterable[_Observation]) -> list[str]:
    lines: list[str] = []
    current_day: date | None = None
    first = True
    for obs in observations:
        if first or obs.day != current_day:
            if obs.day is not None:
                if not first:
                    lines.append("")
                lines.append(f"Date: {format_date(obs.day)}")
            current_day, first = obs.day, False
        lines.append(f"* {obs.priority} ({obs.clock}) {obs.text}")
    return lines


def _thread_title(notes: _ThreadNotes) -> str | None:
    # What the user first asked for names a conversation better than the facts they opened with.
    topic = notes.first_topic or (notes.user_sentences[0] if notes.user_sentences else None)
    if topic is None:
        return None
    words = [w for w in _content_words(topic) if not w[0].isdigit()][:4]
    title = " ".join(w if w[0].isupper() else w.capitalize() for w in words)
    return title if len(title) >= 3 else None


def _current_task(notes: _ThreadNotes, prior: dict[str, str]) -> str | None:
    if notes.last_request is not None:
        return f"Primary: {notes.last_request}"
    return prior.get("current task")


def _suggested_response(notes: _ThreadNotes) -> str:
    if notes.last_speaker == "user" and notes.last_request is not None:
        verb = "Answer the user's question" if notes.last_request_kind == "question" else "Help the user with"
        return f"{verb}: {_clip_words(notes.last_request, 20)}"
    if notes.last_speaker == "user":
        return "Acknowledge what the user just shared and continue the conversation."
    if notes.assistant_asked:
        return "Wait for the user's answer to the assistant's last question."
    return "Continue from the assistant's last reply; wait for the user's next message."


def _inline_extractors(system_prompt: str) -> dict[str, str]:
    """slug → instruction text, for the slugs named on the ``Extractor sections:`` line."""
    entries = {
        m.group(1): m.group(2)
        for m in re.finditer(
            rf"^## <([\w-]+)>:?(.*(?:\n(?!#|{re.escape(EXTRACTOR_SECTIONS_LINE_PREFIX)}).*)*)",
            system_prompt,
            re.M,
        )
    }
    slugs: list[str] = []
    for line in system_prompt.splitlines():
        if line.strip().startswith(EXTRACTOR_SECTIONS_LINE_PREFIX):
            listed = line.strip()[len(EXTRACTOR_SECTIONS_LINE_PREFIX) :]
            slugs += [s.strip().strip("<>") for s in listed.split(",") if s.strip()]
    return {slug: entries.get(slug, "") for slug in dict.fromkeys(slugs)}


def _keywords(*texts: str) -> list[str]:
    generic = {
        "extract",
        "extractor",
        "value",
        "values",
        "section",
        "sections",
        "write",
        "user's",
        "users",
        "user",
    }
    generic |= {"assistant", "conversation", "mentioned", "mentions"}
    words: list[str] = []
    for text in texts:
        for word in re.split(r"[\s_\-/,.;:()\"'“”]+", text.lower()):
            if len(word) >= 4 and word not in _STOPWORDS and word not in generic:
                words.append(word)
    return list(dict.fromkeys(words))


def _stem(word: str) -> str:
    stem = re.sub(r"(?:'s|’s|ing|ed|es|s|ly)$", "", word)
    return stem if len(stem) >= 4 else word[:4]


def _matching_sentence(sentences: Sequence[str], keywords: Sequence[str]) -> str | None:
    """The latest sentence that mentions a keyword, matching on word stems (``lives`` finds ``live``)."""
    patterns = [re.compile(rf"\b{re.escape(_stem(k))}", re.I) for k in keywords]
    for sentence in reversed(sentences):
        if any(p.search(sentence) for p in patterns):
            return sentence
    return None


def observe_transcript(user_prompt: str, system_prompt: str) -> str:
    """The Observer's reply to a request built by ``om_core.domain.prompts.build_observer_request``."""
    transcript = _section(user_prompt, OBSERVER_HISTORY_HEADING, [TRANSCRIPT_END_MARKER])
    if transcript is None:
        raise OmLocalRequestError(f"observer request without a {OBSERVER_HISTORY_HEADING!r} section")
    metadata = _section(user_prompt, PRIOR_METADATA_HEADING, [OBSERVER_HISTORY_HEADING]) or ""
    prior = _metadata_values(metadata)
    wants_title = re.search(r"^<thread-title>\s*$", system_prompt, re.M) is not None
    threads = [(thread.thread_id, _observe_thread(thread)) for thread in parse_transcript(transcript)]
    multi = any(thread_id is not None for thread_id, _ in threads)

    def hints(notes: _ThreadNotes) -> list[str]:
        lines: list[str] = []
        task = _current_task(notes, {} if multi else prior)
        if task:
            lines += ["<current-task>", task, "</current-task>"]
        lines += ["<suggested-response>", _suggested_response(notes), "</suggested-response>"]
        title = _thread_title(notes) if wants_title and "thread title" not in prior else None
        if title:
            lines += ["<thread-title>", title, "</thread-title>"]
        return lines

    out = ["<observations>"]
    tail: list[str] = []
    if multi:
        for thread_id, notes in threads:
            if thread_id is None or not notes.observations:
                continue
            out += [f'<thread id="{thread_id}">', *_render_observation_groups(notes.observations)]
            out += [*hints(notes), "</thread>"]
    else:
        single = threads[0][1] if threads else _ThreadNotes()
        out += _render_observation_groups(single.observations)
        if single.observations:
            tail = hints(single)
    out.append("</observations>")

    user_sentences = [s for _, notes in threads for s in notes.user_sentences]
    for slug, instructions in _inline_extractors(system_prompt).items():
        value = _matching_sentence(user_sentences, _keywords(slug, instructions))
        if value is None:
            value = next((v for k, v in prior.items() if k == slug.lower()), None)
        if value is not None:
            tail += [f"<{slug}>", value, f"</{slug}>"]
    return "\n".join(out + tail)


# --- reflector -------------------------------------------------------------------------------------------

_OBS_LINE = re.compile(r"^\s*[*-]\s*(🔴|🟡|🟢|✅)\s*(?:\((\d{1,2}:\d{2})\)\s*)?(.*)$")
_DATE_LINE = re.compile(r"^Date:\s*([A-Z][a-z]{2})[a-z]*\.? (\d{1,2}),? (\d{4})")
_ANNOTATION = re.compile(r"\s*\((?:meaning|estimated) [^)]*\)")
_SPEAKER_PREFIX = re.compile(r"^((?:User|Assistant)(?: said| asked| requested)?:\s*)")
_CLAUSE_SEPARATOR = re.compile(
    r"(,\s+|;\s+|\s+[-–—]\s+|\s+(?:and|but|so|because|which|although|though|while|whereas)\s+)"
)
# Unmarked lines rank with 🟡: free text someone wrote into the log may matter, but less than a fact.
_RANK = {"✅": 4, "🔴": 3, "🟡": 2, "": 2, "🟢": 1}


@dataclass(slots=True)
class _Line:
    priority: str
    clock: str
    text: str
    order: int
    children: list[str] = field(default_factory=list)
    shortened: bool = False

    def render(self) -> list[str]:
        if self.priority:
            head = (
                f"* {self.priority} ({self.clock}) {self.text}"
                if self.clock
                else f"* {self.priority} {self.text}"
            )
        else:
            head = self.text
        return [head, *self.children]


@dataclass(slots=True)
class _Group:
    day: date | None
    lines: list[_Line] = field(default_factory=list)


@dataclass(slots=True)
class _Segment:
    thread_id: str | None
    groups: list[_Group] = field(default_factory=list)

    def lines(self) -> Iterable[_Line]:
        for group in self.groups:
            yield from group.lines


def _parse_observation_log(text: str) -> list[_Segment]:
    segments = [_Segment(None)]
    order = 0
    last: _Line | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line in ("<observations>", "</observations>") or is_truncation_marker(line):
            continue
        opened = _THREAD_OPEN.match(line)
        if opened or line == "</thread>":
            segments.append(_Segment(opened.group(1) if opened else None))
            last = None
            continue
        dated = _DATE_LINE.match(line)
        if dated:
            segments[-1].groups.append(_Group(_parse_month_day_year(*dated.groups())))
            last = None
            continue
        if not segments[-1].groups:
            segments[-1].groups.append(_Group(None))
        marked = _OBS_LINE.match(raw)
        if raw[:1].isspace() and last is not None:
            last.children.append(raw.rstrip())
            continue
        order += 1
        if marked:
            last = _Line(marked.group(1), marked.group(2) or "", marked.group(3).strip(), order)
        else:
            last = _Line("", "", line, order)
        segments[-1].groups[-1].lines.append(last)
    return [s for s in segments if any(g.lines for g in s.groups)]


def _normalised(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", _ANNOTATION.sub("", text).lower()).split())


def _merge_and_dedupe(segment: _Segment) -> None:
    by_day: dict[date | None, _Group] = {}
    for group in segment.groups:
        by_day.setdefault(group.day, _Group(group.day)).lines.extend(group.lines)
    groups = sorted(by_day.values(), key=lambda g: (g.day is not None, g.day or date.min))
    kept: dict[str, _Line] = {}
    for group in groups:
        unique: list[_Line] = []
        for line in group.lines:
            key = _normalised(line.text)
            seen = kept.get(key)
            if seen is not None:
                if _RANK[line.priority] > _RANK[seen.priority]:
                    seen.priority = line.priority
                continue
            kept[key] = line
            unique.append(line)
        group.lines = unique
    # A fact restated with more detail makes the shorter statement redundant.
    important = [line for line in kept.values() if line.priority in ("🔴", "✅")]
    keys = {id(line): _normalised(line.text) for line in important}
    redundant = {
        id(short)
        for short in important
        for long in important
        if short is not long
        and short.priority == long.priority
        and len(keys[id(short)]) < len(keys[id(long)])
        and keys[id(short)] in keys[id(long)]
    }
    for group in groups:
        group.lines = [line for line in group.lines if id(line) not in redundant]
    segment.groups = [g for g in groups if g.lines]


def essential_clause(text: str) -> str:
    """The clauses of an observation that carry names, numbers or first-person facts, annotations kept."""
    annotations = "".join(m.group(0) for m in _ANNOTATION.finditer(text))
    body = _ANNOTATION.sub("", text).strip()
    prefix_match = _SPEAKER_PREFIX.match(body)
    prefix = prefix_match.group(1) if prefix_match else ""
    pieces = _CLAUSE_SEPARATOR.split(body[len(prefix) :])
    clauses, separators = pieces[0::2], pieces[1::2]
    keep = [
        i
        for i, clause in enumerate(clauses)
        if re.search(r"\d", clause) or _proper_nouns(" " + clause) or _FIRST_PERSON_FACT.search(clause)
    ] or [0]
    out = clauses[keep[0]]
    for previous, index in itertools.pairwise(keep):
        out += (separators[index - 1] if index == previous + 1 else ", ") + clauses[index]
    return (prefix + out.strip().rstrip(",;")).strip() + annotations


def _render_segments(segments: Sequence[_Segment]) -> str:
    out = ["<observations>"]
    for segment in segments:
        if segment.thread_id is not None:
            out.append(f'<thread id="{segment.thread_id}">')
        for index, group in enumerate(segment.groups):
            if index:
                out.append("")
            if group.day is not None:
                out.append(f"Date: {format_date(group.day)}")
            for line in group.lines:
                out += line.render()
        if segment.thread_id is not None:
            out.append("</thread>")
    out.append("</observations>")
    return "\n".join(out)


def _prune(segments: list[_Segment]) -> list[_Segment]:
    for segment in segments:
        segment.groups = [g for g in segment.groups if g.lines]
    return [s for s in segments if s.groups]


def _apply_level(segments: list[_Segment], level: int) -> None:
    for segment in segments:
        newest = segment.groups[-1] if segment.groups else None
        for group in segment.groups:
            kept: list[_Line] = []
            for line in group.lines:
                if line.priority == "🟢":
                    continue
                if _RANK[line.priority] == 2 and (level >= 3 or (level == 2 and group is not newest)):
                    continue
                if level >= 3:
                    line.children = []
                    if line.priority == "🔴" or (level >= 4 and line.priority == "✅"):
                        line.text, line.shortened = essential_clause(line.text), True
                kept.append(line)
            group.lines = kept


def _drop_in_order(
    segments: list[_Segment], candidates: list[_Line], goal: int, total: int
) -> tuple[list[_Segment], int]:
    doomed: set[int] = set()
    for line in candidates:
        if total < goal:
            break
        doomed.add(id(line))
        total -= sum(count_tokens(text) + 1 for text in line.render())
    for segment in segments:
        for group in segment.groups:
            group.lines = [line for line in group.lines if id(line) not in doomed]
    segments = _prune(segments)
    return segments, count_tokens(_render_segments(segments))


def _fit_to_target(segments: list[_Segment], target: int) -> list[_Segment]:
    # Aim under the target: the caller may count with a tokenizer that disagrees with ours by a little.
    goal = max(1, int(target * 0.9))
    total = count_tokens(_render_segments(segments))
    if total < goal:
        return segments

    def oldest_first(lines: Iterable[_Line]) -> list[_Line]:
        return sorted(lines, key=lambda line: line.order)

    every = [line for s in segments for line in s.lines()]
    segments, total = _drop_in_order(
        segments, oldest_first(line for line in every if _RANK[line.priority] <= 2), goal, total
    )
    for step in ("children", "shorten"):
        if total < goal:
            return segments
        for line in (line for s in segments for line in s.lines()):
            if step == "children":
                line.children = []
            elif not line.shortened:
                line.text, line.shortened = essential_clause(line.text), True
        total = count_tokens(_render_segments(segments))
    if total >= goal:
        unprotected = [
            line
            for s in segments
            for line in s.lines()
            if line.priority == "🔴" and not carries_fact_detail(line.text)
        ]
        segments, total = _drop_in_order(segments, oldest_first(unprotected), goal, total)
    return segments


def reflect_observations(user_prompt: str) -> str:
    """The Reflector's reply to a request built by ``om_core.domain.prompts.build_reflector_request``."""
    log = _section(user_prompt, REFLECTOR_OBSERVATIONS_HEADING, _REFLECTOR_INPUT_ENDS)
    if log is None:
        raise OmLocalRequestError(f"reflector request without a {REFLECTOR_OBSERVATIONS_HEADING!r} section")
    target_match = _TARGET_LINE.search(user_prompt)
    level_match = _LEVEL_LINE.search(user_prompt)
    target = int(re.sub(r"[,_]", "", target_match.group(1))) if target_match else None
    level = min(MAX_COMPRESSION_LEVEL, int(level_match.group(1))) if level_match else 0

    segments = _parse_observation_log(log)
    if not segments:
        return EMPTY_OBSERVATIONS
    newest_line = max((line for s in segments for line in s.lines()), key=lambda line: line.order)
    newest_day = next(g.day for s in segments for g in s.groups if newest_line in g.lines)
    for segment in segments:
        _merge_and_dedupe(segment)
    _apply_level(segments, level)
    segments = _prune(segments)
    if target is not None and segments:
        segments = _fit_to_target(segments, target)
    if not segments:
        # An empty reflection of a non-empty log would erase the memory; keep at least the latest line.
        segments = [_Segment(None, [_Group(newest_day, [newest_line])])]
    return _render_segments(segments)


# --- structured extraction -------------------------------------------------------------------------------


def _candidate_sentences(prompt: str) -> list[str]:
    """What the user said (transcript lines), else the observation lines, else every line."""
    previous = _section(prompt, PREVIOUS_VALUE_HEADING, ["## ", EXTRACTOR_END_MARKER])
    if previous is not None:
        prompt = prompt.replace(previous, "")
    said: list[str] = []
    for thread in parse_transcript(prompt):
        said += [s for part in thread.parts if part.title == "User" for s in split_sentences(part.text)]
    if said:
        return [s for s in said if not is_filler(s)]
    observed = [m.group(3) for m in map(_OBS_LINE.match, prompt.splitlines()) if m]
    if observed:
        return [_SPEAKER_PREFIX.sub("", _ANNOTATION.sub("", o)) for o in observed]
    return [s for s in split_sentences(prompt) if not s.startswith(("#", "(none)", "---"))]


def _previous_value(prompt: str) -> Any:
    raw = _section(prompt, PREVIOUS_VALUE_HEADING, ["## ", EXTRACTOR_END_MARKER])
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return None


def _schema_type(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        return next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    return None


def _value_for(schema: dict[str, Any], name: str, sentences: Sequence[str], previous: Any) -> Any:
    for union in ("anyOf", "oneOf"):
        options = [s for s in schema.get(union, []) if isinstance(s, dict) and s.get("type") != "null"]
        if options:
            return _value_for(options[0], name, sentences, previous)
    if "const" in schema:
        return schema["const"]
    keywords = _keywords(name, str(schema.get("description", "")))
    match = _matching_sentence(sentences, keywords) if keywords else None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        text = " ".join(sentences).lower()
        mentioned = [v for v in schema["enum"] if isinstance(v, str) and v.lower() in text]
        return mentioned[-1] if mentioned else (previous if previous in schema["enum"] else schema["enum"][0])
    kind = _schema_type(schema)
    if kind == "object":
        old = previous if isinstance(previous, dict) else {}
        required = set(schema.get("required", []))
        result: dict[str, Any] = {}
        for prop, sub in (schema.get("properties") or {}).items():
            value = _value_for(sub if isinstance(sub, dict) else {}, prop, sentences, old.get(prop))
            if prop in required or value not in (None, "", [], {}):
                result[prop] = value
        return result
    if kind == "array":
        raw_items = schema.get("items")
        items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {}
        found = [s for s in sentences if _matching_sentence([s], keywords)] if keywords else []
        if found and _schema_type(items) in ("string", None):
            return list(dict.fromkeys(found))[-int(schema.get("maxItems", 5)) :]
        if isinstance(previous, list):
            return previous
        return [_value_for(items, name, sentences, None) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "string":
        return match if match is not None else (previous if isinstance(previous, str) else "")
    if kind in ("integer", "number"):
        number = re.search(r"-?\d+(?:\.\d+)?", match or "")
        if number is None:
            return previous if isinstance(previous, int | float) else schema.get("minimum", 0)
        value = float(number.group(0))
        value = max(value, schema.get("minimum", value))
        value = min(value, schema.get("maximum", value))
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        if match is None:
            return previous if isinstance(previous, bool) else False
        return not _NEGATION.search(match)
    return None


def extract_json(schema: dict[str, Any], prompt: str) -> str:
    """A JSON document valid for ``schema``, filled from what the prompt says, else the previous value."""
    sentences = _candidate_sentences(prompt)
    value = _value_for(schema, str(schema.get("title", "")), sentences, _previous_value(prompt))
    return json.dumps(value, ensure_ascii=False)


# --- the model -------------------------------------------------------------------------------------------

_DEGENERATE_BLOCK = "\n".join(
    f"* 🟡 (12:00) The assistant restated the same status update again, repetition {i} of the loop."
    for i in range(1, 6)
)
DEGENERATE_OUTPUT = (
    "<observations>\nDate: Jan 1, 2026\n" + "\n".join([_DEGENERATE_BLOCK] * 30) + "\n</observations>"
)


@dataclass(frozen=True, slots=True)
class OmLocalOptions:
    """``providerOptions.omLocal``: test behaviour any deployment can switch on."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    output: OutputMode = "normal"
    seed: int = 0
    # Set by the gateway per attempt, so a retried request draws a fresh but reproducible failure decision.
    attempt: int = 1

    @classmethod
    def from_mapping(cls, raw: Any) -> OmLocalOptions:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise OmLocalRequestError(f"providerOptions.omLocal must be an object, got {type(raw).__name__}")
        aliases = {
            "latencyMs": "latency_ms", "latency_ms": "latency_ms", "errorRate": "error_rate",
            "error_rate": "error_rate", "output": "output", "seed": "seed", "attempt": "attempt",
        }  # fmt: skip
        unknown = sorted(set(raw) - set(aliases))
        if unknown:
            raise OmLocalRequestError(
                f"providerOptions.omLocal: unknown option(s) {', '.join(unknown)}; "
                "known: latencyMs, errorRate, output, seed"
            )
        values = {aliases[key]: value for key, value in raw.items()}
        latency = values.get("latency_ms", 0.0)
        rate = values.get("error_rate", 0.0)
        output = values.get("output", "normal")
        seed = values.get("seed", 0)
        attempt = values.get("attempt", 1)
        if isinstance(latency, bool) or not isinstance(latency, int | float) or latency < 0:
            raise OmLocalRequestError(
                f"providerOptions.omLocal.latencyMs must be a number ≥ 0, got {latency!r}"
            )
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise OmLocalRequestError(f"providerOptions.omLocal.errorRate must be within 0..1, got {rate!r}")
        if output not in _OUTPUT_MODES:
            raise OmLocalRequestError(
                f"providerOptions.omLocal.output must be one of {', '.join(_OUTPUT_MODES)}, got {output!r}"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise OmLocalRequestError(f"providerOptions.omLocal.seed must be an integer, got {seed!r}")
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise OmLocalRequestError(f"omLocal attempt must be an integer ≥ 1, got {attempt!r}")
        return cls(float(latency), float(rate), output, seed, attempt)


@dataclass(frozen=True, slots=True)
class OmLocalReply:
    text: str
    input_tokens: int
    output_tokens: int


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", ""))
            for item in content
            if isinstance(item, dict) and item.get("type") == "text"
        )
    return ""


def request_fingerprint(messages: Sequence[dict[str, Any]], response_format: Any) -> str:
    payload = json.dumps({"messages": messages, "format": response_format}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def respond(
    messages: Sequence[dict[str, Any]],
    options: OmLocalOptions,
    *,
    response_format: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> OmLocalReply:
    """Answer one request: wait ``latencyMs``, maybe fail (``errorRate``), then observe/reflect/extract."""
    if options.latency_ms > 0:
        sleep(options.latency_ms / 1000)
    system = "\n\n".join(_message_text(m) for m in messages if m.get("role") == "system")
    user = "\n\n".join(_message_text(m) for m in messages if m.get("role") != "system")
    rng = random.Random(f"{options.seed}:{request_fingerprint(messages, response_format)}:{options.attempt}")
    if options.error_rate > 0 and rng.random() < options.error_rate:
        status = rng.choice((429, 503))
        raise OmLocalTransientError(
            status, f"om-local: injected transient failure (HTTP {status}, attempt {options.attempt})"
        )
    schema = _response_schema(response_format)
    answer: Callable[[], str]
    if schema is not None:
        answer, empty = (lambda: extract_json(schema, user)), "{}"
    elif re.search(rf"^{re.escape(REFLECTOR_OBSERVATIONS_HEADING)}\s*$", user, re.I | re.M):
        answer, empty = (lambda: reflect_observations(user)), EMPTY_OBSERVATIONS
    elif re.search(rf"^{re.escape(OBSERVER_HISTORY_HEADING)}\s*$", user, re.I | re.M):
        answer, empty = (lambda: observe_transcript(user, system)), EMPTY_OBSERVATIONS
    else:
        raise OmLocalRequestError(
            "om-local/extractive answers Observer, Reflector and structured extraction requests only: "
            f"expected a {OBSERVER_HISTORY_HEADING!r} or {REFLECTOR_OBSERVATIONS_HEADING!r} section, "
            "or a response_format"
        )
    if options.output == "normal":
        text = answer()
    else:
        text = empty if options.output == "empty" else DEGENERATE_OUTPUT
    # Chat formats add a few tokens per message; four is what OpenAI documents for its models.
    input_tokens = count_tokens(system) + count_tokens(user) + 4 * len(messages)
    return OmLocalReply(text, input_tokens, count_tokens(text))


def _response_schema(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    spec = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and isinstance(spec, dict):
        schema = spec.get("schema")
        return schema if isinstance(schema, dict) else {"type": "object"}
    return None


# --- embeddings ------------------------------------------------------------------------------------------

HASHING_EMBEDDER = "hashing"
HASHING_DIMENSIONS = 1024
_EMBED_WORD = re.compile(r"\w+", re.UNICODE)


def hashing_embedding(text: str, dimensions: int = HASHING_DIMENSIONS) -> list[float]:
    """``om-local/hashing``: a deterministic bag-of-words embedding (feature hashing), unit length.

    The stem of each word, and the word itself, are hashed to a dimension with a sign; texts that share words
    point the same way, so cosine similarity ranks lexical overlap. No model, no network: it stands in for a
    real embedder in tests and offline, and real ones (``openai/text-embedding-3-small``...) go through
    litellm.
    """
    vector = [0.0] * dimensions
    for word in _EMBED_WORD.findall(text.lower()):
        if len(word) < 2 or word in _STOPWORDS:
            continue
        # the stem carries the meaning ("lives" and "live" meet); the exact word adds a little
        stem = _stem(word)
        features = [(f"stem:{stem}", 1.0)] + ([(word, 0.5)] if word != stem else [])
        for feature, weight in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "big") % dimensions
            vector[bucket] += weight if digest[4] & 1 else -weight
    norm = sum(v * v for v in vector) ** 0.5
    return [v / norm for v in vector] if norm else vector
