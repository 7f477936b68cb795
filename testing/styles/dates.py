"""Relative dates as people say them, in the languages of the project's seeds and German, with the day
each one means against the moment it is said."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta

EN_NUMBERS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)  # fmt: skip
FR_NUMBERS = (
    "zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf", "dix", "onze", "douze",
)  # fmt: skip
DE_NUMBERS = (
    "null", "einem", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf",
    "zwölf",
)  # fmt: skip
EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
FR_WEEKDAYS = ("lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche")
DE_WEEKDAYS = ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag")

# a phrase maker: (rng, today) -> (phrase, the day it means)
Phrase = Callable[[random.Random, date], tuple[str, date]]


def _coming(today: date, weekday: int) -> date:
    """The first ``weekday`` strictly after today."""
    ahead = (weekday - today.weekday()) % 7 or 7
    return today + timedelta(days=ahead)


def _in_days_en(rng: random.Random, today: date) -> tuple[str, date]:
    days = rng.randint(3, 20)
    count = rng.choice((EN_NUMBERS[days], str(days)))
    frame = rng.choice(("in {n} days", "{n} days from now", "in {n} days' time", "{n} days from today"))
    return frame.format(n=count), today + timedelta(days=days)


def _weeks_en(rng: random.Random, today: date) -> tuple[str, date]:
    weeks = rng.randint(1, 3)
    if weeks == 1:
        phrase = rng.choice(("a week from today", "one week from today", "in a week", "a week today"))
    elif weeks == 2:
        phrase = rng.choice(("two weeks from today", "in a fortnight", "in two weeks", "a fortnight today"))
    else:
        phrase = rng.choice(("three weeks from today", "in three weeks", "three weeks from now"))
    return phrase, today + timedelta(weeks=weeks)


def _after_next_en(rng: random.Random, today: date) -> tuple[str, date]:
    weekday = rng.randrange(7)
    return f"the {EN_WEEKDAYS[weekday]} after next", _coming(today, weekday) + timedelta(days=7)


def _this_coming_en(rng: random.Random, today: date) -> tuple[str, date]:
    weekday = rng.randrange(7)
    return f"this coming {EN_WEEKDAYS[weekday]}", _coming(today, weekday)


def _day_after_tomorrow_en(rng: random.Random, today: date) -> tuple[str, date]:
    return rng.choice(("the day after tomorrow", "day after tomorrow")), today + timedelta(days=2)


def _dans_jours(rng: random.Random, today: date) -> tuple[str, date]:
    days = rng.randint(3, 12)
    return f"dans {rng.choice((FR_NUMBERS[days], str(days)))} jours", today + timedelta(days=days)


def _semaines_fr(rng: random.Random, today: date) -> tuple[str, date]:
    weeks = rng.randint(1, 3)
    phrase = "dans une semaine" if weeks == 1 else f"dans {FR_NUMBERS[weeks]} semaines"
    return phrase, today + timedelta(weeks=weeks)


def _apres_demain(rng: random.Random, today: date) -> tuple[str, date]:
    return "après-demain", today + timedelta(days=2)


def _in_tagen(rng: random.Random, today: date) -> tuple[str, date]:
    days = rng.randint(3, 12)
    return f"in {rng.choice((DE_NUMBERS[days], str(days)))} Tagen", today + timedelta(days=days)


def _wochen_de(rng: random.Random, today: date) -> tuple[str, date]:
    weeks = rng.randint(1, 3)
    if weeks == 1:
        phrase = rng.choice(("in einer Woche", "heute in einer Woche"))
    else:
        phrase = f"in {DE_NUMBERS[weeks]} Wochen"
    return phrase, today + timedelta(weeks=weeks)


def _uebermorgen(rng: random.Random, today: date) -> tuple[str, date]:
    return "übermorgen", today + timedelta(days=2)


def _nichigo(rng: random.Random, today: date) -> tuple[str, date]:
    days = rng.randint(2, 14)
    return f"{days}日後", today + timedelta(days=days)


def _shuukan_go(rng: random.Random, today: date) -> tuple[str, date]:
    weeks = rng.randint(1, 3)
    return f"{weeks}週間後", today + timedelta(weeks=weeks)


PHRASES: dict[str, tuple[Phrase, ...]] = {
    "en": (_in_days_en, _weeks_en, _after_next_en, _this_coming_en, _day_after_tomorrow_en),
    "fr": (_dans_jours, _semaines_fr, _apres_demain),
    "de": (_in_tagen, _wochen_de, _uebermorgen),
    "ja": (_nichigo, _shuukan_go),
}
