"""Generated conversations with planted facts, for measuring what a memory keeps.

``generate(style, seed, messages)`` builds a conversation of user/assistant turns in one of ``STYLES``:

- ``help``: a help chat over everyday topics; the user mentions facts about themselves in passing.
- ``trip``: planning a trip; destinations, dates, flights, hotels and budgets, some of them changed later.
- ``coding``: a coding session; the assistant's messages carry tool calls and results (AI SDK
  ``tool-invocation`` parts), some of which fail with a named test or error.
- ``smalltalk``: chatting about the weekend, family, hobbies; facts dropped between long stretches of chat.
- ``documents``: the user pastes long documents (notes, agreements, briefs) with facts inside, and asks
  about them.

Every fact planted (``PlantedFact``) has a ``value`` that a memory which kept the fact holds verbatim, up to
``normalise``: case-folded, every run of characters other than letters and digits read as one space (so
``€2,400`` is found as ``2 400`` and ``src/app.py`` as ``src app py``). A corrected fact (``earlier`` not
empty) counts by its newest value only. Facts come in several kinds: statements of the user, corrections,
decisions, what the assistant committed to, failed tool runs and facts inside pasted documents; most are
said once, between filler.

Everything is drawn from ``random.Random(seed)``: the same style, seed and length give the same
conversation. The phrasing comes from many templates and word banks, so a model tuned on some seeds meets
sentences on other seeds that it has not seen in that combination; measurements are meant to be reported
on seeds the model under test was not developed on.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

STYLES = ("help", "trip", "coding", "smalltalk", "documents")


def normalise(text: str) -> str:
    """The form facts are looked up in: NFKC, case-folded, non-alphanumeric runs as single spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w]+|_", " ", folded).split())


def fact_found(value: str, context: str) -> bool:
    """``value`` appears in ``context`` as whole words, both normalised."""
    return f" {normalise(value)} " in f" {normalise(context)} "


@dataclass(frozen=True, slots=True)
class PlantedFact:
    key: str
    value: str
    kind: str
    # the id of the message that states the newest value
    message_id: str
    earlier: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    user: dict[str, Any]
    assistant: dict[str, Any]


@dataclass(slots=True)
class Conversation:
    style: str
    seed: int
    turns: list[Turn] = field(default_factory=list)
    facts: list[PlantedFact] = field(default_factory=list)

    def messages(self) -> list[dict[str, Any]]:
        return [m for turn in self.turns for m in (turn.user, turn.assistant)]


# --- word banks ----------------------------------------------------------------------------------------

FIRST_NAMES = (
    "Priya", "Mateo", "Aiko", "Kwame", "Ingrid", "Tomasz", "Leilani", "Farouk", "Sunniva", "Dmitri",
    "Amara", "Joaquin", "Oksana", "Thabo", "Mirela", "Caoimhe", "Rafferty", "Yusuf", "Ngozi", "Henrik",
    "Marisol", "Ravi", "Beatrix", "Eamon", "Saoirse", "Kenji", "Anouk", "Dario", "Lucinda", "Bertrand",
    "Zofia", "Idris", "Greta", "Anselm", "Noor", "Cosima", "Teodor", "Wanjiru", "Ottilie", "Lorcan",
)  # fmt: skip
SURNAMES = (
    "Raman", "Okafor", "Kowalski", "Lindqvist", "Haddad", "Moreau", "Nakashima", "Achterberg", "Ferreira",
    "Brennan", "Vasquez", "Oyelaran", "Petrov", "Castellanos", "Abernethy", "Szabo", "Mwangi", "Dufresne",
    "Halvorsen", "Iqbal", "Tanaka", "Whitcombe", "Ruiz", "Esposito", "Kaminski", "Obi", "Lund", "Quint",
)  # fmt: skip
CITIES = (
    "Lisbon", "Ljubljana", "Tallinn", "Valparaiso", "Hobart", "Nairobi", "Quito", "Osaka", "Bergen", "Porto",
    "Trieste", "Cork", "Leipzig", "Chiang Mai", "Oaxaca", "Tbilisi", "Kraków", "Dunedin", "Halifax",
    "Cusco", "Tromsø", "Bruges", "Matera", "Zanzibar", "Plovdiv", "Ghent", "Aarhus", "Salzburg",
)  # fmt: skip
COMPANY_HEADS = (
    "Northwind", "Bluefin", "Kestrel", "Oakbridge", "Silverline", "Tamarind", "Ironleaf", "Copperfield",
    "Halcyon", "Brightwater", "Redfern", "Moonrise", "Larkspur", "Quarry Hill",
)  # fmt: skip
COMPANY_TAILS = ("Labs", "Logistics", "Analytics", "Foods", "Dental", "Studios", "Partners", "Robotics")
PET_NAMES = (
    "Biscuit", "Pixel", "Mango", "Juniper", "Noodle", "Sprocket", "Ziggy", "Pepper", "Marlowe", "Tofu",
    "Waffles", "Clementine", "Bramble", "Otis", "Pickles", "Saffron",
)  # fmt: skip
PET_KINDS = ("dog", "cat", "parrot", "rabbit", "tortoise", "ferret")
ALLERGIES = ("peanuts", "shellfish", "sesame", "penicillin", "kiwi fruit", "latex", "hazelnuts", "celery")
INSTRUMENTS = ("cello", "bassoon", "ukulele", "harp", "trombone", "accordion", "oboe", "mandolin")
CARS = (
    "2019 Subaru Outback", "Skoda Octavia estate", "2016 Mazda MX-5", "Volvo V60", "Fiat Panda 4x4",
    "2021 Kia Niro", "Toyota Hilux", "Renault Zoe",
)  # fmt: skip
PREFERENCES = (
    "metric units", "bullet points", "British spelling", "short answers", "24-hour times",
    "plain language without jargon", "examples in Python", "prices in euros",
)  # fmt: skip
AUTHORS = ("Ursula Le Guin", "Italo Calvino", "Octavia Butler", "Kazuo Ishiguro", "Wisława Szymborska")
TEAMS = ("Hibernian", "Sporting Braga", "Werder Bremen", "Celta Vigo", "Hajduk Split", "Brentford")
HOTELS = (
    "Hotel Miramar", "Casa do Largo", "the Grand Oriental", "Pension Edelweiss", "the Harbourview Inn",
    "Villa Serena", "the Old Customs House", "Hostal Alcazaba",
)  # fmt: skip
RESTAURANTS = ("Taberna Moura", "Osteria Gialla", "Kōbō", "Le Petit Zinc", "Casa Lupita", "Mangal 2")
AIRLINE_CODES = ("BA", "LH", "TP", "KL", "AY", "SK", "IB", "OS", "LX", "EI")
AIRPORTS = ("Gatwick", "Schiphol", "Heathrow", "Orly", "Malpensa", "Arlanda", "Tegel", "Barajas")
LIBRARIES = ("httpx", "pydantic", "sqlalchemy", "polars", "structlog", "tenacity", "orjson", "attrs")
DATABASES = ("PostgreSQL 15.3", "PostgreSQL 16.1", "MySQL 8.0.36", "SQLite 3.45", "MariaDB 10.11")
MODULES = ("billing", "ledger", "ingest", "reports", "auth", "scheduler", "exports", "pricing")
FILES = ("invoice_totals", "currency", "parser", "retry", "tax_rules", "webhooks", "rounding", "timezones")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)  # fmt: skip


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(SURNAMES)}"


def _company(rng: random.Random) -> str:
    return f"{rng.choice(COMPANY_HEADS)} {rng.choice(COMPANY_TAILS)}"


def _day(rng: random.Random) -> str:
    month, day = rng.choice(MONTHS), rng.randint(1, 28)
    return rng.choice((f"{day} {month}", f"{month} {day}"))


def _money(rng: random.Random) -> str:
    amount = rng.randrange(900, 9_800, 50)
    return rng.choice((f"€{amount:,}", f"${amount:,}", f"{amount} euros", f"£{amount:,}"))


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randrange(10 ** (n - 1), 10**n))


def _flight(rng: random.Random) -> str:
    return f"{rng.choice(AIRLINE_CODES)}{rng.randint(120, 2999)}"


def _clock(rng: random.Random) -> str:
    return (
        f"{rng.randint(5, 11)}:{rng.choice(('05', '15', '20', '35', '40', '50'))} {rng.choice(('am', 'pm'))}"
    )


def _version(rng: random.Random) -> str:
    return f"3.{rng.randint(9, 13)}.{rng.randint(1, 12)}"


def _path(rng: random.Random) -> str:
    return f"src/{rng.choice(MODULES)}/{rng.choice(FILES)}.py"


def _test_name(rng: random.Random) -> str:
    verbs = ("rounds", "parses", "rejects", "retries", "keeps", "converts", "handles", "sorts")
    things = ("negative_totals", "empty_header", "leap_day", "unicode_names", "zero_rate", "late_webhook")
    return f"test_{rng.choice(verbs)}_{rng.choice(things)}"


def _repo(rng: random.Random) -> str:
    owner = rng.choice(COMPANY_HEADS).lower().replace(" ", "-")
    return f"{owner}/{rng.choice(MODULES)}-{rng.choice(('service', 'sync', 'core', 'api'))}"


def _branch(rng: random.Random) -> str:
    topic = rng.choice(FILES).replace("_", "-")
    return f"{rng.choice(('fix', 'feat', 'chore'))}/{topic}-{rng.randint(100, 999)}"


# --- facts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FactSpec:
    """A kind of fact: how to draw a value, ways of saying it, and (if it can change) of correcting it."""

    key: str
    draw: Callable[[random.Random], str]
    says: tuple[str, ...]
    corrects: tuple[str, ...] = ()
    kind: str = "statement"


_PERSONAL = (
    FactSpec(
        "full-name",
        _name,
        ("My name is {v}.", "I'm {v}, by the way.", "You can call me {v}.", "Oh, I never said: I'm {v}."),
    ),
    FactSpec(
        "employer",
        _company,
        (
            "I work at {v}.",
            "My employer is {v}, in the finance team.",
            "I've been at {v} for a few years now.",
            "These days I'm with {v}, mostly doing operations.",
        ),
        (
            "Update on work: I switched jobs, I'm at {v} now, not {old}.",
            "Actually I left {old} last week, I work at {v} now.",
        ),
    ),
    FactSpec(
        "home-city",
        lambda r: r.choice(CITIES),
        (
            "I live in {v}.",
            "We moved to {v} last year.",
            "I'm based in {v}.",
            "Home for me is {v} these days.",
        ),
        (
            "Correction: I live in {v} now, not {old}.",
            "We've just moved, so I'm in {v} from now on instead of {old}.",
        ),
    ),
    FactSpec(
        "pet",
        lambda r: r.choice(PET_NAMES),
        (
            "My {kind} is called {v}.",
            "We have a {kind} named {v}.",
            "Our {kind} {v} keeps interrupting me.",
            "I'm writing this with {v}, my {kind}, asleep on my lap.",
        ),
    ),
    FactSpec(
        "allergy",
        lambda r: r.choice(ALLERGIES),
        (
            "I'm allergic to {v}.",
            "I can't have {v}, I'm allergic.",
            "Please keep in mind I have an allergy to {v}.",
            "Something to remember: I react badly to {v}, it's a proper allergy.",
        ),
    ),
    FactSpec(
        "birthday",
        _day,
        (
            "My birthday is on {v}.",
            "I was born on {v}.",
            "My birthday falls on {v} this year, a weekday sadly.",
        ),
    ),
    FactSpec(
        "staff-number",
        lambda r: _digits(r, 6),
        (
            "My employee ID is {v}.",
            "My staff number is {v}, if the form needs it.",
            "For the forms, my membership number is {v}.",
        ),
        ("Sorry, I mistyped my ID earlier: it's {v}, not {old}.",),
    ),
    FactSpec(
        "sibling",
        lambda r: r.choice(FIRST_NAMES),
        (
            "My sister {v} is visiting soon.",
            "My brother {v} lives close by.",
            "My cousin {v} is the one who got me into this.",
        ),
    ),
    FactSpec(
        "car",
        lambda r: r.choice(CARS),
        ("I drive a {v}.", "My car is a {v}.", "We still have the {v}, it does the job."),
    ),
    FactSpec(
        "preference",
        lambda r: r.choice(PREFERENCES),
        ("I prefer {v}.", "Please always use {v} with me.", "I'd rather have {v}, if that's fine."),
        kind="preference",
    ),
    FactSpec(
        "instrument",
        lambda r: r.choice(INSTRUMENTS),
        ("I play the {v} in a community orchestra.", "I've been learning the {v} for two years."),
    ),
)

_TRIP = (
    FactSpec(
        "destination",
        lambda r: r.choice(CITIES),
        ("We're going to {v}.", "The plan is to spend most of the trip in {v}.", "Main stop will be {v}."),
        ("Change of plan: we're going to {v} instead of {old}.", "We dropped {old}, it's {v} now."),
    ),
    FactSpec(
        "departure",
        _day,
        ("We leave on {v}.", "The flight out is on {v}.", "Departure is {v}, early morning."),
        ("The departure moved to {v}, not {old} anymore.", "Small change: we now fly out on {v}."),
    ),
    FactSpec(
        "flight",
        _flight,
        ("Our flight is {v}.", "We're booked on {v}.", "The outbound flight number is {v}."),
        ("The airline rebooked us onto {v}, so {old} is off.",),
    ),
    FactSpec(
        "hotel",
        lambda r: r.choice(HOTELS),
        ("We booked {v} for the first nights.", "We're staying at {v}.", "I reserved a room at {v}."),
        ("We cancelled {old} and booked {v} instead.",),
    ),
    FactSpec(
        "budget",
        _money,
        (
            "Our budget is {v} for everything.",
            "I want to keep the whole trip under {v}.",
            "Budget: {v} total.",
        ),
        ("We can stretch the budget to {v} now.", "Update: the budget is {v}, not {old}."),
    ),
    FactSpec(
        "companion",
        _name,
        ("I'm travelling with my friend {v}.", "{v} is coming with me.", "My travel partner is {v}."),
    ),
    FactSpec(
        "loyalty",
        lambda r: f"FF{_digits(r, 7)}",
        ("My frequent flyer number is {v}.", "Use {v} as my loyalty number when you can."),
    ),
    FactSpec(
        "restaurant",
        lambda r: r.choice(RESTAURANTS),
        ("I reserved a table at {v} for the second night.", "We have a dinner booking at {v}."),
    ),
    FactSpec(
        "airport",
        lambda r: r.choice(AIRPORTS),
        ("We fly out of {v}.", "The closest airport for us is {v}, so that's where we start."),
        ("We'll leave from {v} now, not {old}.",),
    ),
    FactSpec(
        "pickup",
        _clock,
        ("The rental car pickup is at {v}.", "We pick up the car at {v} on the first day."),
    ),
)

_CODING = (
    FactSpec(
        "repo",
        _repo,
        ("The repo is {v}.", "I'm working in {v}.", "This is all in the {v} repository."),
    ),
    FactSpec(
        "python",
        _version,
        ("We're on Python {v}.", "The CI image runs Python {v}."),
        ("We upgraded, it's Python {v} now, not {old}.",),
    ),
    FactSpec(
        "path",
        _path,
        ("The bug is somewhere in {v}.", "Look at {v}, that's where the totals are computed."),
    ),
    FactSpec(
        "branch",
        _branch,
        ("I'm on the branch {v}.", "I pushed my work to {v}."),
        ("I renamed the branch to {v}.",),
    ),
    FactSpec(
        "database",
        lambda r: r.choice(DATABASES),
        ("Production runs on {v}.", "The database is {v}."),
        ("Ops migrated us, production is on {v} now instead of {old}.",),
    ),
    FactSpec(
        "library",
        lambda r: r.choice(LIBRARIES),
        (
            "Let's go with {v} for this.",
            "I decided we'll use {v}.",
            "Decision: we use {v}, not the homegrown one.",
        ),
        ("Scratch that, let's use {v} instead of {old}.",),
        kind="decision",
    ),
    FactSpec(
        "reviewer",
        _name,
        ("My reviewer is {v}.", "{v} will review the pull request."),
    ),
    FactSpec(
        "deadline",
        _day,
        ("This has to ship by {v}.", "The release is planned for {v}."),
        ("The release slipped to {v}.",),
    ),
)

_SMALLTALK = (
    *(spec for spec in _PERSONAL if spec.key in ("pet", "sibling", "home-city", "instrument", "car")),
    FactSpec(
        "author",
        lambda r: r.choice(AUTHORS),
        ("My favourite author is {v}.", "I keep rereading {v}, honestly my favourite."),
    ),
    FactSpec(
        "team",
        lambda r: r.choice(TEAMS),
        ("I support {v}.", "I've followed {v} since I was a kid."),
    ),
    FactSpec(
        "event",
        _day,
        ("My cousin's wedding is on {v}.", "We have a big family reunion on {v}."),
        ("The reunion got moved to {v}.",),
    ),
    FactSpec(
        "friend",
        _name,
        ("My best friend is {v}.", "I had coffee with my old friend {v} yesterday."),
    ),
)

_DOCUMENT = (
    FactSpec("contact", _name, ("The contact person for this is {v}.", "Questions go to {v}.")),
    FactSpec("amount", _money, ("The total contract value is {v}.", "The approved budget is {v}.")),
    FactSpec("start", _day, ("The kickoff is scheduled for {v}.", "Work starts on {v}.")),
    FactSpec(
        "code", lambda r: _digits(r, 4), ("The door code for the site is {v}.", "Reference number {v}.")
    ),
    FactSpec(
        "venue",
        lambda r: r.choice(CITIES),
        ("The workshop will be held in {v}.", "Delivery is to the warehouse in {v}."),
    ),
    FactSpec("vendor", _company, ("The supplier is {v}.", "The work was awarded to {v}.")),
)

_COMMITMENT_TEMPLATES = (
    "I'll draft the email to {v} this afternoon.",
    "I will send {v} the summary tomorrow morning.",
    "I'll set up a reminder to call {v} on Friday.",
    "I'll prepare the comparison for {v} before our next chat.",
)


# --- filler --------------------------------------------------------------------------------------------

_GREETINGS = (
    "Hi!", "Hello again.", "Hey there.", "Morning!", "Good evening.", "Hi, it's me again.", "Hey, quick one.",
)  # fmt: skip
_ACKS = (
    "Thanks, that helps.", "Ok, sounds good.", "Great, thanks!", "Makes sense.", "Cool.",
    "Perfect, thank you.",
    "Got it.", "Nice, I like that.", "Okay.", "Brilliant, cheers.", "Hmm, fair enough.", "Right, right.",
    "Yes, exactly.", "lol ok", "Thank you so much!", "That's really useful.",
)  # fmt: skip
_RAMBLE_OPEN = (
    "Honestly", "To be fair", "I mean", "Anyway", "So", "Well", "The thing is", "Funny enough",
    "Truth be told",
    "Not going to lie",
)  # fmt: skip
_RAMBLE_BODY = (
    "the week has been a bit of a blur with one thing after another",
    "it has been raining on and off and everything feels slower",
    "work was busy and I kept putting this off until now",
    "I was thinking about this on the way home and got a little lost in it",
    "there were a lot of small things to sort out, calls and errands mostly",
    "I keep meaning to get organised and never quite manage it",
    "the neighbours have been doing some renovation so it is noisy here",
    "I slept badly so bear with me if this sounds a bit scattered",
    "it's one of those days where the coffee is not doing its job",
    "everything took longer than expected but it mostly worked out",
    "I had a long chat with a colleague about nothing in particular",
    "the train was late again which threw off the whole morning",
    "I tried to do too much at once and ended up doing very little",
    "the garden needs attention but that can wait for the weekend",
)  # fmt: skip
_HELP_QUESTIONS = (
    "How do I get rid of limescale in a kettle?", "What's a good way to learn touch typing?",
    "How long should I boil an egg for a soft yolk?", "Can you explain compound interest simply?",
    "Is it worth repairing an old washing machine?", "How do I keep basil alive indoors?",
    "What should I put in a first aid kit?", "How can I make my emails shorter?",
    "What's the difference between baking soda and baking powder?", "How do I stop procrastinating?",
    "Any tips for sleeping better in summer?", "How often should I water a cactus?",
    "Can you help me write a polite complaint to my landlord?", "How do I remove a red wine stain?",
    "What's a sensible weekly food budget for two?", "How do I reset a router without losing settings?",
    "Can you suggest a simple stretching routine?", "How should I prepare for a job interview?",
)  # fmt: skip
_TRIP_QUESTIONS = (
    "What should I pack for ten days?", "Is it better to rent a car or use trains?",
    "Which neighbourhoods are nice to walk around?", "Do I need travel insurance for this?",
    "What's a reasonable daily spend on food there?", "Can you suggest a day trip from the city?",
    "How early should we be at the airport?", "What local dishes should we try?",
    "Are there any museums that are free on certain days?", "How do tipping customs work there?",
    "Can you make a rough itinerary for the first three days?", "Should we get a local SIM card?",
)  # fmt: skip
_CODING_QUESTIONS = (
    "Why would the totals be off by a cent?", "Can you check the failing tests?",
    "How do I make this function easier to test?", "Is there a cleaner way to handle the retries?",
    "Should this be a dataclass?", "Can you run the linter again?", "Why does the import fail in CI only?",
    "What's the best way to mock the clock here?", "Can you refactor this loop?",
    "Is the migration safe to run twice?", "How do I profile this endpoint?",
)  # fmt: skip
_SMALLTALK_LINES = (
    "What are you up to today?", "Do you ever get bored?", "Have you read anything good lately?",
    "I just watched the strangest documentary about octopuses.", "My plants are thriving for once.",
    "I made soup and it turned out surprisingly decent.", "It's freezing here today.",
    "I think I need a holiday.", "We played board games all evening and I lost every round.",
    "Do you like rainy days?", "I finally cleaned the garage.", "The sunset was ridiculous tonight.",
)  # fmt: skip
_ASSISTANT_FILLER = (
    "Good question.", "Happy to help.", "Sure thing.", "That's a great point.", "Of course.",
    "Let me think about that for a second.", "Here are a few thoughts.", "Absolutely.",
)  # fmt: skip
_ASSISTANT_BODY = (
    "Breaking the task into smaller steps usually makes it feel much more manageable.",
    "It often helps to write down what matters most before deciding anything.",
    "A realistic deadline and a short checklist go a long way here.",
    "Most people find that a little preparation up front saves time later.",
    "If anything looks unclear, it is worth asking early rather than guessing.",
    "There is no single right answer, but a few rules of thumb work well in practice.",
    "Keeping notes as you go makes it easier to pick things up again later.",
    "Try the simplest option first and only add complexity when it is needed.",
    "It is usually cheaper to fix small problems early than large ones later.",
    "A quick comparison of the options side by side tends to make the choice obvious.",
    "Consistency matters more than intensity for this kind of thing.",
    "You can always revisit the decision once you have more information.",
)  # fmt: skip
_DOC_KINDS = ("meeting notes", "draft agreement", "project brief", "venue proposal", "supplier quote")
_DOC_SENTENCES = (
    "This document summarises the current understanding of all parties involved.",
    "The aim is to agree on scope, responsibilities and timing before work begins.",
    "Each party will review the terms and raise concerns within a reasonable period.",
    "Any changes to the scope must be agreed in writing by both sides.",
    "The team discussed risks, including delays in procurement and staff availability.",
    "Progress will be reviewed regularly and the plan adjusted where needed.",
    "Payment terms follow the standard schedule unless stated otherwise.",
    "All materials remain the property of the client until final acceptance.",
    "The working group agreed to keep communication short and frequent.",
    "Several options were considered and the preferred approach is outlined below.",
    "Attendees noted that previous projects suffered from unclear ownership.",
    "Quality checks will take place at each milestone before sign-off.",
    "Confidential information must not be shared outside the project team.",
    "The parties expect to review the arrangement at the end of the first phase.",
    "Minor adjustments can be handled informally by the coordinators.",
    "The proposal assumes normal working hours and no weekend work.",
    "See the appendix for the full list of deliverables and their owners.",
    "The budget covers labour, materials and a modest contingency.",
)  # fmt: skip
_DOC_QUESTIONS = (
    "Can you summarise this for me?", "What are the key points here?",
    "Anything in there I should worry about?",
    "Could you pull out the important dates?", "Does this look reasonable to you?",
)  # fmt: skip


# --- the builder ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Builder:
    style: str
    seed: int
    rng: random.Random
    clock: datetime
    conversation: Conversation
    # key -> (value, message id) of facts said so far
    said: dict[str, tuple[str, str]] = field(default_factory=dict)
    earlier: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    used_values: set[str] = field(default_factory=set)
    calls: int = 0

    def message_id(self, role: str) -> str:
        return f"{self.style}-{self.seed}-{role[0]}{len(self.conversation.turns):04d}"

    def tick(self) -> None:
        self.clock += timedelta(minutes=self.rng.randint(1, 7), seconds=self.rng.randint(0, 59))
        if self.rng.random() < 0.03:
            self.clock += timedelta(hours=self.rng.randint(3, 50))

    def fresh(self, draw: Callable[[random.Random], str]) -> str:
        for _ in range(40):
            value = draw(self.rng)
            if value not in self.used_values:
                break
        self.used_values.add(value)
        return value

    def ramble(self) -> str:
        return f"{self.rng.choice(_RAMBLE_OPEN)}, {self.rng.choice(_RAMBLE_BODY)}."

    def filler_user(self, questions: Sequence[str]) -> str:
        roll = self.rng.random()
        if roll < 0.2:
            return self.rng.choice(_ACKS)
        pieces: list[str] = []
        if self.rng.random() < 0.15:
            pieces.append(self.rng.choice(_GREETINGS))
        if self.rng.random() < 0.5:
            pieces.append(self.ramble())
        if roll < 0.3 and self.conversation.turns:
            # repeating an earlier question, as people do
            pieces.append("Sorry, asking again: " + self.rng.choice(questions))
        else:
            pieces.append(self.rng.choice(questions))
        if self.rng.random() < 0.3:
            pieces.append(self.ramble())
        return " ".join(pieces)

    def answer(self, echo: str | None = None) -> str:
        sentences = [self.rng.choice(_ASSISTANT_FILLER)]
        if echo is not None and self.rng.random() < 0.5:
            sentences.append(f"Noted: {echo}")
        body = list(_ASSISTANT_BODY)
        self.rng.shuffle(body)
        sentences += body[: self.rng.randint(1, 4)]
        if self.rng.random() < 0.4:
            sentences.append("Let me know if you want more detail on any of this.")
        return " ".join(sentences)

    def statement(self, spec: FactSpec) -> tuple[str, str]:
        """A first statement of ``spec``: its text, and the value planted."""
        value = self.fresh(spec.draw)
        template = self.rng.choice(spec.says)
        text = template.format(v=value, kind=self.rng.choice(PET_KINDS))
        return text[0].upper() + text[1:], value

    def correction(self, spec: FactSpec, old: str) -> tuple[str, str]:
        value = self.fresh(spec.draw)
        text = self.rng.choice(spec.corrects).format(v=value, old=old)
        return text, value

    def plant(self, key: str, value: str, kind: str, message_id: str) -> None:
        previous = self.said.get(key)
        if previous is not None:
            self.earlier.setdefault(key, []).append(previous[0])
        self.said[key] = (value, message_id)
        self.kinds[key] = kind

    def add_turn(self, user_text: str, assistant_parts: list[dict[str, Any]]) -> tuple[str, str]:
        self.tick()
        user_id, assistant_id = self.message_id("user"), self.message_id("assistant")
        user = {
            "id": user_id,
            "role": "user",
            "parts": [{"type": "text", "text": user_text}],
            "createdAt": self.clock.isoformat(),
        }
        self.clock += timedelta(seconds=self.rng.randint(4, 50))
        assistant = {
            "id": assistant_id,
            "role": "assistant",
            "parts": assistant_parts,
            "createdAt": self.clock.isoformat(),
        }
        self.conversation.turns.append(Turn(user, assistant))
        return user_id, assistant_id

    def finish(self) -> Conversation:
        self.conversation.facts = [
            PlantedFact(key, value, self.kinds[key], message_id, tuple(self.earlier.get(key, ())))
            for key, (value, message_id) in self.said.items()
        ]
        return self.conversation


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _wrap_fact(rng: random.Random, fact: str, filler: str) -> str:
    """A fact said in passing: before, after or inside other talk."""
    lead = rng.choice(
        ("", "", "By the way, ", "Oh, and ", "Before I forget: ", "Also, ", "Random thing, but ")
    )
    stated = lead + (fact[0].lower() + fact[1:] if lead and not fact.startswith("I ") else fact)
    return rng.choice((f"{stated} {filler}", f"{filler} {stated}", stated))


def _tool_part(
    builder: _Builder, name: str, args: dict[str, Any], outcome: str, failed: bool
) -> dict[str, Any]:
    builder.calls += 1
    invocation: dict[str, Any] = {
        "toolCallId": f"call_{builder.calls}",
        "toolName": name,
        "args": args,
    }
    if failed and builder.rng.random() < 0.5:
        invocation |= {"state": "error", "error": outcome}
    else:
        invocation |= {"state": "result", "result": outcome}
    return {"type": "tool-invocation", "toolInvocation": invocation}


def _coding_tools(builder: _Builder) -> tuple[list[dict[str, Any]], str | None]:
    """A run of tool calls; sometimes a test fails, and then its name is the fact planted."""
    rng = builder.rng
    parts: list[dict[str, Any]] = [_text(rng.choice(("Let me check.", "Running that now.", "One moment.")))]
    failing: str | None = None
    for _ in range(rng.randint(1, 3)):
        tool = rng.choice(("run_tests", "read_file", "grep", "run_linter"))
        if tool == "run_tests":
            if rng.random() < 0.35:
                failing = builder.fresh(_test_name)
                outcome = (
                    f"FAILED tests/test_{rng.choice(FILES)}.py::{failing} - AssertionError: "
                    f"expected {rng.randint(10, 99)}.{rng.randint(10, 99)} got {rng.randint(10, 99)}.00\n"
                    f"{rng.randint(40, 200)} passed, 1 failed in {rng.randint(2, 30)}.{rng.randint(1, 9)}s"
                )
                parts.append(_tool_part(builder, tool, {"path": "tests/"}, outcome, failed=True))
            else:
                outcome = f"{rng.randint(40, 200)} passed in {rng.randint(2, 30)}.{rng.randint(1, 9)}s"
                parts.append(_tool_part(builder, tool, {"path": "tests/"}, outcome, failed=False))
        elif tool == "read_file":
            path = _path(rng)
            body = "\n".join(
                f"def {rng.choice(FILES)}_{i}(value):\n    return round(value * {rng.randint(2, 9)}, 2)"
                for i in range(rng.randint(2, 5))
            )
            parts.append(_tool_part(builder, tool, {"path": path}, body, failed=False))
        elif tool == "grep":
            pattern = rng.choice(FILES)
            hits = [f"{_path(rng)}:{rng.randint(1, 300)}: {pattern}(total)" for _ in range(rng.randint(1, 4))]
            parts.append(_tool_part(builder, tool, {"pattern": pattern}, "\n".join(hits), failed=False))
        else:
            parts.append(_tool_part(builder, tool, {}, "All checks passed.", failed=False))
    closing = (
        f"One test fails: {failing}. I'll look into it next."
        if failing is not None
        else rng.choice(("Everything passes.", "Nothing alarming there.", "That looks fine."))
    )
    parts.append(_text(closing + " " + builder.answer()))
    return parts, failing


def _document(builder: _Builder, facts: Sequence[str]) -> str:
    rng = builder.rng
    kind = rng.choice(_DOC_KINDS)
    sentences = [rng.choice(_DOC_SENTENCES) for _ in range(rng.randint(25, 60))]
    for fact in facts:
        sentences.insert(rng.randrange(len(sentences) + 1), fact)
    paragraphs: list[str] = []
    while sentences:
        size = rng.randint(3, 7)
        paragraphs.append(" ".join(sentences[:size]))
        sentences = sentences[size:]
    intro = rng.choice(("Here's the {k} I mentioned:", "Pasting the {k} below.", "This is the {k}:"))
    return intro.format(k=kind) + "\n\n" + "\n\n".join(paragraphs) + "\n\n" + rng.choice(_DOC_QUESTIONS)


_STYLE_FACTS: dict[str, tuple[FactSpec, ...]] = {
    "help": _PERSONAL,
    "trip": (*_TRIP, *(s for s in _PERSONAL if s.key in ("allergy", "full-name", "preference"))),
    "coding": (*_CODING, *(s for s in _PERSONAL if s.key in ("full-name", "preference"))),
    "smalltalk": _SMALLTALK,
    "documents": tuple(
        s for s in _PERSONAL if s.key in ("employer", "home-city", "full-name", "staff-number")
    ),
}
_STYLE_QUESTIONS = {
    "help": _HELP_QUESTIONS,
    "trip": _TRIP_QUESTIONS,
    "coding": _CODING_QUESTIONS,
    "smalltalk": _SMALLTALK_LINES,
    "documents": _HELP_QUESTIONS,
}


def generate(style: str, seed: int, messages: int = 300, *, start: datetime | None = None) -> Conversation:
    """A conversation of ``messages`` messages (rounded up to whole turns) in ``style``."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(STYLES)}")
    rng = random.Random(f"{style}:{seed}")
    origin = start or datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(days=rng.randint(0, 300))
    builder = _Builder(style, seed, rng, origin, Conversation(style, seed))
    turns = max(1, (messages + 1) // 2)
    specs = list(_STYLE_FACTS[style])
    rng.shuffle(specs)
    questions = _STYLE_QUESTIONS[style]
    # facts spread over the conversation, the last few turns left as plain chat
    fact_turns = sorted(rng.sample(range(1, max(2, turns - 3)), min(len(specs), max(1, turns // 10))))
    plan: dict[int, FactSpec] = dict(zip(fact_turns, specs, strict=False))
    correctable = [s for s in plan.values() if s.corrects]
    corrections: dict[int, FactSpec] = {}
    for spec in correctable[: max(1, len(correctable) // 2)]:
        said_at = next(t for t, s in plan.items() if s is spec)
        free = [t for t in range(said_at + 5, turns - 2) if t not in plan and t not in corrections]
        if free:
            corrections[rng.choice(free)] = spec
    commitment_turns = set(
        rng.sample([t for t in range(2, turns - 2) if t not in plan], k=min(2, turns // 40))
    )
    document_turns = (
        set(range(2, turns - 2, 9)) - set(plan) - set(corrections) if style == "documents" else set()
    )

    for index in range(turns):
        filler = builder.filler_user(questions)
        echo: str | None = None
        in_document: list[tuple[str, str]] = []
        planted: tuple[str, str, str] | None = None
        if index in corrections:
            spec = corrections[index]
            text, value = builder.correction(spec, builder.said[spec.key][0])
            user_text, planted = text + " " + rng.choice(questions), (spec.key, value, "correction")
        elif index in plan:
            spec = plan[index]
            text, value = builder.statement(spec)
            user_text, planted, echo = _wrap_fact(rng, text, filler), (spec.key, value, spec.kind), text
        elif index in document_turns:
            inside = [(spec, *builder.statement(spec)) for spec in rng.sample(_DOCUMENT, rng.randint(0, 2))]
            user_text = _document(builder, [text for _, text, _ in inside])
            in_document = [(f"{spec.key}-{index}", value) for spec, _, value in inside]
        else:
            user_text = filler

        commitment: str | None = None
        if index in commitment_turns:
            commitment = builder.fresh(_name)
        if style == "coding" and rng.random() < 0.45:
            parts, failing = _coding_tools(builder)
        else:
            reply = builder.answer(echo)
            if commitment is not None:
                reply += " " + rng.choice(_COMMITMENT_TEMPLATES).format(v=commitment)
            parts, failing = [_text(reply)], None
        user_id, assistant_id = builder.add_turn(user_text, parts)
        if planted is not None:
            builder.plant(planted[0], planted[1], planted[2], user_id)
        for key, value in in_document:
            builder.plant(key, value, "document", user_id)
        if commitment is not None and failing is None and len(parts) == 1:
            builder.plant(f"commitment-{index}", commitment, "commitment", assistant_id)
        if failing is not None:
            builder.plant(f"failing-test-{index}", failing, "tool", assistant_id)
    return builder.finish()
