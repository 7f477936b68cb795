"""Dates the local model resolves: relative and year-less dates in English, French, German and Japanese.

A careful note-taker writes "in ten days" down as the day it means, because a week later "in ten days" is
wrong. ``date_mentions`` finds every such expression in a text and the day it names against the day the
message was written: counts in words or digits ("in ten days", "dans 4 jours", "in drei Tagen", "3日後"),
offsets from now ("a week from today", "two weeks ago", "il y a 3 jours", "vor einer Woche"), named days
("tomorrow", "après-demain", "übermorgen", "明後日"), weekdays with or without a qualifier ("next Friday",
"lundi prochain", "am Donnerstag", "来週の金曜日"), week/month/year offsets ("next week", "le mois
prochain", "nächstes Jahr", "来月", estimated), weekends, the end of a month, and calendar dates without a
year ("the 14th", "March 3", "le 18 novembre", "am 18. November", "11月18日"), placed in the year that puts
them nearest the message.

Each mention says how firm it is: ``strong`` mentions (a count, a weekday with a qualifier, a calendar date)
make a sentence worth keeping on their own; ``weak`` ones (today, tomorrow, a bare weekday) only date a
sentence kept for what else it says, since "I'm so tired today" is no fact.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

MONTHS_SHORT = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def format_date(day: date) -> str:
    """``Jan 6, 2026``: the form of ``Date:`` headers and ``(meaning …)`` annotations."""
    return f"{MONTHS_SHORT[day.month - 1]} {day.day}, {day.year}"


def parse_month_day_year(month: str, day: str, year: str) -> date | None:
    """The date of a ``Jan 6, 2026``-style header (the month in English, short or full)."""
    index = _MONTHS.get(month.lower()[:3])
    try:
        return None if index is None else date(int(year), index, int(day))
    except ValueError:
        return None


def add_months(day: date, months: int) -> date:
    month_index = day.year * 12 + day.month - 1 + months
    year, month = divmod(month_index, 12)
    for candidate in (day.day, 30, 29, 28):
        try:
            return date(year, month + 1, candidate)
        except ValueError:
            continue
    raise AssertionError("every month has 28 days")


# --- numbers, units, weekdays and months in the four languages -------------------------------------------

_UNITS_EN = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
             "nine": 9}  # fmt: skip
_NUMBER_WORDS: dict[str, int] = {
    "a": 1, "an": 1, "one": 1, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "two": 2,
    "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    # French
    "un": 1, "une": 1, "deux": 2, "trois": 3, "quatre": 4, "cinq": 5, "sept": 7, "huit": 8, "neuf": 9,
    "dix": 10, "onze": 11, "douze": 12, "treize": 13, "quatorze": 14, "quinze": 15, "seize": 16,
    "vingt": 20, "trente": 30, "quelques": 3,
    # German
    "ein": 1, "eine": 1, "einem": 1, "einer": 1, "einen": 1, "zwei": 2, "drei": 3, "vier": 4, "fünf": 5,
    "sechs": 6, "sieben": 7, "acht": 8, "neun": 9, "zehn": 10, "elf": 11, "zwölf": 12, "dreizehn": 13,
    "vierzehn": 14, "fünfzehn": 15, "sechzehn": 16, "zwanzig": 20, "dreißig": 30, "paar": 2, "ein paar": 2,
}  # fmt: skip
for _tens, _value in (("twenty", 20), ("thirty", 30)):
    for _unit, _n in _UNITS_EN.items():
        _NUMBER_WORDS[f"{_tens}-{_unit}"] = _NUMBER_WORDS[f"{_tens} {_unit}"] = _value + _n
_NUMBER = (
    r"(?P<count>\d{1,3}|"
    + "|".join(sorted((re.escape(w) for w in _NUMBER_WORDS), key=len, reverse=True))
    + r")"
)
_KANJI_DIGITS = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_JA_NUMBER = r"(?P<count>[0-9０-９]{1,3}|[一二三四五六七八九十]{1,3})"

# unit word → (days, months): one of the two is zero
_UNIT_WORDS: dict[str, tuple[int, int]] = {
    "day": (1, 0), "days": (1, 0), "week": (7, 0), "weeks": (7, 0), "fortnight": (14, 0),
    "fortnights": (14, 0), "month": (0, 1), "months": (0, 1), "year": (0, 12), "years": (0, 12),
    "jour": (1, 0), "jours": (1, 0), "semaine": (7, 0), "semaines": (7, 0), "mois": (0, 1), "an": (0, 12),
    "ans": (0, 12), "année": (0, 12), "années": (0, 12),
    "tag": (1, 0), "tage": (1, 0), "tagen": (1, 0), "woche": (7, 0), "wochen": (7, 0), "monat": (0, 1),
    "monate": (0, 1), "monaten": (0, 1), "jahr": (0, 12), "jahre": (0, 12), "jahren": (0, 12),
    "日": (1, 0), "日間": (1, 0), "週間": (7, 0), "週": (7, 0), "ヶ月": (0, 1), "か月": (0, 1),
    "カ月": (0, 1), "ヵ月": (0, 1), "箇月": (0, 1), "年": (0, 12),
}  # fmt: skip
_UNIT = (
    r"(?P<unit>"
    + "|".join(sorted((re.escape(u) for u in _UNIT_WORDS if re.match(r"[a-zé]", u)), key=len, reverse=True))
    + r")"
)
_JA_UNIT = r"(?P<unit>日間|日|週間|週|ヶ月|か月|カ月|ヵ月|箇月|年)"

_WEEKDAYS: dict[str, int] = {}
for _weekday_names in (
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
    ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"),
    ("montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag"),
):
    _WEEKDAYS.update({name: index for index, name in enumerate(_weekday_names)})
_WEEKDAYS["sonnabend"] = 5
_WEEKDAY = r"(?P<weekday>" + "|".join(_WEEKDAYS) + r")"
_JA_WEEKDAYS = {"月": 0, "火": 1, "水": 2, "木": 3, "金": 4, "土": 5, "日": 6}

_MONTHS: dict[str, int] = {}
for _month_names in (
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"),
    ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
     "novembre", "décembre"),
    ("januar", "februar", "märz", "april", "mai", "juni", "juli", "august", "september", "oktober",
     "november", "dezember"),
):  # fmt: skip
    _MONTHS.update({name: index for index, name in enumerate(_month_names, start=1)})
_MONTHS.update({name[:3]: index for name, index in list(_MONTHS.items())[:12]})
_MONTHS.update({"sept": 9, "jänner": 1, "maerz": 3, "fevrier": 2, "aout": 8, "decembre": 12})
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_NO_YEAR = r"(?!,?\s*\d{4}|\d)"
_ORDINAL = r"(?:st|nd|rd|th|er|e|ème)?"


def _count(text: str) -> int:
    text = text.lower().translate(str.maketrans("０１２３４５６７８９", "0123456789"))
    if text.isdigit():
        return int(text)
    if text in _NUMBER_WORDS:
        return _NUMBER_WORDS[text]
    # kanji numerals: 三, 十, 十四, 二十, 二十一
    tens, _, units = text.partition("十")
    if "十" in text:
        return (_KANJI_DIGITS.get(tens, 1) if tens else 1) * 10 + _KANJI_DIGITS.get(units, 0)
    return _KANJI_DIGITS.get(text, 0)


def _offset(day: date, count: int, unit: str, sign: int) -> date:
    days, months = _UNIT_WORDS[unit.lower()]
    if months:
        return add_months(day, sign * count * months)
    return day + timedelta(days=sign * count * days)


def _upcoming(day: date, weekday: int) -> date:
    """The first such weekday after ``day``: how "next Friday", "this Friday" and "Friday" are most often
    meant, and the only reading that never skips a week."""
    return day + timedelta(days=(weekday - day.weekday() - 1) % 7 + 1)


def _previous(day: date, weekday: int) -> date:
    return day - timedelta(days=(day.weekday() - weekday - 1) % 7 + 1)


def _in_next_week(day: date, weekday: int) -> date:
    """That weekday of the calendar week after ``day``'s (来週の金曜日)."""
    return day + timedelta(days=7 - day.weekday() + weekday)


def _saturday(day: date, weeks_ahead: int) -> date:
    return day + timedelta(days=(5 - day.weekday()) % 7 + 7 * weeks_ahead)


def _end_of_month(day: date, months_ahead: int) -> date:
    first_of_next = add_months(day.replace(day=1), months_ahead + 1)
    return first_of_next - timedelta(days=1)


def year_for(today: date, month: int, day: int, past: bool) -> date | None:
    """A year-less calendar date in the year it most likely means: told in the past tense, the latest
    such day not after ``today``; otherwise the next one from a week ago on, since plans are what people
    date ("March 3" said in December is next March; "November 18" said on November 20 is two days ago)."""
    candidates: list[date] = []
    for year in (today.year - 1, today.year, today.year + 1):
        try:
            candidates.append(date(year, month, day))
        except ValueError:
            continue
    if past:
        return max((c for c in candidates if c <= today), default=None)
    return min((c for c in candidates if (today - c).days <= 7), default=None)


def _day_of_month(today: date, day: int) -> date | None:
    """ "The 14th": this month's if it has not passed by more than a few days, else next month's."""
    for months in (0, 1, 2):
        month_start = add_months(today.replace(day=1), months)
        try:
            candidate = month_start.replace(day=day)
        except ValueError:
            continue
        if (today - candidate).days <= 3:
            return candidate
    return None


def _past_tense(text: str) -> bool:
    return _PAST.search(text) is not None


_PAST = re.compile(
    r"\b(?:was|were|did|had|went|came|saw|met|got|told|said|spoke|heard|ago|last|yesterday|hier|gestern|"
    r"war|waren|hatte|étais|était|suis\s+allée?|ai\s+vu)\b",
    re.I,
)
# "hier" is French for yesterday and German for here
_GERMAN = re.compile(r"\b(?:ich|und|der|die|das|ist|nicht|wir|mit|bin|sind|auf|für|noch|schon)\b", re.I)


# --- the patterns ----------------------------------------------------------------------------------------

Firmness = Literal["strong", "weak"]
Kind = Literal["meaning", "estimated"]
_Resolver = Callable[[re.Match[str], date, str], date | None]


@dataclass(frozen=True, slots=True)
class _Rule:
    patterns: tuple[re.Pattern[str], ...]
    kind: Kind
    firmness: Firmness
    resolve: _Resolver


def _rule(pattern: str, kind: Kind, firmness: Firmness, resolve: _Resolver, flags: int = re.I) -> _Rule:
    """One rule; ``||`` separates alternatives that name the same groups."""
    return _Rule(tuple(re.compile(p, flags) for p in pattern.split("||")), kind, firmness, resolve)


def _days(n: int) -> _Resolver:
    return lambda m, d, t: d + timedelta(days=n)


def _forward(m: re.Match[str], d: date, t: str) -> date:
    return _offset(d, _count(m["count"]), m["unit"], 1)


def _back(m: re.Match[str], d: date, t: str) -> date:
    return _offset(d, -_count(m["count"]), m["unit"], 1)


def _weekday_rule(direction: Literal["upcoming", "previous", "next_week", "context"]) -> _Resolver:
    def resolve(m: re.Match[str], d: date, text: str) -> date:
        name = m["weekday"]
        weekday = _JA_WEEKDAYS[name] if name in _JA_WEEKDAYS else _WEEKDAYS[name.lower()]
        if direction == "previous" or (direction == "context" and _past_tense(text)):
            return _previous(d, weekday)
        if direction == "next_week":
            return _in_next_week(d, weekday)
        return _upcoming(d, weekday)

    return resolve


def _nth(m: re.Match[str], d: date, t: str) -> date | None:
    return _day_of_month(d, int(m["day"]))


def _month_day(m: re.Match[str], d: date, t: str) -> date | None:
    return year_for(d, _MONTHS[m["month"].lower()], int(m["day"]), _past_tense(t))


_RULES: tuple[_Rule, ...] = (
    # named days, longest first so "the day after tomorrow" is not read as "tomorrow"
    _rule(
        r"\b(?:the\s+)?day\s+after\s+tomorrow\b|\bapr[èe]s-demain\b|\bübermorgen\b",
        "meaning",
        "strong",
        _days(2),
    ),
    _rule(r"明後日|あさって", "meaning", "strong", _days(2), 0),
    _rule(
        r"\b(?:the\s+)?day\s+before\s+yesterday\b|\bavant-hier\b|\bvorgestern\b",
        "meaning",
        "strong",
        _days(-2),
    ),
    _rule(r"一昨日|おととい", "meaning", "strong", _days(-2), 0),
    # offsets: "in ten days", "a week from today", "dans 4 jours", "in drei Tagen", "3日後"
    _rule(
        rf"\b(?:in|within|dans|d'ici)\s+(?:about\s+|around\s+|roughly\s+|another\s+|environ\s+|etwa\s+)?{_NUMBER}\s+{_UNIT}\b",
        "meaning",
        "strong",
        _forward,
    ),
    _rule(rf"\b{_NUMBER}\s+{_UNIT}\s+(?:from\s+(?:now|today)|hence)\b", "meaning", "strong", _forward),
    # "a week today", "a fortnight tomorrow"
    _rule(rf"\b{_NUMBER}\s+{_UNIT}\s+today\b", "meaning", "strong", _forward),
    _rule(
        rf"\b{_NUMBER}\s+{_UNIT}\s+from\s+tomorrow\b",
        "meaning",
        "strong",
        lambda m, d, t: _forward(m, d, t) + timedelta(days=1),
    ),
    _rule(
        rf"\b{_NUMBER}\s+{_UNIT}\s+ago\b||\bil\s+y\s+a\s+{_NUMBER}\s+{_UNIT}\b||\bvor\s+{_NUMBER}\s+{_UNIT}\b",
        "meaning",
        "strong",
        _back,
    ),
    _rule(rf"{_JA_NUMBER}\s*{_JA_UNIT}\s*(?:後|先)", "meaning", "strong", _forward, 0),
    _rule(rf"{_JA_NUMBER}\s*{_JA_UNIT}\s*前", "meaning", "strong", _back, 0),
    _rule(r"\bdans\s+une\s+quinzaine\b", "estimated", "strong", _days(14)),
    # weekdays with a qualifier
    _rule(
        rf"\b(?:next|this|coming|this\s+coming)\s+{_WEEKDAY}\b||\b{_WEEKDAY}\s+prochain\b||\bce\s+{_WEEKDAY}\b||\b(?:nächste[nrs]?|kommende[nrs]?|diese[nrs]?)\s+{_WEEKDAY}\b",
        "meaning",
        "strong",
        _weekday_rule("upcoming"),
    ),
    _rule(
        rf"\blast\s+{_WEEKDAY}\b||\b{_WEEKDAY}\s+derni[eè]r\b||\bletzte[nrs]?\s+{_WEEKDAY}\b",
        "meaning",
        "strong",
        _weekday_rule("previous"),
    ),
    _rule(r"来週の?(?P<weekday>[月火水木金土日])曜", "meaning", "strong", _weekday_rule("next_week"), 0),
    _rule(
        r"(?:次の|今度の|今週の)(?P<weekday>[月火水木金土日])曜",
        "meaning",
        "strong",
        _weekday_rule("upcoming"),
        0,
    ),
    # weeks, months, years, weekends, month ends
    _rule(r"\bthe\s+week\s+after\s+next\b", "estimated", "strong", _days(14)),
    _rule(r"再来週", "estimated", "strong", _days(14), 0),
    _rule(
        r"\bnext\s+week\b|\bla\s+semaine\s+prochaine\b|\bnächste\s+woche\b|来週",
        "estimated",
        "strong",
        _days(7),
    ),
    _rule(
        r"\blast\s+week\b|\bla\s+semaine\s+derni[eè]re\b|\bletzte\s+woche\b|先週",
        "estimated",
        "strong",
        _days(-7),
    ),
    _rule(
        r"\bnext\s+month\b|\ble\s+mois\s+prochain\b|\bnächste[nr]?\s+monat\b|来月",
        "estimated",
        "strong",
        lambda m, d, t: add_months(d, 1),
    ),
    _rule(
        r"\blast\s+month\b|\ble\s+mois\s+dernier\b|\bletzte[nr]?\s+monat\b|先月",
        "estimated",
        "strong",
        lambda m, d, t: add_months(d, -1),
    ),
    _rule(
        r"\bnext\s+year\b|\bl'ann[ée]e\s+prochaine\b|\bnächste[ns]?\s+jahr\b|来年",
        "estimated",
        "strong",
        lambda m, d, t: add_months(d, 12),
    ),
    _rule(
        r"\bnext\s+weekend\b|\ble\s+week-end\s+prochain\b|\bnächste[ns]?\s+wochenende\b",
        "meaning",
        "strong",
        lambda m, d, t: _saturday(d, 1),
    ),
    _rule(
        r"\bthis\s+weekend\b|\bce\s+week-end\b|\b(?:am|dieses|diesem)\s+wochenende\b|今週末|週末",
        "meaning",
        "strong",
        lambda m, d, t: _saturday(d, 0),
    ),
    _rule(
        r"\b(?:the\s+)?end\s+of\s+next\s+month\b|\bfin\s+du\s+mois\s+prochain\b|\bende\s+nächsten\s+monats\b|来月末",
        "estimated",
        "strong",
        lambda m, d, t: _end_of_month(d, 1),
    ),
    _rule(
        r"\b(?:the\s+)?end\s+of\s+(?:the|this)\s+month\b|\bfin\s+du\s+mois\b|\bende\s+des\s+monats\b|\bmonatsende\b|今月末|月末",
        "estimated",
        "strong",
        lambda m, d, t: _end_of_month(d, 0),
    ),
    # calendar dates without a year
    _rule(rf"\b{_MONTH}\s+(?P<day>\d{{1,2}}){_ORDINAL}\b{_NO_YEAR}", "meaning", "strong", _month_day),
    _rule(
        rf"\b(?P<day>\d{{1,2}}){_ORDINAL}\.?\s+(?:of\s+)?{_MONTH}(?=\W|$){_NO_YEAR}",
        "meaning",
        "strong",
        _month_day,
    ),
    _rule(
        r"(?<![年\d])(?P<month>\d{1,2})月(?P<day>\d{1,2})日",
        "meaning",
        "strong",
        lambda m, d, t: year_for(d, int(m["month"]), int(m["day"]), _past_tense(t)),
        0,
    ),
    _rule(
        r"\b(?:on|by|until|till|before|after|from|for)\s+the\s+(?P<day>\d{1,2})(?:st|nd|rd|th)\b(?!\s+(?:time|floor|row|place|attempt))",
        "meaning",
        "strong",
        _nth,
    ),
    # named days and bare weekdays: they date what else a sentence says
    _rule(r"\bthe\s+(?P<day>\d{1,2})(?:st|nd|rd|th)\b", "meaning", "weak", _nth),
    _rule(
        r"\btomorrow\b|\bdemain\b|(?<!guten )(?<!heute )(?<!am )(?<!jeden )\bmorgen\b|明日|あした",
        "meaning",
        "weak",
        _days(1),
    ),
    _rule(r"\byesterday\b|\bgestern\b|昨日|きのう", "meaning", "weak", _days(-1)),
    _rule(
        r"\bhier\b", "meaning", "weak", lambda m, d, t: None if _GERMAN.search(t) else d - timedelta(days=1)
    ),
    _rule(
        r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b|\baujourd'hui\b|\bce\s+soir\b|\bheute\b|今日|今夜|今晩",
        "meaning",
        "weak",
        _days(0),
    ),
    _rule(rf"\b(?:on\s+|am\s+)?{_WEEKDAY}\b", "meaning", "weak", _weekday_rule("context")),
    _rule(r"(?P<weekday>[月火水木金土])曜日?", "meaning", "weak", _weekday_rule("upcoming"), 0),
)


@dataclass(frozen=True, slots=True)
class DateMention:
    start: int
    end: int
    kind: Kind
    firmness: Firmness
    day: date


def date_mentions(text: str, today: date) -> list[DateMention]:
    """Every relative or year-less date in ``text`` with the day it names, in order of appearance; where
    two expressions overlap, the rule listed first (the longer, firmer one) wins."""
    found: list[DateMention] = []
    for rule in _RULES:
        for match in (m for pattern in rule.patterns for m in pattern.finditer(text)):
            if any(m.start < match.end() and match.start() < m.end for m in found):
                continue
            try:
                day = rule.resolve(match, today, text)
            except (KeyError, ValueError, OverflowError):
                continue
            if day is not None:
                found.append(DateMention(match.start(), match.end(), rule.kind, rule.firmness, day))
    return sorted(found, key=lambda m: m.start)


def date_firmness(text: str) -> Firmness | None:
    """How firmly ``text`` names a day: ``strong`` is worth remembering for that alone; ``weak`` only for
    a day to come ("tomorrow", "on Friday"), since what went on today or yesterday is how the day went
    ("my inbox has been a mess today")."""
    mentions = date_mentions(text, _ANY_DAY)
    if any(m.firmness == "strong" for m in mentions):
        return "strong"
    return "weak" if any(m.day > _ANY_DAY for m in mentions) else None


def firm_date_mentioned(text: str) -> bool:
    return date_firmness(text) == "strong"


_ANY_DAY = date(2001, 1, 1)


def resolve_relative_dates(text: str, day: date) -> str:
    """``(meaning Jan 6, 2026)``-style annotations for the dates in ``text``, or ``""``."""
    notes = dict.fromkeys(f"({m.kind} {format_date(m.day)})" for m in date_mentions(text, day))
    return " ".join(notes)
