"""Planning a wedding: venue, suppliers, guests and RSVPs, the timings of the day."""

from __future__ import annotations

import random

from testing.styles.compose import (
    Builder,
    Cell,
    Event,
    Said,
    Slot,
    Talk,
    ToolReading,
    Vocabulary,
    clock,
    clock_renderings,
    first_name,
    money,
    money_renderings,
    paste_json,
    paste_rows,
    person,
    style,
)

VENUES = (
    "the Old Boathouse", "Château de Vauclair", "Hof Lindenberg", "the Glasshouse at Kew Row",
    "Villa Rosmarino",
    "the Mill at Ashby", "Quinta da Serra", "the Orangery",
)  # fmt: skip
CATERERS = ("Fork & Fig", "La Table de Jeanne", "Smoke & Salt", "Green Plate Catering", "The Hungry Heron")
CAKES = (
    "lemon and elderflower",
    "chocolate and salted caramel",
    "carrot cake",
    "raspberry and pistachio",
    "vanilla sponge",
)
COLOURS = ("sage and ivory", "dusty blue", "terracotta and cream", "burgundy and gold", "lavender")


SLOTS = (
    Slot(
        "venue",
        "the venue",
        lambda r: r.choice(VENUES),
        ("We're getting married at {v}.", "The venue is {v}.", "Booked {v} for the ceremony and party."),
        "high",
        lambda r: f"{money(r, 3000, 14000, 100, '€')} hire, {r.randint(80, 200)} guests max",
    ),
    Slot(
        "caterer",
        "the caterer",
        lambda r: r.choice(CATERERS),
        ("{v} is doing the food.", "Caterer: {v}.", "We went with {v} for catering."),
        "medium",
        lambda r: f"{money(r, 45, 140, 5, '€')} per head",
    ),
    Slot(
        "guest-count",
        "the guest count",
        lambda r: str(r.randint(40, 190)),
        ("We're at {v} guests.", "Final guest count is {v}.", "{v} people are coming."),
        "high",
        offered=False,
    ),
    Slot(
        "photographer",
        "the photographer",
        person,
        ("Our photographer is {v}.", "{v} is shooting the day.", "We booked {v} for photos."),
        "medium",
        lambda r: f"{money(r, 900, 3900, 50, '€')}, {r.randint(6, 12)} hours",
    ),
    Slot(
        "cake",
        "the cake flavour",
        lambda r: r.choice(CAKES),
        ("The cake is {v}.", "Cake flavour: {v}.", "We're having {v} cake."),
        "low",
        lambda r: r.choice(("crowd-pleaser", "nut-free", "not too sweet")),
    ),
    Slot(
        "colours",
        "the colour scheme",
        lambda r: r.choice(COLOURS),
        ("Colours are {v}.", "The palette is {v}.", "We're doing {v} for everything."),
        "low",
        lambda r: r.choice(("works in autumn", "matches the venue", "easy for the florist")),
    ),
    Slot(
        "budget",
        "the wedding budget",
        lambda r: money(r, 9000, 60000, 500),
        ("Total budget is {v}.", "We can't go over {v} for the whole wedding.", "Budget: {v}, all in."),
        "high",
        None,
        money_renderings,
        offered=False,
    ),
    Slot(
        "ceremony-time",
        "the ceremony time",
        clock,
        ("The ceremony starts at {v}.", "We say our vows at {v}.", "Ceremony: {v} sharp."),
        "high",
        lambda r: r.choice(("golden-hour photos", "leaves time for drinks", "matches the registrar")),
        clock_renderings,
    ),
    Slot(
        "band",
        "the music",
        lambda r: r.choice(("a swing band", "a DJ", "a string quartet", "a ceilidh band", "a jazz trio")),
        ("For music we booked {v}.", "Music: {v}.", "We're having {v} in the evening."),
        "low",
        lambda r: f"{money(r, 600, 3200, 50, '€')}",
    ),
)


def _seating(b: Builder, talk: Talk) -> None:
    rows = [
        [f"Table {i + 1}", ", ".join(b.fresh(first_name) for _ in range(3))]
        for i in range(b.rng.randint(4, 7))
    ]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"seating-{rows[row][0]}", row, 1, "low")]
    paste_rows(b, "the seating plan draft", ["Table", "Guests"], rows, cells, talk, False)


def _rsvps(b: Builder, talk: Talk) -> None:
    meals = ("fish", "beef", "vegan", "vegetarian", "kids menu")
    rows = [
        [person(b.rng), b.rng.choice(("yes", "no", "maybe")), b.rng.choice(meals)]
        for _ in range(b.rng.randint(5, 8))
    ]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"rsvp-{rows[row][0]}", row, 2, "low")]
    paste_rows(b, "the RSVPs so far", ["name", "rsvp", "meal"], rows, cells, talk, True)


def _contract(b: Builder, talk: Talk) -> None:
    deposit = b.fresh(lambda r: money(r, 500, 5000, 100, "€"))
    document = {
        "contract": {
            "venue": b.rng.choice(VENUES),
            "deposit": deposit,
            "balanceDue": "30 days before",
            "curfew": "00:30",
        }
    }
    paste_json(b, "the venue contract summary", document, [("deposit", deposit, "medium")], talk)


def _rsvp_count(rng: random.Random, value: str) -> str:
    declined = f"declined: {rng.randint(5, 40)}"
    return f"invited: {rng.randint(120, 220)}\nconfirmed: {value}\n{declined}\npending: {rng.randint(0, 30)}"


def _day_forecast(rng: random.Random, value: str) -> str:
    return f"Saturday\nrain chance: {value}\nhigh: {rng.randint(14, 30)}°C\nwind: {rng.randint(5, 40)} km/h"


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _seating), ("csv", _rsvps), ("json", _contract)),
    events=(
        Event(
            "tasting",
            ("the menu tasting is {when}", "the cake tasting is {when}", "the final fitting is {when}"),
            "medium",
        ),
        Event("rehearsal", ("the rehearsal is {when}", "we meet the registrar {when}"), "high"),
        Event(
            "essayage-fr",
            ("L'essayage de la robe est {when}.", "La dégustation chez le traiteur est {when}."),
            "medium",
            "fr",
        ),
        Event(
            "standesamt-de", ("Der Termin beim Standesamt ist {when}.", "Die Probe ist {when}."), "high", "de"
        ),
    ),
    third_person=(
        Said(
            "planner",
            ("{name} at the venue says the music must stop at {v}.", "{name} needs final numbers by {v}."),
            clock,
            "high",
            True,
        ),
        Said(
            "officiant",
            ("{name} is officiating, she's coming from {v}.", "{name} will do a reading at {v}."),
            lambda r: r.choice(("Ghent", "Lyon", "the ceremony", "the dinner")),
            "medium",
            True,
        ),
    ),
    lowercase=(
        Said("speeches", ("speeches start at {v}", "first dance is at {v}"), clock, "medium"),
        Said(
            "shuttle", ("the shuttle leaves the hotel at {v}", "guest buses go back at {v}"), clock, "medium"
        ),
    ),
    foreign=(
        Said(
            "traiteur-fr",
            ("Le traiteur arrive à {v}.", "Le fleuriste livre à {v}."),
            clock,
            "medium",
            language="fr",
        ),
        Said(
            "trauung-de",
            ("Die Trauung beginnt um {v} Uhr.", "Der Sektempfang ist um {v} Uhr."),
            clock,
            "high",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "confirmed",
            "rsvp_summary",
            {},
            lambda r: str(r.randint(60, 190)),
            _rsvp_count,
            ("confirmed",),
            "high",
        ),
        ToolReading(
            "rain",
            "weather_forecast",
            {"day": "saturday"},
            lambda r: f"{r.randint(5, 80)}%",
            _day_forecast,
            ("rain",),
            "low",
        ),
    ),
    appositions=3,
)

TALK = Talk(
    questions=(
        "How early should invitations go out?",
        "How do we handle plus-ones?",
        "What's a fair tip for the suppliers?",
        "Can you draft the save-the-date text?",
        "How do we keep the speeches short?",
        "Do we need a wet-weather plan?",
        "How do we seat divorced parents?",
        "Any ideas for favours that aren't wasteful?",
        "What goes in a day-of timeline?",
    ),
    advice=(
        "Give every supplier the same one-page timeline with names and phone numbers.",
        "Pick one person to answer guests' questions on the day, not the couple.",
        "Build fifteen minutes of slack between the ceremony and photos.",
        "Ask the venue what's included before buying extras.",
        "Send the RSVP deadline a month earlier than you actually need it.",
    ),
    asides=(
        "My mum has opinions about the flowers.",
        "We argued about the playlist for an hour.",
        "Only 200 days to go!",
    ),
    topics=(
        "the seating plan",
        "the guest list",
        "the speeches",
        "the budget",
        "the dress",
        "the rain plan",
        "the playlist",
    ),
)

STYLE = style("wedding", "planning a wedding: venue, suppliers, guests, timings of the day", TALK, VOCABULARY)
