"""What a planted fact is, and the checker that says whether a text still holds it.

A fact is one or more *parts* that must all be found together: on one line of the text, or on a line and
the more deeply indented lines under it (a note with its sub-bullets). A part is found when any of its
renderings occurs as whole words after ``normalise`` — or, for a date, when the text renders that day in
any of the usual ways (``2026-11-18``, ``18 November 2026``, ``Nov 18, 2026``, ``18. November``,
``18 novembre``, ``2026年11月18日`` …), never the same day and month of another year. Lines that are
only a ``Date:`` header (the day a message was sent, not a fact) are not searched for dates.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

# the hard cases of issue 20, each planted fact labelled with one
CATEGORIES: dict[str, str] = {
    "plain": "a fact the user states plainly",
    "correction": "a value corrected later in the conversation: the new value counts, the old is superseded",
    "confirmed-proposal": "the assistant proposes a value and the user confirms it",
    "question-proposal": "the assistant proposes a value as a question and the user agrees",
    "pick": "the assistant lists options and the user picks one ('the second one', 'that one')",
    "table": "a cell of a pasted table (pipes or aligned columns), with its row",
    "json": "a value inside pasted or returned JSON",
    "csv": "a cell of pasted CSV, with its row",
    "relative-date": "a date said relatively ('in ten days', 'dans 4 jours', '3日後'): the resolved date",
    "apposition": "a name with its relation set off by commas ('Sanne, my best friend since uni, …')",
    "name-place": "a named person and the place they are in or moving to",
    "third-person": "a fact about someone else that opens with their name",
    "lowercase-opening": "a fact that opens with a lowercase phrase ('incidents go to #inc-…')",
    "tool-number": "a number with its unit inside tool output or a log line",
    "french": "a fact said in French",
    "german": "a fact said in German",
}
PRIORITIES = ("high", "medium", "low")

_SPLIT_DIGITS = re.compile(r"(?<=\d)(?=[^\W\d_])|(?<=[^\W\d_])(?=\d)")
_NON_WORD = re.compile(r"[^\w]+|_")


def normalise(text: str) -> str:
    """NFKC, case-folded, a space between digits and letters (``857ms`` is ``857 ms``), every run of
    other characters one space."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", _SPLIT_DIGITS.sub(" ", folded)).split())


@dataclass(frozen=True, slots=True)
class Part:
    """One thing that must be found: any of ``renderings``, or the day ``date`` (ISO) in any rendering."""

    renderings: tuple[str, ...] = ()
    date: str | None = None

    def __post_init__(self) -> None:
        if not self.renderings and self.date is None:
            raise ValueError("a part needs a rendering or a date")

    @property
    def shown(self) -> str:
        return self.date if self.date is not None else self.renderings[0]


@dataclass(frozen=True, slots=True)
class Fact:
    """A planted fact. ``message_id`` is the message whose text holds the value (for a date, its relative
    phrase ``source``); ``confirmed_in`` the user's message that made a proposal a fact; ``superseded``
    the values it replaced (a correction's old value, a rejected proposal), said in ``first_message_id``."""

    key: str
    category: str
    priority: str
    parts: tuple[Part, ...]
    message_id: str
    source: str
    confirmed_in: str | None = None
    superseded: tuple[Part, ...] = ()
    first_message_id: str | None = None
    language: str = "en"

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.priority not in PRIORITIES:
            raise ValueError(f"unknown priority {self.priority!r}")

    @property
    def value(self) -> str:
        return " + ".join(part.shown for part in self.parts)

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "category": self.category,
            "priority": self.priority,
            "value": self.value,
            "message_id": self.message_id,
            "confirmed_in": self.confirmed_in,
            "superseded": [p.shown for p in self.superseded],
            "language": self.language,
        }


def value_part(*renderings: str) -> Part:
    return Part(renderings=tuple(renderings))


def date_part(day: date) -> Part:
    return Part(date=day.isoformat())


# --- the checker -------------------------------------------------------------------------------------

_MONTHS = (
    ("january", "jan", "janvier", "januar", "jänner"),
    ("february", "feb", "février", "fevrier", "februar", "févr"),
    ("march", "mar", "mars", "märz", "maerz"),
    ("april", "apr", "avril"),
    ("may", "mai"),
    ("june", "jun", "juin", "juni"),
    ("july", "jul", "juillet", "juli"),
    ("august", "aug", "août", "aout"),
    ("september", "sep", "sept", "septembre"),
    ("october", "oct", "octobre", "oktober", "okt"),
    ("november", "nov", "novembre"),
    ("december", "dec", "décembre", "decembre", "dezember", "dez", "déc"),
)
_YEAR_AFTER = r"(?: (?:19|20)\d\d(?!\S))"


@lru_cache(maxsize=4096)
def _date_pattern(iso: str) -> re.Pattern[str]:
    day = date.fromisoformat(iso)
    months = "|".join(re.escape(normalise(name)) for name in _MONTHS[day.month - 1])
    d, m, y = str(day.day), str(day.month), str(day.year)
    # a day and month, then this year or no year at all (another year is another day)
    tail = rf"(?: {y}(?!\S)|(?!{_YEAR_AFTER}))"
    day_month = rf"0?{d}(?: (?:st|nd|rd|th|er|e))? (?:of )?(?:{months}){tail}"
    month_day = rf"(?:{months}) 0?{d}(?: (?:st|nd|rd|th))?{tail}"
    numeric = rf"{y} 0?{m} 0?{d}|0?{d} 0?{m} {y}|0?{m} 0?{d} {y}"
    japanese = rf"(?:{y} 年 )?0?{m} 月 0?{d} 日"
    return re.compile(rf"(?<!\S)(?:{day_month}|{month_day}|{numeric}|{japanese})(?!\S)")


@dataclass(slots=True)
class SearchText:
    """A text prepared for looking facts up: its units (a line with the lines indented under it),
    normalised once."""

    units: list[str] = field(default_factory=list)
    date_units: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, text: str) -> SearchText:
        units: list[str] = []
        date_units: list[str] = []
        lines = text.split("\n")
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            block = [line]
            for later in lines[index + 1 :]:
                if not later.strip() or len(later) - len(later.lstrip()) <= indent:
                    break
                block.append(later)
            unit = " " + normalise(" ".join(block)) + " "
            units.append(unit)
            if not line.lstrip().startswith("Date:"):
                date_units.append(unit)
        return cls(units, date_units)

    def has_part(self, part: Part, unit: str) -> bool:
        if part.date is not None:
            return _date_pattern(part.date).search(unit) is not None
        return any(f" {normalise(r)} " in unit for r in part.renderings)

    def unit_with(self, parts: tuple[Part, ...]) -> str | None:
        units = self.date_units if any(p.date is not None for p in parts) else self.units
        for unit in units:
            if all(self.has_part(part, unit) for part in parts):
                return unit
        return None

    def holds(self, parts: tuple[Part, ...]) -> bool:
        return self.unit_with(parts) is not None

    def holds_some(self, parts: tuple[Part, ...]) -> bool:
        """Whether any part is found anywhere (a fact cut in pieces, or half kept)."""
        return any(self.unit_with((part,)) is not None for part in parts)


def fact_in(fact: Fact, text: str | SearchText) -> bool:
    search = text if isinstance(text, SearchText) else SearchText.of(text)
    return search.holds(fact.parts)


def superseded_in(fact: Fact, text: str | SearchText) -> list[Part]:
    """The superseded values of ``fact`` still in ``text``; an old value that renders like a part of the
    new one (a date moved by a year, say) is not counted."""
    search = text if isinstance(text, SearchText) else SearchText.of(text)
    new = {normalise(r) for part in fact.parts for r in part.renderings}
    return [
        old
        for old in fact.superseded
        if search.holds((old,)) and not any(normalise(r) in new for r in old.renderings)
    ]
