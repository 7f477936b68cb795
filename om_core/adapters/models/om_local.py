"""``om-local/extractive``: a deterministic model that observes, reflects and extracts with no network.

It reads the requests built by ``om_core.domain.prompts`` by that module's own headings, markers and line
templates, and answers in the Observer/Reflector output format: user facts near-verbatim, tables and JSON
row by row, the value a reply picks from the assistant's proposal, questions by their topic, assistant
outcomes and tool results by their values, relative dates resolved against the transcript's dates (what it
reads in text is ``om_local_text``; dates are ``om_local_dates``). The Reflector condenses by priority and
compression level, dropping what is worth least first and a 🔴 line only once no lower one is left.

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
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from om_core.adapters.models.om_local_dates import format_date, parse_month_day_year, resolve_relative_dates
from om_core.adapters.models.om_local_text import (
    ASKS_TO_CHOOSE,
    CORRECTION,
    STOPWORDS,
    Block,
    Proposal,
    assistant_line,
    blocks,
    chosen_option,
    classify_user_sentence,
    clip_words,
    common_word,
    content_words,
    details,
    essential,
    fact_weight,
    is_filler,
    is_question,
    json_leaves,
    looks_like_code,
    names_a_day,
    offered_value,
    proposal_of,
    reply_choice,
    split_sentences,
    strip_list_marker,
    table_rows,
    third_person,
    trimmed,
)
from om_core.domain.config import DEFAULT_TOKENIZER
from om_core.domain.observation_log import is_truncation_marker
from om_core.domain.prompts import (
    EXTRACTOR_END_MARKER,
    EXTRACTOR_SECTIONS_LINE_PREFIX,
    OBSERVER_HISTORY_HEADING,
    PREVIOUS_OBSERVATIONS_HEADING,
    PREVIOUS_VALUE_HEADING,
    PRIOR_METADATA_HEADING,
    REFLECTOR_END_MARKER,
    REFLECTOR_LEVEL_LINE,
    REFLECTOR_OBSERVATIONS_HEADING,
    REFLECTOR_PRIOR_VALUES_HEADING,
    REFLECTOR_TARGET_LINE,
    TRANSCRIPT_END_MARKER,
    WORKING_MEMORY_EMPTY,
    WORKING_MEMORY_HEADING,
    WORKING_MEMORY_SCHEMA_HEADING,
    WORKING_MEMORY_TEMPLATE_END,
    WORKING_MEMORY_TEMPLATE_HEADING,
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


# --- words the Observer and Reflector look for -------------------------------------------------------

_FIRST_PERSON_FACT = re.compile(
    r"\b(my|mine|our|ours|we|we're|we've|we'll|call me|remember|i'm|im|i am|i've|i have|i had|i was|"
    r"i'll|i will|i'd|i live|i work|i like|i love|i hate|i prefer|i need|i want|i own|i use|i moved|"
    r"i bought|i started|i got|i usually|i always|i never|i plan|i'm planning|born)\b",
    re.I,
)

_COMPLETION = re.compile(
    r"\b(done|completed?|fixed|finished|resolved|deployed|merged|implemented|booked|scheduled|sent|saved)\b"
    r"|\bi(?:'ve| have) (?:now |just |already )?\w+ed\b",
    re.I,
)

_NEGATION = re.compile(r"\b(not|n't|never|couldn't|can't|unable|failed)\b|n't\b", re.I)


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
            day = parse_month_day_year(*header.groups()) or day
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
# A pasted text of this many sentences is observed as one document, not sentence by sentence.
_DOCUMENT_SENTENCES = 8


@dataclass(slots=True)
class _Observation:
    day: date | None
    clock: str
    priority: Priority
    text: str
    # questions of one day are merged into one line
    kind: Literal["fact", "question", "assistant", "tool"] = "fact"
    # the words before the clauses ("User asked: "): lines with the same lead can share one line
    lead: str = ""
    # whether relative dates in the clauses are resolved
    dated: bool = True


@dataclass(slots=True)
class _ThreadNotes:
    observations: list[_Observation] = field(default_factory=list)
    last_request: str | None = None
    last_request_kind: Literal["question", "request"] | None = None
    first_topic: str | None = None
    last_speaker: str | None = None
    assistant_asked: bool = False
    user_sentences: list[str] = field(default_factory=list)
    # what is already remembered (earlier observations, earlier lines of this reply), clause by clause
    seen: set[str] = field(default_factory=set)
    # the detail tokens already remembered: an assistant repeating them adds nothing
    known_details: set[str] = field(default_factory=set)
    # what the assistant's last message put to the user, and the line that says so
    proposal: Proposal | None = None
    proposal_line: _Observation | None = None
    # whether the user's last message asked the assistant to help choose
    asked_to_choose: bool = False
    # the day the earlier observations end on: lines of that day go on under its header
    last_day: date | None = None
    # the topics asked about so far, each as the stems of its words
    topics: list[frozenset[str]] = field(default_factory=list)


def _with_dates(text: str, day: date | None) -> str:
    note = resolve_relative_dates(text, day) if day is not None else ""
    return f"{text} {note}" if note else text


_QUESTION_WORDS = re.compile(r"^(?:sorry,? )?(?:can|could|would|will) you (?:please )?", re.I)


def _clause_key(text: str) -> str:
    return _normalised(_SPEAKER_PREFIX.sub("", text))


def _remember(notes: _ThreadNotes, observation: _Observation, clauses: Sequence[str]) -> None:
    """Add ``observation`` made of ``clauses``, leaving out the clauses already remembered."""
    fresh: list[str] = []
    for clause in clauses:
        key = _clause_key(clause)
        if key and key not in notes.seen:
            notes.seen.add(key)
            fresh.append(clause)
    if not fresh:
        return
    notes.known_details |= {d.lower() for clause in fresh for d in details(clause)}
    prefix, _, _ = observation.text.partition("{}")
    observation.lead = prefix
    # each clause carries its own resolved dates; after the first, "User" reads on in lower case
    day = observation.day if observation.dated else None
    joined = "; ".join(
        _with_dates(re.sub(r"^User\b", "user", c) if i else c, day) for i, c in enumerate(fresh)
    )
    observation.text = prefix + joined
    notes.observations.append(observation)


# "back to this: …", "asking again, sorry: …": how a question comes up, not what it asks
_QUESTION_LEAD = re.compile(r"^[^:?]{1,25}:\s+(?=\S)")


def _question_text(sentence: str) -> str:
    body = _QUESTION_WORDS.sub("", _QUESTION_LEAD.sub("", trimmed(sentence))).rstrip("?").strip()
    return clip_words(body[:1].lower() + body[1:] if body[:2] != body[:2].upper() else body, 14)


def _observe_document(part: _Part, sentences: list[str], notes: _ThreadNotes) -> None:
    """A pasted text: what it is, and the sentences of it worth keeping, up to a share of its size."""
    title = clip_words(trimmed(sentences[0]).rstrip(":"), 10)
    # what a pasted text says is the user's to keep: every sentence that names something is a candidate
    weights = {i: fact_weight(s) for i, s in enumerate(sentences[1:], 1) if not is_question(s) and details(s)}
    ranked = sorted((i for i, w in weights.items() if w >= 1), key=lambda i: -weights[i])
    cap = max(6, count_tokens(part.text) // 60)
    facts = [essential(sentences[i], 30) for i in sorted(ranked[:cap])]
    priority: Priority = "🔴" if facts else "🟡"
    text = f"User shared a text ({len(part.text.split())} words), “{title}”" + (": {}" if facts else "")
    if facts:
        _remember(notes, _Observation(part.day, part.clock, priority, text), facts)
    else:
        notes.observations.append(_Observation(part.day, part.clock, priority, text))
    for sentence in sentences[-2:]:
        if classify_user_sentence(sentence) == "question":
            _observe_question(part, sentence, notes)


# question words and the verbs around them: what is left of a question without them is its topic
_ASKING_WORDS = frozenset(
    """what whats how why when where which who whom whose would could should can do does did is are was
    were even start usually people anything something any common best way good idea thing things tips tip
    mistake mistakes explain handle think worth really""".strip().split(maxsplit=-1)
)


def _question_topic(sentence: str) -> str:
    """A question that names nothing, as its topic: "where do I even start with travel insurance" →
    "travel insurance"."""
    words = [w for w in content_words(_question_text(sentence)) if w.lower().strip("'’") not in _ASKING_WORDS]
    return " ".join(words[-6:]) if words else clip_words(_question_text(sentence), 6)


def _topic_stems(topic: str) -> frozenset[str]:
    return frozenset(
        _stem(w.lower().strip("'’"))
        for w in content_words(topic)
        if w.lower().strip("'’") not in _ASKING_WORDS
    )


def _asked_before(notes: _ThreadNotes, stems: frozenset[str], named: bool) -> bool:
    """Whether a topic was asked about already, in other words around the same ones: "quick sanity check
    on the packing list" after "what am I forgetting for the packing list" (two words in common, or all
    the words of the shorter). A question that names something (a day, a place) is new unless all its
    words were asked about before."""
    if not stems:
        return False
    for known in notes.topics:
        shared = len(known & stems)
        if stems <= known or (not named and known and (shared >= 2 or known <= stems)):
            return True
    return False


# a question that points back at what was just said ("does this look right?") is about that
_POINTER = re.compile(r"\b(?:it|this|that|these|those|them)\b", re.I)


def _names_no_topic(sentence: str, topic: str) -> bool:
    """ "Any thoughts?", "Does this look right?": a question in common words only, about nothing in
    particular or about what was just said, adds no topic of its own ("Should this be a dataclass?"
    names one)."""
    words = [w for w in content_words(topic) if w.lower().strip("'’") not in _ASKING_WORDS]
    if details(sentence) or not all(common_word(w) for w in words):
        return False
    return len(words) <= 1 or (len(words) <= 2 and _POINTER.search(sentence) is not None)


def _observe_question(part: _Part, sentence: str, notes: _ThreadNotes) -> None:
    # a question asked again in other words ("back to this: …") is the same question
    topic = _clause_key(_question_topic(sentence))
    stems = _topic_stems(_question_topic(sentence))
    if _names_no_topic(sentence, _question_topic(sentence)):
        notes.last_request, notes.last_request_kind = sentence, "question"
        return
    if topic in notes.seen or _asked_before(notes, stems, bool(details(sentence))):
        return
    notes.topics.append(stems)
    if details(sentence):
        observation = _Observation(part.day, part.clock, "🔴", "User asked: {}", "question")
        _remember(notes, observation, [_question_text(sentence)])
    else:
        observation = _Observation(part.day, part.clock, "🟡", "User asked about {}", "question")
        _remember(notes, observation, [_question_topic(sentence)])
    notes.seen.add(topic)
    notes.last_request, notes.last_request_kind = sentence, "question"
    notes.first_topic = notes.first_topic or sentence


# a table or a JSON document is kept whole up to this many rows or values
_TABLE_ROWS = 20
_JSON_VALUES = 24


def _observe_data(part: _Part, block: Block, notes: _ThreadNotes, who: str) -> None:
    """A pasted table or JSON document: its rows (or values) under what it is, on one line."""
    if block.kind == "table":
        columns = ", ".join(h for h in block.header if h)
        rows = table_rows(block, column_names=not columns)
        lead = f"{who} shared a table ({columns})"
    else:
        rows = json_leaves(block.value, _JSON_VALUES + 1)
        lead = f"{who} shared JSON"
    if not rows:
        return
    shown = rows[: _TABLE_ROWS if block.kind == "table" else _JSON_VALUES]
    if len(rows) > len(shown):
        shown.append(f"(+{len(rows) - len(shown)} more)")
    priority: Priority = "🔴" if who == "User" else "🟡"
    # a row's weekday is the table's schedule ("Monday: bins"), not a coming day
    observation = _Observation(part.day, part.clock, priority, lead + ": {}", dated=block.kind != "table")
    _remember(notes, observation, shown)


def _observe_reply(part: _Part, notes: _ThreadNotes) -> str:
    """A reply that takes up the assistant's proposal ("the second one", "yes, that one"), noted as the
    value it picks; returns what the reply says besides."""
    proposal, notes.proposal = notes.proposal, None
    if proposal is None:
        return part.text
    choice = reply_choice(part.text, proposal)
    if choice is None:
        return part.text
    option = chosen_option(proposal, choice)
    if choice.rejected:
        if len(proposal.options) == 1:
            line = f"User declined: {clip_words(offered_value(proposal.options[0]), 30)}"
            _remember(notes, _Observation(part.day, part.clock, "🟡", "{}"), [line])
    elif option is not None:
        value = clip_words(assistant_line(offered_value(option)), 30)
        verb = "chose" if choice.index is not None else "agreed to"
        opening = value.split(maxsplit=1)[0].lower() if value.split() else ""
        common = opening in STOPWORDS or opening.endswith("ing")
        line = f"User {verb} {value[:1].lower() + value[1:] if common else value}"
        # a pick or a single offer says all that mattered of the proposal: its line, if written in this
        # call, goes; a yes to several suggestions leaves them standing
        if (
            choice.index is not None or len(proposal.options) == 1
        ) and notes.proposal_line in notes.observations:
            notes.observations.remove(notes.proposal_line)
        _remember(notes, _Observation(part.day, part.clock, "🔴", "{}"), [line])
    first = split_sentences(part.text)[:1]
    return part.text.split(first[0], 1)[1] if first and first[0] in part.text else ""


# a sentence that points at what follows it: "the rota, pasted below", "here's the budget:"
_POINTS_AHEAD = re.compile(r":\s*$|\b(?:below|here|attached|following)\b", re.I)


def _is_caption(sentence: str) -> bool:
    """The sentence that introduces a pasted table or JSON says what the data is, which the data's own line
    says by its columns: a note of its own only when it holds a number."""
    numbered = any(d[:1].isdigit() for d in details(sentence))
    return _POINTS_AHEAD.search(sentence.strip()) is not None and not numbered


def _observe_user(part: _Part, notes: _ThreadNotes) -> None:
    notes.asked_to_choose = ASKS_TO_CHOOSE.search(part.text) is not None
    text = _observe_reply(part, notes)
    prose: list[str] = []
    captions: set[str] = set()
    parsed = blocks(text)
    for index, block in enumerate(parsed):
        if block.kind in ("table", "json"):
            _observe_data(part, block, notes, "User")
        elif block.kind == "prose":
            prose += block.lines
            following = parsed[index + 1].kind if index + 1 < len(parsed) else None
            last = split_sentences("\n".join(block.lines))[-1:]
            if following in ("table", "json") and last and _is_caption(last[0]):
                captions.add(last[0])
    sentences = [s for s in split_sentences("\n".join(prose)) if not looks_like_code(s) and s not in captions]
    if len(sentences) >= _DOCUMENT_SENTENCES:
        notes.user_sentences += [s for s in sentences if classify_user_sentence(s) == "fact"]
        _observe_document(part, sentences, notes)
        return
    facts: list[str] = []
    correcting = False
    for sentence in sentences:
        kind = classify_user_sentence(sentence)
        # what follows a correction is the corrected value ("Correction: not a curry. Lasagne."), even in
        # a sentence that says little on its own
        if kind == "statement" and correcting:
            kind = "fact"
        correcting = CORRECTION.search(sentence) is not None
        if kind in ("filler", "statement"):
            continue
        notes.user_sentences.append(sentence)
        if kind == "question":
            _observe_question(part, sentence, notes)
        elif kind == "request":
            observation = _Observation(part.day, part.clock, "🟡", "User asked to {}", "question")
            _remember(notes, observation, [clip_words(_question_text(sentence), 10)])
            notes.last_request, notes.last_request_kind = sentence, "request"
            notes.first_topic = notes.first_topic or sentence
        else:
            facts.append(third_person(essential(trimmed(sentence), 30)).rstrip(".?。？"))
    if facts:
        _remember(notes, _Observation(part.day, part.clock, "🔴", "{}"), facts)


_COMMITMENT = re.compile(r"\b(?:i'll|i will|i'm going to|i am going to|i'll be)\b", re.I)
_WHEN = re.compile(
    r"\b(?:today|tonight|tomorrow|morning|afternoon|evening|next|by|before|after|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)\b",
    re.I,
)
PROPOSAL_LEAD = "Assistant proposed: "
_RECOMMENDED_MARK = " (recommended)"


def _observe_proposal(part: _Part, proposal: Proposal, notes: _ThreadNotes) -> None:
    """What the assistant put to the user, option by option, so a reply can be resolved to its value,
    in this call or, from the log, in the next."""
    options = [
        clip_words(assistant_line(offered_value(o)), 30)
        + (_RECOMMENDED_MARK if i == proposal.default else "")
        for i, o in enumerate(proposal.options)
    ]
    line = _Observation(part.day, part.clock, "🟡", PROPOSAL_LEAD + "; ".join(options), "assistant")
    notes.seen |= {_clause_key(o) for o in options}
    notes.known_details |= {d.lower() for o in options for d in details(o)}
    notes.observations.append(line)
    notes.proposal, notes.proposal_line = proposal, line


def _observe_assistant(part: _Part, notes: _ThreadNotes) -> None:
    proposal = proposal_of(part.text, notes.asked_to_choose)
    offered = set(proposal.options) if proposal is not None else set()
    prose = "\n".join(line for b in blocks(part.text) if b.kind == "prose" for line in b.lines)
    sentences = [s for s in split_sentences(prose) if not is_filler(s) and not looks_like_code(s)]
    notes.assistant_asked = bool(sentences) and sentences[-1].rstrip("\"')").endswith("?")
    # what the proposal's line names: a sentence naming nothing else is the proposal said again
    offered_details = {d.lower() for o in offered for d in details(o)}
    for sentence in sentences:
        if (
            sentence.endswith("?")
            or sentence.rstrip(" ?.") in offered
            or strip_list_marker(sentence) != sentence
            # "I found four that fit:" introduces what follows
            or sentence.rstrip().endswith(":")
        ):
            continue
        named = {d.lower() for d in details(sentence)}
        if offered and named and named <= offered_details:
            continue
        if _COMPLETION.search(sentence) and not _NEGATION.search(sentence):
            line = f"Assistant {assistant_line(clip_words(trimmed(sentence), 22))}"
            _remember(notes, _Observation(part.day, part.clock, "✅", "{}", "assistant"), [line])
        elif _COMMITMENT.search(sentence) and (named or _WHEN.search(sentence)):
            line = f"Assistant {assistant_line(clip_words(trimmed(sentence), 22))}"
            _remember(notes, _Observation(part.day, part.clock, "🔴", "{}", "assistant"), [line])
        elif {d for d in named - notes.known_details if not names_a_day(d)}:
            # a concrete answer: what it names that was not known before, besides a day ("batch-cook on
            # Sundays" is advice)
            line = f"Assistant: {clip_words(essential(trimmed(sentence), 20), 20).rstrip('.')}"
            _remember(notes, _Observation(part.day, part.clock, "🟡", "{}", "assistant"), [line])
    if proposal is not None:
        _observe_proposal(part, proposal, notes)
    else:
        notes.proposal = None


_FAILURE = re.compile(r"\b(?:FAILED|FAIL|ERROR|Error|Exception|Traceback|failed|failure|denied)\b")
# a measured value: a number with a unit or a percentage
_MEASURE = re.compile(
    r"[€$£¥]\s?\d|\d(?:[\d.,/]*\d)?\s?(?:%|°[cf]?|[a-zµ]{1,4}(?:/[a-z]{1,4})?[²³]?)(?![a-z])",
    re.I,
)
_TOOL_FINDINGS = 12
# "confirmed: 115", "setpoint=18.5": a named value
_LABELLED_VALUE = re.compile(r"^\s*[\w .()/-]{2,40}?\s*[:=]\s*\S*\d")
_FILE_LINE = re.compile(r"\S+\.\w+:\d+")
# how long the tool itself took ("75 passed in 29.2s"): the run's business, not a finding
_OWN_RUN_TIME = re.compile(
    r"\b(?:in|took|after|elapsed|duration:?|time:?)\s+\d[\d.,]*\s?(?:ms|s|sec|secs|seconds|min|minutes)\b",
    re.I,
)


# "0 failed", "no errors": a count of nothing is no failure
_NONE_FAILED = re.compile(r"\b(?:0|no|zero)\s+(?:failed|failures?|errors?)\b", re.I)


def _failed(text: str) -> bool:
    return _FAILURE.search(_NONE_FAILED.sub("", text)) is not None


def _first_line(text: str, limit: int) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[:limit].rstrip() + "…"


# "checks........: 92.54%": dots that lead the eye to a value, as a label's colon
_LEADER_DOTS = re.compile(r"\s*\.{3,}\s*:?\s*")


def _tool_findings(text: str) -> list[str]:
    """What a tool's output found: its values (JSON leaves, ``label: value`` and ``key=value`` lines,
    table rows, measured values with their units), a dozen at most; how long the tool itself took and
    where in a file a match sits are the tool's business."""
    candidates: list[str] = []
    for block in blocks(text):
        if block.kind == "json":
            candidates += json_leaves(block.value, _TOOL_FINDINGS)
        elif block.kind == "table":
            candidates += table_rows(block)
        else:
            # a line whose shape repeats with other numbers ("request handled in 59ms") is routine
            shapes = Counter(re.sub(r"\d+", "#", ln.strip()) for ln in block.lines)
            candidates += [
                ln.strip()
                for ln in block.lines
                if (_LABELLED_VALUE.search(ln) or _MEASURE.search(_OWN_RUN_TIME.sub("", ln)))
                and not _FILE_LINE.search(ln)
                and shapes[re.sub(r"\d+", "#", ln.strip())] == 1
            ]
    return [clip_words(_LEADER_DOTS.sub(": ", c), 24) for c in candidates][:_TOOL_FINDINGS]


def _observe_tools(run: list[_Part], notes: _ThreadNotes) -> None:
    """A run of tool calls: the tools used, what failed in its own words, and what the results measured."""
    names: list[str] = []
    failures: list[str] = []
    findings: list[tuple[str, str]] = []
    for part in run:
        kind, _, name = part.title[len("Tool ") :].partition(" ")
        if kind == "Call" and name not in names:
            names.append(name)
        elif kind in ("Error", "Denied") or (kind == "Result" and _failed(part.text)):
            lines = [ln.strip() for ln in part.text.splitlines() if _failed(ln)] or [part.text]
            failures.append(
                f"{name} {'was denied' if kind == 'Denied' else 'failed'}: {_first_line(lines[0], 140)}"
            )
        elif kind == "Result":
            findings += [(name, f) for f in _tool_findings(part.text)]
    first = run[0]
    measured = [(n, f) for n, f in findings if _MEASURE.search(f)]
    others = [
        (n, f)
        for n, f in findings
        if (n, f) not in measured and {d.lower() for d in details(f)} - notes.known_details
    ]
    if failures:
        _remember(notes, _Observation(first.day, first.clock, "🔴", "{}", "tool"), failures)
    elif names and not measured and not others:
        # a run is worth its line only when it found nothing to note: its results name the tool
        _remember(notes, _Observation(first.day, first.clock, "🟡", "Ran {}", "tool"), [", ".join(names)])
    by_priority: tuple[tuple[Priority, list[tuple[str, str]]], ...] = (("🔴", measured), ("🟡", others))
    for priority, found in by_priority:
        if found:
            observation = _Observation(first.day, first.clock, priority, "Tool results: {}", "tool")
            _remember(notes, observation, _by_tool(found))


def _by_tool(findings: Sequence[tuple[str, str]]) -> list[str]:
    """Findings as clauses, each tool's name before its first one only."""
    out: list[str] = []
    previous: str | None = None
    for name, finding in findings:
        out.append(finding if name == previous else f"{name}: {finding}")
        previous = name
    return out


def _observe_thread(thread: _Thread, notes: _ThreadNotes) -> _ThreadNotes:
    tools: list[_Part] = []
    for part in [*thread.parts, None]:
        if part is not None and part.title.startswith("Tool "):
            tools.append(part)
            continue
        if tools:
            _observe_tools(tools, notes)
            tools = []
        if part is None:
            break
        if part.title == "User":
            if re.fullmatch(r"\[(Image|File) #\d+: [^\]]*\]", part.text.strip()):
                observation = _Observation(part.day, part.clock, "🟡", "User shared {}")
                _remember(notes, observation, [part.text.strip()])
            else:
                _observe_user(part, notes)
        elif part.title == "Assistant":
            _observe_assistant(part, notes)
        elif part.title in ("Image", "File"):
            _remember(notes, _Observation(part.day, part.clock, "🟡", "Shared {}"), [part.text.strip()])
        else:
            # Reasoning, system text and tool-role text are the assistant's machinery, not memories.
            continue
        notes.last_speaker = "assistant" if part.title != "User" else "user"
    return notes


def _nothing_new(thread: _Thread, notes: _ThreadNotes) -> None:
    """A low-priority line saying the stretch held nothing worth keeping: an Observer that answers with no
    observation at all is taken to have failed, and the messages would stay unobserved."""
    if notes.observations or not thread.parts:
        return
    last = thread.parts[-1]
    # as short as a line can be, with no time: it stands in the context for as long as the log lasts
    notes.observations.append(_Observation(last.day, "", "🟢", "Small talk"))


_MERGED_PER_LINE = 4


def _merged_questions(observations: list[_Observation]) -> list[_Observation]:
    """The questions of one day on one line (at the first one's time), and the same for routine tool
    runs: they matter less than the facts, and a line each would cost more than what they say."""
    out: list[_Observation] = []
    open_line: dict[tuple[date | None, str, str], _Observation] = {}
    for obs in observations:
        mergeable = obs.lead and (obs.kind == "question" or (obs.kind == "tool" and obs.priority == "🟡"))
        head = open_line.get((obs.day, obs.priority, obs.lead)) if mergeable else None
        # a line of a few questions, so that no line grows long
        if head is not None and head.text.count("; ") >= _MERGED_PER_LINE - 1:
            head = None
        if head is None:
            out.append(obs)
            if mergeable:
                open_line[(obs.day, obs.priority, obs.lead)] = obs
        else:
            head.text += "; " + obs.text[len(obs.lead) :]
    return out


def _render_observation_groups(
    observations: Iterable[_Observation], continued_day: date | None = None
) -> list[str]:
    """Lines under a ``Date:`` header per day. Lines of ``continued_day``, the day the earlier observations
    end on, open with no header: they read on under that day's header, which a header repeated at every
    call would cost again and again in the context."""
    lines: list[str] = []
    current_day: date | None = None
    first = True
    for obs in _merged_questions(list(observations)):
        if first and obs.day is not None and obs.day == continued_day:
            current_day, first = obs.day, False
        if first or obs.day != current_day:
            if obs.day is not None:
                if not first:
                    lines.append("")
                lines.append(f"Date: {format_date(obs.day)}")
            current_day, first = obs.day, False
        lines.append(
            f"* {obs.priority} ({obs.clock}) {obs.text}" if obs.clock else f"* {obs.priority} {obs.text}"
        )
    return lines


# the words a line's clauses follow, as ``_Observation`` leads write them
_LEAD = re.compile(
    r"^(?:User asked(?: about| to|:)|User shared [^:]*:|Tool results:|Ran|Assistant proposed:)\s*"
)


def _remembered(previous: str) -> _ThreadNotes:
    """Notes that know what the previous observations already say, and the proposal the last of them
    records, which the first reply of this call may answer."""
    notes = _ThreadNotes()
    last = ""
    for line in previous.splitlines():
        dated = _DATE_LINE.match(line)
        if dated:
            notes.last_day = parse_month_day_year(*dated.groups())
        marked = _OBS_LINE.match(line)
        if marked is None:
            continue
        text = _ANNOTATION.sub("", marked.group(3))
        last = text
        lead = _LEAD.match(text)
        clauses = text[lead.end() if lead else 0 :].split("; ")
        for clause in clauses:
            notes.seen.add(_clause_key(clause))
            if lead is not None and lead.group(0).startswith("User asked"):
                notes.seen.add(_clause_key(_question_topic(clause)))
                notes.topics.append(_topic_stems(_question_topic(clause)))
        notes.known_details |= {d.lower() for d in details(text)}
    if last.startswith(PROPOSAL_LEAD):
        options = [o.strip() for o in last[len(PROPOSAL_LEAD) :].split("; ")]
        default = next((i for i, o in enumerate(options) if o.endswith(_RECOMMENDED_MARK)), None)
        notes.proposal = Proposal(tuple(o.removesuffix(_RECOMMENDED_MARK) for o in options), default)
    return notes


def _thread_title(notes: _ThreadNotes) -> str | None:
    # What the user first asked for names a conversation better than the facts they opened with.
    topic = notes.first_topic or (notes.user_sentences[0] if notes.user_sentences else None)
    if topic is None:
        return None
    words = [w for w in content_words(topic) if not w[0].isdigit()][:4]
    title = " ".join(w if w[0].isupper() else w.capitalize() for w in words)
    return title if len(title) >= 3 else None


def _current_task(notes: _ThreadNotes, prior: dict[str, str]) -> str | None:
    if notes.last_request is not None:
        return f"Primary: {notes.last_request}"
    return prior.get("current task")


def _suggested_response(notes: _ThreadNotes) -> str:
    if notes.last_speaker == "user" and notes.last_request is not None:
        verb = "Answer the user's question" if notes.last_request_kind == "question" else "Help the user with"
        return f"{verb}: {clip_words(notes.last_request, 20)}"
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
            if len(word) >= 4 and word not in STOPWORDS and word not in generic:
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


_LABEL_LINE = re.compile(r"^(\s*[-*]\s*\*\*(.+?)\*\*:)[ \t]*(.*)$")
_OWN_NAME = re.compile(
    r"\b(?:my name is|my name's|call me|i am|i'm)\s+([A-Z][\w'-]+)(?:\s+([A-Z][\w'-]+))?", re.I
)
# what a user says of each label of Mastra's default template; other labels are matched by their words
_LABEL_CUES: dict[str, tuple[str, ...]] = {
    "location": ("live", "based", "moved", "moving", "relocat"),
    "occupation": ("work", "job", "profession", "engineer", "developer", "teacher", "employed"),
    "interests": ("like", "love", "enjoy", "hobby", "interested", "passion"),
    "goals": ("goal", "plan", "want", "hope", "intend"),
    "events": ("wedding", "birthday", "trip", "appointment", "anniversary", "event"),
    "projects": ("project", "building"),
}
_LABEL_CUES |= {"city": _LABEL_CUES["location"], "home": _LABEL_CUES["location"]}
_LABEL_CUES |= {"job": _LABEL_CUES["occupation"], "hobbies": _LABEL_CUES["interests"]}
_FACT_CLAUSES = re.compile(r",\s+|;\s+|\s+(?:and|but)\s+(?=(?:i|i'm|my|we|our)\b)", re.I)


def _fact_line(sentence: str) -> str:
    return third_person(essential(trimmed(sentence), 22)).rstrip(".")


def _label_value(label: str, facts: Sequence[str]) -> tuple[str, str] | None:
    """(value, the fact it comes from): the newest thing the user said of ``label``, their own name for a
    name, else a fact that mentions the label's words, as a line about the user."""
    key = label.strip().lower()
    if key.endswith("name"):
        for sentence in reversed(facts):
            named = _OWN_NAME.search(sentence)
            if named is None or not named.group(1)[0].isupper():
                continue
            last: str | None = named.group(2) if named.group(2) and named.group(2)[0].isupper() else None
            value = last if key.startswith("last") else str(named.group(1))
            return (value, sentence) if value else None
        return None
    mentioned = _matching_sentence(facts, _LABEL_CUES.get(key) or _keywords(label))
    return None if mentioned is None else (_fact_line(mentioned), mentioned)


def _markdown_working_memory(template: str, current: str | None, facts: Sequence[str]) -> str:
    """The template's labelled lines (or the current document's) with what the transcript tells of each;
    a "Facts" line gathers the facts no other label took, the newest five."""
    out: list[str] = []
    used: set[str] = set()
    facts_line: int | None = None
    for line in (current or template).strip("\n").splitlines():
        labelled = _LABEL_LINE.match(line)
        found = None
        if labelled is not None and labelled.group(2).strip().lower() == "facts":
            facts_line = len(out)
        elif labelled is not None:
            found = _label_value(labelled.group(2), facts)
        if labelled is None or found is None:
            out.append(line.rstrip())
            continue
        used.add(found[1])
        out.append(f"{labelled.group(1)} {found[0]}")
    rest = [_fact_line(f) for f in facts if f not in used]
    labelled = _LABEL_LINE.match(out[facts_line]) if facts_line is not None else None
    if labelled is not None and facts_line is not None and rest:
        known = [v.strip() for v in labelled.group(3).split(";") if v.strip()]
        out[facts_line] = f"{labelled.group(1)} {'; '.join(list(dict.fromkeys([*known, *rest]))[-5:])}"
    return "\n".join(out)


def _json_working_memory(schema_text: str, current: str | None, facts: Sequence[str]) -> str | None:
    """The current object with each string property the transcript tells of set to what it says."""
    try:
        schema = json.loads(schema_text)
        document = json.loads(current) if current else {}
    except json.JSONDecodeError:
        return None
    if not isinstance(schema, dict) or not isinstance(document, dict):
        return None
    for name, spec in (schema.get("properties") or {}).items():
        if isinstance(spec, dict) and spec.get("type", "string") == "string":
            label = re.sub(r"(?<=[a-z])(?=[A-Z])|[_-]+", " ", name)
            found = _label_value(label, facts)
            if found is not None:
                document[name] = found[0]
    return json.dumps(document, ensure_ascii=False)


def _working_memory_update(user_prompt: str, system_prompt: str, user_sentences: Sequence[str]) -> str | None:
    """The ``<working-memory>`` answer when the request asks for one and the document changes."""
    current = _section(user_prompt, WORKING_MEMORY_HEADING, [OBSERVER_HISTORY_HEADING])
    if current is None:
        return None
    current = None if current.strip() == WORKING_MEMORY_EMPTY else current.strip()
    # one label takes one clause of what the user said of themselves, not the whole sentence
    facts = [
        clause.strip()
        for sentence in user_sentences
        if classify_user_sentence(sentence) == "fact"
        for clause in _FACT_CLAUSES.split(sentence)
        if len(clause.split()) >= 3
    ]
    schema = _section(system_prompt, WORKING_MEMORY_SCHEMA_HEADING, [WORKING_MEMORY_TEMPLATE_END])
    if schema is not None:
        updated = _json_working_memory(schema, current, facts)
    else:
        template = _section(system_prompt, WORKING_MEMORY_TEMPLATE_HEADING, [WORKING_MEMORY_TEMPLATE_END])
        updated = _markdown_working_memory(template or "", current, facts)
    if updated is None or updated.strip() == (current or "").strip() or not facts:
        return None
    return updated


def observe_transcript(user_prompt: str, system_prompt: str) -> str:
    """The Observer's reply to a request built by ``om_core.domain.prompts.build_observer_request``."""
    transcript = _section(user_prompt, OBSERVER_HISTORY_HEADING, [TRANSCRIPT_END_MARKER])
    if transcript is None:
        raise OmLocalRequestError(f"observer request without a {OBSERVER_HISTORY_HEADING!r} section")
    metadata_ends = [WORKING_MEMORY_HEADING, OBSERVER_HISTORY_HEADING]
    metadata = _section(user_prompt, PRIOR_METADATA_HEADING, metadata_ends) or ""
    prior = _metadata_values(metadata)
    wants_title = re.search(r"^<thread-title>\s*$", system_prompt, re.M) is not None
    previous = _section(user_prompt, PREVIOUS_OBSERVATIONS_HEADING, [PRIOR_METADATA_HEADING]) or ""
    threads: list[tuple[str | None, _ThreadNotes]] = []
    for thread in parse_transcript(transcript):
        notes = _observe_thread(thread, _remembered(previous))
        _nothing_new(thread, notes)
        threads.append((thread.thread_id, notes))
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
        out += _render_observation_groups(single.observations, single.last_day)
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
    document = _working_memory_update(user_prompt, system_prompt, user_sentences)
    if document is not None:
        tail += ["<working-memory>", document, "</working-memory>"]
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
    # what the line is worth keeping, read from what it said before any shortening
    worth: int | None = None

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
            segments[-1].groups.append(_Group(parse_month_day_year(*dated.groups())))
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


_CORRECTION_LEAD = re.compile(
    r"^(?:(?:update|correction|actually|sorry|small change|change of plan|scratch that|also|note)\b"
    r"[^:,]{0,30}?"
    r"[:,]\s*)+",
    re.I,
)
# "…, not X", "… instead of X": the value a correction replaces
_REPLACED = re.compile(
    r"\b(?:not|instead of|rather than|no longer|dropped|cancell?ed|left|previously)\s+(?:the\s+)?"
    r"(?P<old>[^,;()]+?)(?=\s*(?:[,;.)]|$|\s+(?:anymore|any more|is off|now|instead|last|from)\b))",
    re.I,
)
_SUBJECT = re.compile(
    r"^(?:(?:user's|our|the|my)\s+(?P<subject>(?:[\w-]+\s+){0,3}?[\w-]+)\s+(?:is|are|was|were|"
    # "the caterer got switched to …", "the job changed — it's …": a new value of the same thing
    r"(?:(?:has|have)\s+been\s+|got\s+|was\s+|were\s+)?(?:changed|switched|swapped|updated)"
    r"(?:\s+(?:over\s+)?to|\s*[—–:,-]+\s*(?:it|they)(?:'s|’s|\s+is|\s+are)))"
    r"(?:\s+now)?(?:\s+(?P<prep>on|at|in|to|for|from|called|named|due|based|scheduled|set|booked))?\b"
    # "Budget: …"; not "run_tests failed: …", which reports an event rather than a value
    r"|(?P<label>(?![A-Za-z -]*\b(?:failed|denied|asked|shared)\b)[A-Za-z][A-Za-z -]{2,30}):\s)",
    re.I,
)
# labels that introduce a line rather than name what it states the value of
_GENERIC_LABELS = frozenset(
    {"decision", "note", "update", "correction", "question", "todo", "reminder", "fyi", "ps", "user",
     "assistant", "tool", "warning", "summary"}
)  # fmt: skip
_SUBJECT_NOISE = frozenset({"new", "current", "now", "actual", "final", "updated", "whole", "total"})


def _subject_key(clause: str) -> tuple[frozenset[str], str] | None:
    """What a clause states a value of (``user's budget is …`` → budget), to tell when a later clause
    restates it with another value."""
    body = _CORRECTION_LEAD.sub("", _ANNOTATION.sub("", clause)).strip()
    match = _SUBJECT.match(body)
    if match is None:
        return None
    subject = match.group("subject") or match.group("label") or ""
    if match.group("label") and subject.lower().split()[0] in _GENERIC_LABELS:
        return None
    words = frozenset(
        _stem(w) for w in re.findall(r"[a-z]+", subject.lower()) if w not in STOPWORDS | _SUBJECT_NOISE
    )
    return (words, (match.group("prep") or "").lower()) if words else None


def _replaced_values(clause: str) -> list[str]:
    return [
        _normalised(m.group("old"))
        for m in _REPLACED.finditer(_ANNOTATION.sub("", clause))
        if details(" " + m.group("old"))
    ]


def _supersedes(newer: str, older: str) -> bool:
    old_text = f" {_normalised(older)} "
    if any(value and f" {value} " in old_text for value in _replaced_values(newer)):
        return True
    new_key, old_key = _subject_key(newer), _subject_key(older)
    if new_key is None or old_key is None or new_key[1] != old_key[1]:
        return False
    return (new_key[0] <= old_key[0] or old_key[0] <= new_key[0]) and _normalised(newer) != _normalised(older)


def _drop_superseded(segments: Sequence[_Segment]) -> None:
    """A later statement of a fact replaces the earlier one: the earlier clause goes, and a line left with
    no clause goes with it. Only high-priority lines state facts; questions never replace them."""
    facts = sorted(
        (line for s in segments for line in s.lines() if line.priority == "🔴"), key=lambda line: line.order
    )
    clauses = {id(line): line.text.split("; ") for line in facts}
    for index, line in enumerate(facts):
        if line.text.startswith(("User asked", "User shared")):
            continue
        for newer_clause in clauses[id(line)]:
            for older in facts[:index]:
                kept = [c for c in clauses[id(older)] if not _supersedes(newer_clause, c)]
                clauses[id(older)] = kept
    for line in facts:
        kept = clauses[id(line)]
        if not kept:
            line.text = ""
        elif len(kept) != len(line.text.split("; ")):
            # the first clause may have been dropped: keep the line's own lead-in
            text = "; ".join(kept)
            line.text = text[:1].upper() + text[1:]
    for segment in segments:
        for group in segment.groups:
            group.lines = [line for line in group.lines if line.text]


def essential_clause(text: str) -> str:
    """The clauses of an observation that carry names, numbers or first-person facts, annotations kept."""
    annotations = "".join(m.group(0) for m in _ANNOTATION.finditer(text))
    body = _ANNOTATION.sub("", text).strip()
    prefix_match = _SPEAKER_PREFIX.match(body)
    prefix = prefix_match.group(1) if prefix_match else ""
    pieces = _CLAUSE_SEPARATOR.split(body[len(prefix) :])
    clauses, separators = pieces[0::2], pieces[1::2]
    keep = [
        i for i, clause in enumerate(clauses) if details(" " + clause) or _FIRST_PERSON_FACT.search(clause)
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


_CHOICE_LINE = re.compile(r"^User (?:chose|agreed to)\b")


def _line_value(line: _Line) -> int:
    """How much a line is worth keeping, by what it says (``fact_weight``, before any shortening): what
    the user chose counts more, a question less."""
    if line.worth is None:
        text = _ANNOTATION.sub("", line.text)
        line.worth = fact_weight(_SPEAKER_PREFIX.sub("", text))
        if _CHOICE_LINE.match(text):
            line.worth += 3
        if text.startswith("User asked"):
            line.worth -= 2
    return line.worth


# a 🔴 line worth this much stays even past the target
_KEEP_PAST_TARGET = 3


def _fit_to_target(segments: list[_Segment], target: int) -> list[_Segment]:
    """Drop and shorten until the log is under the target, what matters least first: 🟢 and 🟡 lines
    (those naming nothing before those that do, the oldest first), then sub-bullets, then long 🔴 lines
    cut to their essential clauses, and only when nothing of lower priority is left, 🔴 lines by their
    worth (those worth a note, ``_KEEP_PAST_TARGET``, and ✅ lines, stay)."""
    # Aim under the target: the caller may count with a tokenizer that disagrees with ours by a little.
    goal = max(1, int(target * 0.9))
    total = count_tokens(_render_segments(segments))
    if total < goal:
        return segments

    def least_worth_first(lines: Iterable[_Line]) -> list[_Line]:
        return sorted(lines, key=lambda line: (_line_value(line), line.order))

    every = [line for s in segments for line in s.lines()]
    for line in every:
        _line_value(line)
    segments, total = _drop_in_order(
        segments, least_worth_first(line for line in every if _RANK[line.priority] <= 2), goal, total
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
        facts = least_worth_first(
            line
            for s in segments
            for line in s.lines()
            if line.priority == "🔴" and _line_value(line) < _KEEP_PAST_TARGET
        )
        segments, total = _drop_in_order(segments, facts, goal, total)
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
    _drop_superseded(segments)
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


def reflection_extractor_sections(user_prompt: str, system_prompt: str) -> str:
    """The Reflector's inline extractor sections: each value from the newest observation line that
    mentions it, else the value the prompt says was recorded so far; nothing for an extractor with
    neither."""
    sentences = _candidate_sentences(user_prompt)
    recorded = _metadata_values(_section(system_prompt, REFLECTOR_PRIOR_VALUES_HEADING, ["# "]) or "")
    lines: list[str] = []
    for slug, instructions in _inline_extractors(system_prompt).items():
        value = _matching_sentence(sentences, _keywords(slug, instructions)) or recorded.get(slug)
        if value:
            lines += [f"<{slug}>", value, f"</{slug}>"]
    return "\n".join(lines)


def _reflector_reply(user_prompt: str, system_prompt: str) -> str:
    reflected = reflect_observations(user_prompt)
    extracted = reflection_extractor_sections(user_prompt, system_prompt)
    return f"{reflected}\n{extracted}" if extracted else reflected


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
        answer, empty = (lambda: _reflector_reply(user, system)), EMPTY_OBSERVATIONS
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
        if len(word) < 2 or word in STOPWORDS:
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
