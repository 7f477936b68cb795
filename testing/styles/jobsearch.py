"""A job search: applications, recruiters, interviews, salary numbers, an offer with a deadline."""

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

COMPANIES = (
    "Northwind", "Bluefin Analytics", "Kestrel Robotics", "Oakbridge Health", "Tamarind Foods", "Ironleaf",
    "Copperfield Bank", "Halcyon Games", "Brightwater Energy", "Larkspur Labs", "Moonrise Media",
)  # fmt: skip
ROLES = (
    "Senior Data Engineer", "Product Manager", "Staff Backend Engineer", "UX Researcher",
    "Engineering Manager",
    "Platform Engineer", "Analytics Lead", "Solutions Architect",
)  # fmt: skip


SLOTS = (
    Slot(
        "target-role",
        "the role I'm aiming for",
        lambda r: r.choice(ROLES),
        ("I'm going for {v} roles.", "Ideally my next job is {v}.", "Target: {v}, nothing more junior."),
        "high",
        lambda r: r.choice(("matches your last two years", "more openings right now", "best pay band")),
    ),
    Slot(
        "salary",
        "my salary expectation",
        lambda r: money(r, 52000, 145000, 500),
        ("My salary expectation is {v}.", "I told them {v} base.", "I won't go below {v}."),
        "high",
        None,
        money_renderings,
        offered=False,
    ),
    Slot(
        "recruiter",
        "the recruiter",
        person,
        ("My recruiter is {v}.", "{v} from the agency is handling it.", "I'm talking to {v}, the recruiter."),
        "medium",
        offered=False,
    ),
    Slot(
        "notice",
        "my notice period",
        lambda r: r.choice(("one month", "six weeks", "two months", "three months", "four weeks")),
        ("My notice period is {v}.", "I have to give {v} notice.", "Notice: {v}."),
        "medium",
        offered=False,
    ),
    Slot(
        "portfolio",
        "the portfolio link",
        lambda r: f"{first_name(r).lower()}{r.randint(1, 99)}.dev/work",
        ("My portfolio is at {v}.", "Link them to {v}.", "Portfolio: {v}."),
        "low",
        offered=False,
    ),
    Slot(
        "company",
        "the company to prioritise",
        lambda r: r.choice(COMPANIES),
        ("{v} is my first choice.", "I'm most excited about {v}.", "Priority one is {v}."),
        "high",
        lambda r: r.choice(
            ("remote-friendly", "strong engineering blog", "good Glassdoor reviews", "4-day week")
        ),
    ),
    Slot(
        "interview-time",
        "the interview slot",
        clock,
        ("The first interview is at {v}.", "They booked me for {v}.", "Interview slot: {v}."),
        "high",
        lambda r: r.choice(("before your stand-up", "lunch break", "end of day")),
        clock_renderings,
    ),
    Slot(
        "reference",
        "the reference",
        person,
        ("My reference will be {v}.", "{v} agreed to be a reference.", "Put {v} down as a referee."),
        "medium",
        lambda r: r.choice(("your old manager", "worked with you for 3 years", "senior and quick to reply")),
    ),
    Slot(
        "prep-topic",
        "what to prepare first",
        lambda r: r.choice(
            ("system design", "behavioural stories", "SQL drills", "the take-home", "salary negotiation")
        ),
        ("I'll start by preparing {v}.", "First up: {v}.", "Focus this week: {v}."),
        "low",
        lambda r: r.choice(("weakest area", "comes first in the loop", "highest payoff")),
    ),
)


def _tracker(b: Builder, talk: Talk) -> None:
    companies = list(COMPANIES)
    b.rng.shuffle(companies)
    stages = ("applied", "phone screen", "onsite", "take-home", "rejected", "offer")
    rows = [[c, b.rng.choice(ROLES), b.rng.choice(stages)] for c in companies[: b.rng.randint(4, 6)]]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"stage-{rows[row][0]}", row, 2, "medium")]
    paste_rows(b, "my application tracker", ["Company", "Role", "Stage"], rows, cells, talk, False)


def _offers_csv(b: Builder, talk: Talk) -> None:
    companies = list(COMPANIES)
    b.rng.shuffle(companies)
    rows = [
        [c, str(b.rng.randrange(55000, 150000, 500)), f"{b.rng.randint(20, 32)} days"] for c in companies[:3]
    ]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"offer-{rows[row][0]}", row, 1, "high")]
    paste_rows(b, "the offers side by side", ["company", "base", "holidays"], rows, cells, talk, True)


def _ats(b: Builder, talk: Talk) -> None:
    application = b.fresh(lambda r: f"APP-{r.randint(10000, 99999)}")
    document = {
        "candidate": {
            "applicationId": application,
            "stage": "onsite",
            "panel": [b.fresh(first_name) for _ in range(2)],
        },
        "nextStep": "schedule",
    }
    paste_json(b, "", document, [("application-id", application, "low")], talk, via_tool=("ats_status", {}))


def _commute(rng: random.Random, value: str) -> str:
    bike = f"by bike: {rng.randint(15, 60)} min"
    return f"from: home\nto: office\nby transit: {value}\n{bike}\nchanges: {rng.randint(0, 3)}"


def _benchmark(rng: random.Random, value: str) -> str:
    return (
        f"role benchmark\np25: €{rng.randint(50, 70)},000\nmedian: {value}\np75: €{rng.randint(90, 130)},000"
    )


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _tracker), ("csv", _offers_csv), ("json", _ats)),
    events=(
        Event(
            "onsite", ("the onsite is {when}", "the final round is {when}", "the panel interview is {when}")
        ),
        Event("offer-deadline", ("the offer expires {when}", "they want an answer {when}"), "high"),
        Event(
            "entretien-fr",
            ("L'entretien avec la DRH est {when}.", "Le deuxième entretien a lieu {when}."),
            "high",
            "fr",
        ),
        Event(
            "gespraech-de",
            ("Das Vorstellungsgespräch ist {when}.", "Das zweite Gespräch ist {when}."),
            "high",
            "de",
        ),
        Event("mensetsu-ja", ("面接は{when}です。", "{when}に最終面接があります。"), "high", "ja"),
    ),
    third_person=(
        Said(
            "hiring-contact",
            ("{name} from the hiring team is my contact for {v}.", "{name} referred me to {v}."),
            lambda r: r.choice(COMPANIES),
            "medium",
            True,
        ),
        Said(
            "panel",
            ("{name} will run the {v} round.", "{name} is doing my {v} interview."),
            lambda r: r.choice(("system design", "culture", "coding", "product sense")),
            "low",
            True,
        ),
    ),
    lowercase=(
        Said(
            "take-home",
            ("the take-home is due {v}", "take-home deadline is {v}"),
            lambda r: r.choice(("Monday noon", "Friday 5pm", "in 72 hours")),
            "high",
        ),
        Said(
            "final-round",
            ("final round is with {v}", "last interview is with {v}"),
            lambda r: r.choice(("the CTO", "the VP of Product", "two founders")),
            "medium",
        ),
    ),
    foreign=(
        Said(
            "rh-time-fr",
            ("L'entretien avec la DRH est à {v}.", "L'appel avec le recruteur est à {v}."),
            clock,
            "high",
            language="fr",
        ),
        Said(
            "gespraech-time-de",
            ("Das Vorstellungsgespräch ist um {v} Uhr.", "Das Telefonat ist um {v} Uhr."),
            clock,
            "high",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "commute",
            "route_planner",
            {"mode": "transit"},
            lambda r: f"{r.randint(18, 95)} min",
            _commute,
            ("transit",),
            "low",
        ),
        ToolReading(
            "median",
            "salary_benchmark",
            {"level": "senior"},
            lambda r: f"€{r.randint(60, 120)},{r.choice(('000', '500'))}",
            _benchmark,
            ("median",),
            "medium",
        ),
    ),
)

TALK = Talk(
    questions=(
        "How do I answer 'why are you leaving'?",
        "Can you tighten my CV summary?",
        "How many applications a week is sane?",
        "Should I mention the gap year?",
        "How do I negotiate without sounding greedy?",
        "Is it okay to follow up after a week?",
        "What questions should I ask them at the end?",
        "How do I prep for a system design round?",
        "Should I tell my manager I'm looking?",
        "How do I say no to a recruiter politely?",
    ),
    advice=(
        "Tailor the first three lines of the CV to each role; that's what gets read.",
        "Keep a brag document with numbers; it makes interviews and negotiation easier.",
        "Always ask about the team's biggest challenge right now.",
        "Negotiate on the total package, not only base salary.",
        "A short thank-you note after an interview still stands out.",
        "Practise your stories out loud; they get shorter and clearer.",
    ),
    asides=(
        "Another automated rejection, lol.",
        "LinkedIn is a strange place.",
        "I had three coffees before that call.",
    ),
    topics=(
        "the take-home",
        "salary negotiation",
        "the notice period",
        "cover letters",
        "references",
        "the recruiter call",
        "rejections",
    ),
)

STYLE = style(
    "jobsearch", "a job search: applications, interviews, salary, an offer deadline", TALK, VOCABULARY
)
