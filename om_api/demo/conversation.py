"""A long synthetic conversation with facts planted across it, for ``om demo`` and the benchmarks.

Deterministic for a given seed. Planted facts are user statements with distinctive names and numbers; a
fact counts as retained when every one of its key terms still appears in the final context.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class PlantedFact:
    statement: str
    key_terms: tuple[str, ...]


FACTS: tuple[PlantedFact, ...] = (
    PlantedFact("By the way, my sister's name is Priya and she lives in Lisbon.", ("Priya", "Lisbon")),
    PlantedFact("My employee ID is 48213, in case you need it for the forms.", ("48213",)),
    PlantedFact("I'm allergic to peanuts, so please keep that in mind for recipes.", ("peanuts",)),
    PlantedFact("My dog is called Biscuit and she is a beagle.", ("Biscuit",)),
    PlantedFact("Our wedding anniversary is on March 14.", ("March 14",)),
    PlantedFact("I drive a 2019 Subaru Outback.", ("Subaru Outback",)),
    PlantedFact("My manager is Tomasz Kowalski and he is quite strict about deadlines.", ("Tomasz",)),
    PlantedFact("I was born in Porto in 1988.", ("Porto", "1988")),
    PlantedFact("My daughter Ines starts school on September 3.", ("Ines",)),
    PlantedFact("Our team runs PostgreSQL 15 in production.", ("PostgreSQL 15",)),
    PlantedFact("The project codename is Blue Heron.", ("Blue Heron",)),
    PlantedFact("My budget for the Japan trip is 2400 euros.", ("2400",)),
    PlantedFact("My landlord is Mrs. Okafor and the rent is due on the 5th.", ("Okafor",)),
    PlantedFact("I play the cello in a community orchestra on Wednesdays.", ("cello",)),
    PlantedFact("My favourite author is Ursula Le Guin.", ("Le Guin",)),
    PlantedFact("Our office moved to 221 Harbour Street last month.", ("221 Harbour Street",)),
    PlantedFact("My partner Sam is vegetarian.", ("Sam", "vegetarian")),
    PlantedFact("My laptop is a ThinkPad X1 Carbon.", ("ThinkPad",)),
    PlantedFact("The client deadline for the Meridian contract is November 18.", ("Meridian",)),
    PlantedFact("My phone extension at work is 3317.", ("3317",)),
    PlantedFact("I take the 7:42 train from Oakridge station every morning.", ("Oakridge",)),
    PlantedFact("My brother Luca is a paramedic in Turin.", ("Luca", "Turin")),
    PlantedFact("I prefer all measurements in metric units.", ("metric",)),
    PlantedFact("My blood type is O negative.", ("O negative",)),
    PlantedFact("Our cat Pixel is 11 years old.", ("Pixel",)),
)

_TOPICS: tuple[tuple[str, str], ...] = (
    ("python", "How do I read a CSV file in Python without loading it all into memory?"),
    ("python", "What's the difference between a list and a tuple again?"),
    ("python", "Can you explain what a generator expression is?"),
    ("cooking", "What can I cook tonight with rice, spinach and eggs?"),
    ("cooking", "How long should I rest a loaf of bread before slicing it?"),
    ("travel", "What should I pack for a week of hiking in autumn?"),
    ("travel", "Is it better to buy a rail pass or single tickets for a two-week trip?"),
    ("sql", "How do I find duplicate rows in a table with SQL?"),
    ("sql", "When should I add an index to a column?"),
    ("fitness", "How can I improve my running pace over a few months?"),
    ("garden", "When is the right time to prune tomato plants?"),
    ("writing", "Can you help me make this email to a supplier sound more polite?"),
    ("money", "How should I think about an emergency fund?"),
    ("music", "What are good warm-up exercises before an orchestra rehearsal?"),
    ("home", "How do I stop a bathroom mirror from fogging up?"),
)

_ANSWER_SENTENCES: dict[str, tuple[str, ...]] = {
    "python": (
        "You can iterate over the file object with the csv module so that only one row is in memory.",
        "Tuples are immutable and hashable, which makes them usable as dictionary keys.",
        "A generator expression produces items lazily, one at a time, as the loop asks for them.",
        "For large inputs that pattern keeps memory flat however big the file grows.",
        "If you need column names, csv.DictReader gives you a dictionary per row.",
    ),
    "cooking": (
        "A quick egg fried rice works well: cook the rice, wilt the spinach, then scramble the eggs in.",
        "Letting bread rest for about an hour lets the crumb set so it does not turn gummy.",
        "Season at the end, since soy sauce and salt both intensify as the pan reduces.",
        "A squeeze of lemon brightens spinach dishes without adding much salt.",
    ),
    "travel": (
        "Layers matter most in autumn: a base layer, a fleece and a waterproof shell cover most days.",
        "A rail pass pays off when you take a long journey on most days; otherwise single tickets win.",
        "Book seat reservations early on popular routes even if the pass covers the fare.",
        "Pack a small first aid kit and blister plasters for long walking days.",
    ),
    "sql": (
        "Group by the columns that define a duplicate and keep the groups with a count above one.",
        "An index helps columns that appear in filters and joins on large tables.",
        "Indexes slow down writes a little, so add them where reads clearly benefit.",
        "Check the query plan before and after to see whether the index is actually used.",
    ),
    "fitness": (
        "Mix one interval session and one tempo run into each week and keep the other runs easy.",
        "Improvements usually show after six to eight weeks of consistent training.",
        "Sleep and recovery days matter as much as the hard sessions.",
    ),
    "garden": (
        "Prune the side shoots of cordon tomatoes as soon as they appear in early summer.",
        "Remove lower leaves that touch the soil to reduce the risk of blight.",
        "Stop pruning late in the season so the remaining fruit can ripen.",
    ),
    "writing": (
        "Open with a thank-you, state the request plainly, and close with a clear next step.",
        "Replace demands with questions, for example could you confirm the delivery date.",
        "Keep it short: three short paragraphs read as more courteous than one long one.",
    ),
    "money": (
        "A common rule of thumb is three to six months of essential expenses.",
        "Keep it in an account that is easy to reach but separate from daily spending.",
        "Build it gradually with an automatic transfer on payday.",
    ),
    "music": (
        "Long slow bows on open strings are a good way to settle the sound before rehearsal.",
        "Scales in the key of the first piece prepare the fingers for the programme.",
        "A few minutes of shifting exercises help intonation in the higher positions.",
    ),
    "home": (
        "Run the extractor fan during and after the shower for at least fifteen minutes.",
        "A thin film of shaving foam wiped off the mirror prevents fogging for a while.",
        "Opening the window slightly lets the moist air escape faster.",
    ),
}

_FILLER_USER = (
    "Thanks, that helps.",
    "Ok, sounds good.",
    "Great, thanks!",
    "Makes sense.",
    "Cool.",
)


@dataclass(frozen=True, slots=True)
class Turn:
    index: int
    user: dict[str, Any]
    assistant: dict[str, Any]
    fact: PlantedFact | None


def synthetic_conversation(
    turns: int = 320, *, seed: int = 7, start: datetime | None = None
) -> Iterator[Turn]:
    """Yield ``turns`` user/assistant exchanges, the planted facts spread evenly across them."""
    rng = random.Random(seed)
    clock = start or datetime(2026, 3, 2, 8, 30, tzinfo=UTC)
    fact_turns = {round((i + 0.5) * turns / len(FACTS)): fact for i, fact in enumerate(FACTS)}
    for index in range(turns):
        clock += timedelta(minutes=rng.randint(1, 6))
        if rng.random() < 0.03:
            clock += timedelta(hours=rng.randint(2, 40))
        fact = fact_turns.get(index)
        topic, question = _TOPICS[rng.randrange(len(_TOPICS))]
        if fact is not None:
            user_text = f"{fact.statement} Anyway, {question[0].lower()}{question[1:]}"
        elif rng.random() < 0.25:
            user_text = _FILLER_USER[rng.randrange(len(_FILLER_USER))]
            topic = "filler"
        else:
            user_text = question
        answer = _answer(rng, topic)
        user = {
            "id": f"u{index:04d}",
            "role": "user",
            "parts": [{"type": "text", "text": user_text}],
            "createdAt": clock.isoformat(),
        }
        reply_at = clock + timedelta(seconds=rng.randint(5, 40))
        assistant = {
            "id": f"a{index:04d}",
            "role": "assistant",
            "parts": [{"type": "text", "text": answer}],
            "createdAt": reply_at.isoformat(),
            "model": "openai/gpt-5-mini",
        }
        yield Turn(index=index, user=user, assistant=assistant, fact=fact)


def _answer(rng: random.Random, topic: str) -> str:
    if topic == "filler":
        return "You're welcome! Let me know if there is anything else I can help with."
    sentences = list(_ANSWER_SENTENCES[topic])
    rng.shuffle(sentences)
    body = " ".join(sentences[: rng.randint(2, len(sentences))])
    return f"Good question. {body} I hope that helps, and I can go into more detail on any of these points."
