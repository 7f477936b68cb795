"""Moving abroad: visas, a flat, movers, registration appointments, money in two currencies."""

from __future__ import annotations

import random
from datetime import timedelta

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
    money,
    money_renderings,
    paste_json,
    paste_rows,
    style,
)
from testing.styles.facts import date_part, value_part

MOVERS = (
    "Atlas Relocations",
    "Crown Worldwide",
    "Santa Fe Relocation",
    "Nippon Express",
    "Gerson Relocation",
    "BoxShip Europe",
)
BANKS = ("N26", "ING", "Rakuten Bank", "Deutsche Bank", "BNP Paribas", "Wise", "Sumitomo Mitsui", "Revolut")
STREETS = (
    "Kastanienallee",
    "Rue des Martyrs",
    "Oranienstraße",
    "Calle Pez",
    "Nakameguro 2-chome",
    "Boulevard Voltaire",
    "Sonnenstraße",
)
DE_MONTHS = (
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
)


def _address(rng: random.Random) -> str:
    return f"{rng.choice(STREETS)} {rng.randint(2, 140)}"


SLOTS = (
    Slot(
        "city",
        "where we're moving",
        lambda r: r.choice(CITIES),
        (
            "We're moving to {v}.",
            "It's official, {v} it is.",
            "The new job is in {v}, so that's where we'll live.",
        ),
        "high",
        offered=False,
    ),
    Slot(
        "visa",
        "the visa type",
        lambda r: r.choice(
            (
                "Blue Card",
                "Highly Skilled Professional visa",
                "Talent Passport",
                "skilled worker visa",
                "working holiday visa",
            )
        ),
        ("I'm applying for the {v}.", "The employer is sponsoring a {v}.", "We're going for the {v}."),
        "high",
        lambda r: r.choice(("fastest processing", "lets my partner work", "needs a degree check")),
    ),
    Slot(
        "address",
        "the new flat's address",
        _address,
        ("The new flat is at {v}.", "Address for the forms: {v}.", "We signed for the place at {v}."),
        "high",
        offered=False,
    ),
    Slot(
        "movers",
        "the moving company",
        lambda r: r.choice(MOVERS),
        ("We went with {v} for the move.", "{v} is doing the packing.", "Movers: {v}."),
        "medium",
        lambda r: (
            f"quote {money(r, 2400, 9800, 50, '€')}, {r.choice(('door to door', 'sea freight', 'air + sea'))}"
        ),
    ),
    Slot(
        "bank",
        "the bank for the new account",
        lambda r: r.choice(BANKS),
        ("I'll open the account with {v}.", "Salary will go to {v}.", "We picked {v} for the local account."),
        "medium",
        lambda r: r.choice(("English app", "no fees", "branch near the office", "needs the residence card")),
    ),
    Slot(
        "container",
        "the container size",
        lambda r: r.choice(("20ft container", "40ft container", "shared container", "8 cubic metre crate")),
        ("We're shipping a {v}.", "Our stuff goes in a {v}."),
        "low",
        lambda r: f"{money(r, 1500, 6000, 100, '€')}",
    ),
    Slot(
        "deposit",
        "the deposit",
        lambda r: money(r, 1200, 7200, 100),
        ("The deposit is {v}.", "They want {v} as a deposit.", "Deposit: {v}, three months' rent."),
        "medium",
        None,
        money_renderings,
        offered=False,
    ),
    Slot(
        "school",
        "the international school",
        lambda r: r.choice(
            (
                "the British School",
                "Lycée Français",
                "the International School of Kansai",
                "Berlin Metropolitan School",
                "the Nordic school",
            )
        ),
        ("The kids are enrolled at {v}.", "We chose {v} for the kids."),
        "medium",
        lambda r: f"{money(r, 9000, 29000, 500, '€')}/year",
    ),
    Slot(
        "cat-flight",
        "the cat's flight",
        lambda r: f"{r.choice(('LH', 'KL', 'JL', 'AF'))} {r.randint(100, 999)}",
        ("The cat flies on {v} with us.", "Pet relocation booked: {v}."),
        "medium",
        lambda r: "cabin, under 8kg",
    ),
)


def _costs(b: Builder, talk: Talk) -> None:
    items = ["Rent", "Groceries", "Transport pass", "Childcare", "Internet", "Health insurance", "Gym"]
    b.rng.shuffle(items)
    rows = [[item, money(b.rng, 30, 2400, 5, "€"), money(b.rng, 30, 2400, 5, "€")] for item in items[:5]]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "my cost comparison",
        ["Item", "Now", "There"],
        rows,
        [Cell(f"cost-{rows[row][0]}", row, 2, "medium")],
        talk,
        False,
    )


def _inventory(b: Builder, talk: Talk) -> None:
    contents = ["books", "winter coats", "kitchen stuff", "documents", "toys", "records", "tools", "bedding"]
    b.rng.shuffle(contents)
    rows = [
        [f"box {n}", item, b.rng.choice(("sea", "air", "storage", "suitcase"))]
        for n, item in zip(range(b.rng.randint(1, 30), 99), contents[:6], strict=False)
    ]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the packing inventory",
        ["box", "contents", "shipping"],
        rows,
        [Cell(f"box-{rows[row][0]}", row, 1, "low")],
        talk,
        True,
    )


def _appointment(b: Builder, talk: Talk) -> None:
    number = b.fresh(lambda r: f"{r.randint(100, 999)}-{r.randint(1000, 9999)}")
    document = {
        "appointment": {
            "confirmation": number,
            "office": b.rng.choice(
                ("Bürgeramt Mitte", "Préfecture de Police", "Ward office", "Immigration Services")
            ),
            "slot": f"{clock(b.rng)}",
            "bring": ["passport", "rental contract", "photo"],
        }
    }
    paste_json(b, "the appointment confirmation", document, [("appointment-number", number, "high")], talk)


def _german_appointment(b: Builder, talk: Talk) -> None:
    """An absolute date with an ordinal's full stop in German ("am 18. November um 9:15 Uhr")."""
    when = b.advance_for_user()
    day = when.date() + timedelta(days=b.rng.randint(5, 60))
    time = b.fresh(clock)
    sentence = b.choose(
        (
            "Mein Termin beim Bürgeramt ist am {d}. {m} um {t} Uhr.",
            "Die Wohnungsübergabe ist am {d}. {m} um {t} Uhr.",
            "Am {d}. {m} um {t} Uhr kommt der Vermieter zur Übergabe.",
            "Der Umzugswagen kommt am {d}. {m}, ungefähr um {t} Uhr.",
        )
    ).format(d=day.day, m=DE_MONTHS[day.month - 1], t=time)
    wrap = b.choose(
        ("{s}", "The Hausverwaltung wrote: „{s}“", "Copying from the letter: {s}", "{s} (sorry, German)")
    )
    message = b.user(wrap.format(s=sentence), when=when)
    b.assistant(b.ack())
    b.plant(
        "appointment-de",
        "german",
        "high",
        [date_part(day), value_part(time, *clock_renderings(time))],
        message,
        sentence,
        language="de",
    )


def _convert(rng: random.Random, value: str) -> str:
    return f"amount: 1000 EUR\nrate: {value}\nfee: 0.41%\nupdated: {rng.randint(1, 59)} min ago"


def _volume(rng: random.Random, value: str) -> str:
    return (
        f"Survey result\nitems: {rng.randint(80, 300)}\ntotal volume: {value}\n"
        f"weight estimate: {rng.randint(900, 4000)} kg"
    )


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _costs), ("csv", _inventory), ("json", _appointment), ("german", _german_appointment)),
    events=(
        Event(
            "movers-come",
            ("the movers come {when}", "packing day is {when}", "the truck picks everything up {when}"),
        ),
        Event("flight-abroad", ("our one-way flight is {when}", "we fly out for good {when}")),
        Event(
            "prefecture-fr",
            ("Le rendez-vous à la préfecture est {when}.", "Le déménagement est prévu {when}."),
            "high",
            "fr",
        ),
        Event("viewing-ja", ("内見は{when}です。", "{when}に区役所で転入届を出します。"), "medium", "ja"),
        Event(
            "handover-de",
            ("Die Schlüsselübergabe ist {when}.", "Der Sprachkurs beginnt {when}."),
            "medium",
            "de",
        ),
    ),
    third_person=(
        Said(
            "agent",
            ("{name} at the relocation agency handles the {v}.", "{name} from HR is sorting out the {v}."),
            lambda r: r.choice(("residence permit", "school places", "temporary flat", "tax registration")),
            "medium",
            True,
        ),
        Said(
            "landlord",
            (
                "{name} is our new landlord, she only answers on {v}.",
                "{name}, the landlord, wants everything by {v}.",
            ),
            lambda r: r.choice(("WhatsApp", "Line", "email", "Signal", "text message")),
            "medium",
            True,
        ),
    ),
    lowercase=(
        Said(
            "lease-start",
            ("the lease starts on the {v}", "our contract begins on the {v}, not before"),
            lambda r: r.choice(("1st", "15th", "3rd", "20th")),
            "high",
        ),
        Said(
            "port",
            ("the container ships from {v}", "sea freight leaves from {v}"),
            lambda r: r.choice(("Rotterdam", "Antwerp", "Hamburg", "Le Havre", "Felixstowe")),
            "low",
        ),
    ),
    foreign=(
        Said(
            "caf-fr",
            ("Le dossier CAF porte le numéro {v}.", "Notre numéro d'allocataire est le {v}."),
            lambda r: str(r.randint(1000000, 9999999)),
            "medium",
            language="fr",
        ),
    ),
    tools=(
        ToolReading(
            "fx-rate",
            "currency_convert",
            {"from": "EUR", "to": "JPY"},
            lambda r: f"1 EUR = {r.randint(150, 175)}.{r.randint(10, 99)} JPY",
            _convert,
            ("rate",),
            "low",
        ),
        ToolReading(
            "volume",
            "movers_survey",
            {"rooms": 4},
            lambda r: f"{r.randint(12, 48)}.{r.randint(1, 9)} m³",
            _volume,
            ("volume",),
            "medium",
        ),
    ),
    appositions=3,
)

TALK = Talk(
    questions=(
        "What documents should I get apostilled?",
        "How do I find a flat before arriving?",
        "Is it worth shipping furniture?",
        "How long does residence registration take?",
        "Should I keep my old bank account?",
        "How do I get a local phone number?",
        "What about health insurance in the first month?",
        "How do kids usually cope with a move like this?",
        "Any tips for learning the language fast?",
        "Do I need an international driving permit?",
        "What should go in the suitcase vs the container?",
        "How do taxes work in the first year?",
    ),
    advice=(
        "Scan every document twice and keep one set offline.",
        "Registration usually unlocks everything else: bank, phone, insurance.",
        "Temporary furnished flats cost more but buy you time to choose well.",
        "Shipping furniture rarely pays off unless it's sentimental or expensive.",
        "Keep one home-country account open for at least a year.",
        "Bring originals of birth and marriage certificates in your hand luggage.",
        "A language course in the first months doubles as a social life.",
    ),
    asides=(
        "Half the flat is in boxes already.",
        "My mum keeps crying on the phone.",
        "The cat knows something is up.",
        "Ten tabs of visa forums open.",
    ),
    topics=(
        "the residence permit",
        "shipping the piano",
        "finding a flat remotely",
        "the language course",
        "closing old accounts",
        "school enrolment",
        "pet import rules",
    ),
)

STYLE = style("moving", "moving abroad: visa, flat, movers, registration, two currencies", TALK, VOCABULARY)
