"""A household: children, appointments, bills, chores, the people who help out."""

from __future__ import annotations

import random

from testing.styles.compose import (
    CITIES,
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
from testing.styles.dates import EN_WEEKDAYS

SUPPLIERS = ("Octopus", "Vattenfall", "EDF", "Eneco", "Ovo", "Greenchoice", "E.ON", "Bulb")
PLUMBERS = (
    "FixRight Plumbing",
    "Van Dijk Installaties",
    "Aqua Pro",
    "Boiler Bros",
    "Heatwise",
    "PipeLine & Sons",
)
SCHOOLS = (
    "St Mary's Primary",
    "De Regenboog",
    "Oakfield School",
    "the Montessori on Elm Street",
    "Riverside Primary",
)
CHORES = ("bins", "laundry", "dishes", "hoovering", "dog walk", "bathroom", "groceries", "plants")


def _pin(rng: random.Random) -> str:
    words = ("otter", "maple", "comet", "lemon", "harbor", "violet", "pepper", "falcon", "cobalt", "juniper")
    return f"{rng.choice(words)}-{rng.choice(words)}-{rng.randint(10, 99)}"


SLOTS = (
    Slot(
        "allergy",
        "Mia's allergy",
        lambda r: r.choice(("peanuts", "sesame", "kiwi", "egg", "shellfish", "tree nuts")),
        (
            "Mia is allergic to {v}, seriously allergic.",
            "Our youngest can't have {v} — proper allergy, epipen and all.",
            "Reminder for any recipes: the little one reacts to {v}.",
        ),
        "high",
        offered=False,
    ),
    Slot(
        "plumber",
        "the plumber",
        lambda r: r.choice(PLUMBERS),
        (
            "We're using {v} for the boiler.",
            "The plumber we trust is {v}.",
            "{v} fixed the leak last time, we'll call them again.",
        ),
        "medium",
        lambda r: f"{money(r, 45, 120, 5, '€')} call-out, {r.randint(3, 5)}.{r.randint(0, 9)} stars",
    ),
    Slot(
        "supplier",
        "the energy supplier",
        lambda r: r.choice(SUPPLIERS),
        (
            "Our energy supplier is {v}.",
            "We switched electricity to {v}.",
            "Gas and power both come from {v} now.",
        ),
        "medium",
        lambda r: f"{r.randint(22, 39)}c/kWh, {r.choice(('fixed', 'variable'))}",
    ),
    Slot(
        "school-pickup",
        "the school pickup time",
        clock,
        (
            "School pickup is at {v}.",
            "We have to be at the gate by {v} for pickup.",
            "Pickup's {v} on weekdays.",
        ),
        "high",
        lambda r: r.choice(("after-school club", "gate B", "early on Wednesdays")),
        clock_renderings,
    ),
    Slot(
        "babysitter",
        "the babysitter",
        person,
        ("Our babysitter is {v}.", "{v} babysits on Fridays.", "The kids love {v}, our sitter."),
        "medium",
        lambda r: f"{money(r, 9, 18, 1, '€')}/hour",
    ),
    Slot(
        "wifi",
        "the wifi password",
        _pin,
        ("The wifi password is {v}.", "New wifi password: {v}.", "Guests keep asking, the wifi is {v}."),
        "medium",
        offered=False,
    ),
    Slot(
        "rent",
        "the rent",
        lambda r: money(r, 900, 2900, 10),
        ("Rent is {v} a month.", "We pay {v} in rent.", "Monthly rent: {v}, bills not included."),
        "high",
        None,
        money_renderings,
        offered=False,
    ),
    Slot(
        "school",
        "the school",
        lambda r: r.choice(SCHOOLS),
        ("The kids go to {v}.", "Noah starts at {v} in September.", "We picked {v} for the boys."),
        "medium",
        lambda r: f"{r.randint(8, 25)} min walk, {r.choice(('outstanding', 'good', 'new head'))}",
    ),
    Slot(
        "vet",
        "the vet appointment time",
        clock,
        (
            "The cat's vet appointment is at {v}.",
            "Vet at {v}, don't let me forget.",
            "Booked the vet for {v}.",
        ),
        "medium",
        lambda r: r.choice(("with Dr Haddad", "walk-in slot", "the clinic on Main St")),
        clock_renderings,
    ),
    Slot(
        "dinner-guests",
        "Saturday's dinner",
        lambda r: r.choice(("lasagne", "a curry", "paella", "tacos", "a roast", "ramen")),
        (
            "We're doing {v} for the Saturday dinner.",
            "Menu on Saturday: {v}.",
            "Saturday: {v} for eight people.",
        ),
        "low",
        lambda r: r.choice(("easy to scale", "can be made ahead", "kid-friendly", "vegetarian option")),
    ),
)


def _rota(b: Builder, talk: Talk) -> None:
    names = [b.fresh(first_name) for _ in range(3)]
    rows = [[day, b.rng.choice(names), b.rng.choice(CHORES)] for day in EN_WEEKDAYS[: b.rng.randint(5, 7)]]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "this week's chore rota",
        ["Day", "Who", "Chore"],
        rows,
        [Cell(f"rota-{rows[row][0]}", row, 1, "low")],
        talk,
        False,
    )


def _bills(b: Builder, talk: Talk, as_csv: bool = True) -> None:
    bills = ["Electricity", "Water", "Internet", "Council tax", "Phone", "Insurance", "Streaming"]
    b.rng.shuffle(bills)
    rows = [
        [bill, f"{b.rng.randint(9, 240)}.{b.rng.randint(0, 99):02d}", f"{b.rng.randint(1, 28)}"]
        for bill in bills[:5]
    ]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "our monthly bills",
        ["bill", "amount", "due_day"],
        rows,
        [Cell(f"bill-{rows[row][0]}", row, 1, "medium")],
        talk,
        as_csv,
    )


def _thermostat(b: Builder, talk: Talk) -> None:
    setpoint = b.fresh(lambda r: f"{r.randint(17, 22)}.{r.choice((0, 5))}")
    document = {
        "device": "hallway-thermostat",
        "mode": b.rng.choice(("eco", "comfort")),
        "setpoint_c": float(setpoint),
        "schedule": {"weekday": "06:30-22:00", "weekend": "08:00-23:00"},
    }
    paste_json(
        b,
        "",
        document,
        [("setpoint", setpoint, "low")],
        talk,
        via_tool=("home_status", {"device": "thermostat"}),
    )


def _meter(rng: random.Random, value: str) -> str:
    return (
        f"Meter 2231-A\nperiod: last 30 days\nelectricity: {value}\ngas: {rng.randint(20, 140)} m³\n"
        f"estimated cost: €{rng.randint(40, 300)}"
    )


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _rota), ("csv", _bills), ("json", _thermostat)),
    events=(
        Event(
            "boiler-service", ("the boiler service is {when}", "the heating engineer comes {when}"), "medium"
        ),
        Event("parents-evening", ("parents' evening is {when}", "Noah's school play is {when}"), "medium"),
        Event(
            "copro-fr",
            ("La réunion de copropriété est {when}.", "Le syndic passe {when} pour la fuite."),
            "medium",
            "fr",
        ),
        Event(
            "heating-de",
            ("Die Heizungswartung ist {when}.", "Der Schornsteinfeger kommt {when}."),
            "medium",
            "de",
        ),
    ),
    third_person=(
        Said(
            "neighbour-plants",
            (
                "{name} next door waters the plants while we're away in {v}.",
                "{name} from number 12 feeds the cat while we're in {v}.",
            ),
            lambda r: r.choice(CITIES),
            "medium",
            True,
        ),
        Said(
            "carpool",
            ("{name} runs the school carpool on {v}.", "{name} does the swimming run every {v}."),
            lambda r: r.choice(EN_WEEKDAYS[:5]) + "s",
            "medium",
            True,
        ),
    ),
    lowercase=(
        Said(
            "bins",
            ("bins go out on {v} night", "recycling gets collected every {v} morning"),
            lambda r: r.choice(EN_WEEKDAYS),
            "low",
        ),
        Said(
            "rent-day",
            ("rent goes out on the {v} of the month", "the nursery fee is due on the {v}"),
            lambda r: r.choice(("1st", "3rd", "15th", "25th", "28th")),
            "medium",
        ),
    ),
    foreign=(
        Said(
            "nanny-fr",
            ("La nounou arrive à {v} le mercredi.", "Nathalie récupère les enfants à {v}."),
            clock,
            "high",
            language="fr",
        ),
        Said(
            "tradesman-de",
            ("Der Handwerker kommt am Donnerstag um {v} Uhr.", "Der Elektriker ist um {v} Uhr da."),
            clock,
            "medium",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "electricity-use",
            "smart_meter",
            {"period": "30d"},
            lambda r: f"{r.randint(180, 690)} kWh",
            _meter,
            ("electricity",),
            "low",
        ),
    ),
)

TALK = Talk(
    questions=(
        "How do I get limescale out of the kettle?",
        "Any quick dinners the kids will actually eat?",
        "How often should we service the boiler?",
        "What's a sensible weekly food budget for four?",
        "How do I get a toddler to sleep past six?",
        "Is it worth fixing an old washing machine?",
        "How do I get red wine out of a carpet?",
        "How do we split chores fairly?",
        "Any rainy-day activities?",
        "How do I keep basil alive on the windowsill?",
        "Should we get a dishwasher with a cutlery drawer?",
        "How do I talk to the landlord about the damp?",
        "Any tips for packed lunches?",
    ),
    advice=(
        "A shared calendar everyone can see saves a lot of repeated questions.",
        "Batch-cooking on Sunday makes weekday evenings calmer.",
        "White vinegar handles most limescale; let it sit for an hour.",
        "Rotating chores weekly stops anyone feeling stuck with the worst one.",
        "Write the appointment and the reminder in the same place.",
        "Kids cope better with changes when they hear about them a few days ahead.",
        "A small emergency fund for repairs takes the sting out of surprises.",
    ),
    asides=(
        "The dog ate a sock again.",
        "Noah lost another tooth!",
        "We're all a bit sick this week.",
        "The washing pile is winning.",
    ),
    topics=(
        "the morning routine",
        "meal planning",
        "the school run",
        "splitting chores",
        "the energy bill",
        "screen time",
        "the damp in the bathroom",
    ),
)

STYLE = style(
    "household", "running a household: kids, appointments, bills, chores, helpers", TALK, VOCABULARY
)
