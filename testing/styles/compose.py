"""The machinery every style shares: the conversation builder, small talk, and the hard cases of issue 20
as episodes (a few messages that plant one or two facts), phrased by composing frames, leads, tails and
random context rather than from fixed sentences.

A style (``testing/styles/<name>.py``) supplies the vocabulary: its slots (things with a value the user
states, corrects, or is offered by the assistant), its pasted tables and JSON, its tool output, people,
events and French/German/Japanese lines; ``build`` plans 18–24 facts over 300–600 messages and fills the
rest with the style's small talk.

Seeds ≥ ``HELDOUT_FIRST_SEED`` are held out: they draw from every frame, while development seeds never
draw the last of each three frames of a list (``Builder.choose``), so a held-out conversation also says
things in ways no development conversation does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

from testing.styles.dates import PHRASES
from testing.styles.facts import Fact, Part, date_part, value_part

HELDOUT_FIRST_SEED = 50_000
T = TypeVar("T")


@dataclass(slots=True)
class Conversation:
    style: str
    seed: int
    messages: list[dict[str, Any]]
    facts: list[Fact]
    planned_facts: int

    @property
    def heldout(self) -> bool:
        return self.seed >= HELDOUT_FIRST_SEED


def message_text(message: dict[str, Any]) -> str:
    """Every word a model would read in a message: its text parts and its tool calls' arguments and
    results."""
    pieces: list[str] = []
    for part in message["parts"]:
        if part.get("type") == "text":
            pieces.append(part["text"])
        elif part.get("type") == "tool-invocation":
            call = part["toolInvocation"]
            pieces += [
                json.dumps(call[key], ensure_ascii=False) if not isinstance(call[key], str) else call[key]
                for key in ("args", "result", "error")
                if call.get(key) is not None
            ]
    return "\n".join(pieces)


# --- the vocabulary shared by all styles ----------------------------------------------------------------

FIRST_NAMES = (
    "Sanne", "Keiko", "Mateo", "Aiko", "Kwame", "Ingrid", "Tomasz", "Leilani", "Farouk", "Sunniva",
    "Dmitri", "Amara", "Joaquin", "Oksana", "Thabo", "Mirela", "Caoimhe", "Yusuf", "Ngozi", "Henrik",
    "Marisol", "Ravi", "Beatrix", "Eamon", "Saoirse", "Kenji", "Anouk", "Dario", "Lucinda", "Bertrand",
    "Zofia", "Idris", "Greta", "Anselm", "Noor", "Cosima", "Teodor", "Wanjiru", "Ottilie", "Lorcan",
    "Hana", "Bruno", "Elif", "Paavo", "Rosalind", "Tariq", "Maelle", "Jonas", "Fenna", "Ilse", "Goran",
    "Priyanka", "Lars", "Chiara", "Emeka", "Solveig", "Mirko", "Yara", "Otto", "Ama", "Benedikt",
)  # fmt: skip
SURNAMES = (
    "Raman", "Okafor", "Kowalski", "Lindqvist", "Haddad", "Moreau", "Nakashima", "Achterberg", "Ferreira",
    "Brennan", "Vasquez", "Oyelaran", "Petrov", "Castellanos", "Abernethy", "Szabo", "Mwangi", "Dufresne",
    "Halvorsen", "Iqbal", "Tanaka", "Whitcombe", "Ruiz", "Esposito", "Kaminski", "Obi", "Lund", "Quint",
    "Albrecht", "Dubois", "Vermeulen", "Yamada", "Horvat", "Brandt", "Leclerc", "Novak", "Sato",
)  # fmt: skip
CITIES = (
    "Lisbon", "Ljubljana", "Tallinn", "Valparaiso", "Hobart", "Nairobi", "Quito", "Osaka", "Bergen",
    "Porto", "Trieste", "Cork", "Leipzig", "Chiang Mai", "Oaxaca", "Tbilisi", "Kraków", "Dunedin",
    "Halifax", "Cusco", "Tromsø", "Bruges", "Matera", "Zanzibar", "Plovdiv", "Ghent", "Aarhus",
    "Salzburg", "Trondheim", "Utrecht", "Lyon", "Freiburg", "Sapporo", "Fukuoka", "Montréal", "Graz",
)  # fmt: skip
ORGS = (
    "a vet clinic", "a small architecture firm", "the university hospital", "a bike shop", "a shipping "
    "company", "a school", "the city council", "a bakery", "a start-up", "a museum", "a law firm",
)  # fmt: skip


def person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(SURNAMES)}"


def first_name(rng: random.Random) -> str:
    return rng.choice(FIRST_NAMES)


def money(rng: random.Random, low: int, high: int, step: int = 5, symbol: str | None = None) -> str:
    amount = rng.randrange(low, high, step)
    sign = symbol or rng.choice(("€", "$", "£"))
    return f"{sign}{amount:,}"


def clock(rng: random.Random) -> str:
    return f"{rng.randint(6, 21):02d}:{rng.choice(('05', '10', '15', '20', '30', '40', '45', '50'))}"


def code(rng: random.Random, letters: int = 2, digits: int = 4) -> str:
    head = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(letters))
    return head + "".join(rng.choice("0123456789") for _ in range(digits))


# --- the builder ----------------------------------------------------------------------------------------

# first words a lead lowercases ("Oh and the flight…"); any other first word may be a name and keeps its case
_COMMON_STARTS = set(
    [
        "our",
        "my",
        "the",
        "we",
        "it",
        "this",
        "they",
        "there",
        "so",
        "that",
        "a",
        "an",
        "in",
        "actually",
        "scratch",
        "update",
        "small",
        "ugh",
        "forget",
        "change",
        "correction",
        "heads",
        "turns",
        "new",
        "for",
        "just",
        "okay",
        "ok",
        "guess",
        "coming",
        "home",
        "first",
        "base",
        "max",
        "booked",
        "seats",
        "day",
        "dinner",
        "car",
        "travel",
        "policy",
        "outbound",
        "budget",
        "what",
        "how",
        "can",
        "could",
        "any",
        "help",
        "thoughts",
        "i'm",
        "we're",
        "let's",
        "please",
        "next",
        "from",
        "all",
        "every",
        "each",
        "one",
        "two",
        "three",
        "some",
        "no",
        "yes",
    ]
)


@dataclass(slots=True)
class Builder:
    style: str
    seed: int
    rng: random.Random
    clock: datetime
    messages: list[dict[str, Any]] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    calls: int = 0
    # the user's way of writing: some start messages in lowercase and drop the final full stop
    casual: bool = False

    @property
    def heldout(self) -> bool:
        return self.seed >= HELDOUT_FIRST_SEED

    def choose(self, options: Sequence[T]) -> T:
        """One of ``options``; a development seed never draws every third one (see the module doc)."""
        if not self.heldout and len(options) >= 3:
            options = [option for index, option in enumerate(options) if index % 3 != 2]
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def fresh(self, draw: Callable[[random.Random], str]) -> str:
        """A value not drawn before in this conversation."""
        value = draw(self.rng)
        for _ in range(60):
            if value not in self.used:
                break
            value = draw(self.rng)
        self.used.add(value)
        return value

    def advance_for_user(self) -> datetime:
        """The time of the next user message (sometimes the next day or later: a new session)."""
        if self.messages and self.chance(0.025):
            self.clock += timedelta(hours=self.rng.randint(5, 60), minutes=self.rng.randint(0, 59))
        else:
            self.clock += timedelta(seconds=self.rng.randint(25, 420))
        return self.clock

    def _add(self, role: str, parts: list[dict[str, Any]], when: datetime) -> str:
        message_id = f"{self.style}-{self.seed}-{len(self.messages):04d}"
        self.messages.append({"id": message_id, "role": role, "parts": parts, "createdAt": when.isoformat()})
        return message_id

    def user(self, text: str, when: datetime | None = None) -> str:
        at = when if when is not None else self.advance_for_user()
        if self.casual and self.chance(0.5):
            text = _casual(text)
        return self._add("user", [{"type": "text", "text": text}], at)

    def assistant(self, text: str, tools: Sequence[dict[str, Any]] = (), after: str = "") -> str:
        self.clock += timedelta(seconds=self.rng.randint(3, 40))
        parts: list[dict[str, Any]] = []
        if text:
            parts.append({"type": "text", "text": text})
        parts += tools
        if after:
            parts.append({"type": "text", "text": after})
        return self._add("assistant", parts, self.clock)

    def tool(self, name: str, args: dict[str, Any], result: Any, failed: bool = False) -> dict[str, Any]:
        self.calls += 1
        invocation: dict[str, Any] = {"toolCallId": f"call_{self.calls}", "toolName": name, "args": args}
        invocation |= {"state": "error", "error": result} if failed else {"state": "result", "result": result}
        return {"type": "tool-invocation", "toolInvocation": invocation}

    def plant(
        self,
        key: str,
        category: str,
        priority: str,
        parts: Sequence[Part],
        message_id: str,
        source: str,
        **extra: Any,
    ) -> Fact:
        fact = Fact(key, category, priority, tuple(parts), message_id, source, **extra)
        self.facts.append(fact)
        return fact

    # --- phrasing -----------------------------------------------------------------------------------

    def said_in_passing(self, sentence: str, chatter: Callable[[Builder], str] | None = None) -> str:
        """``sentence`` with a lead, a tail, and sometimes other talk before or after it."""
        lead = self.choose(_LEADS) if self.chance(0.55) else ""
        body = sentence
        if lead:
            first = body.split(" ", 1)[0]
            if first.casefold() in _COMMON_STARTS:
                body = body[0].lower() + body[1:]
        if body.endswith(".") and self.chance(0.3):
            body = body[:-1] + self.choose(_CLAUSES) + "."
        tail = self.choose(_TAILS) if self.chance(0.3) else ""
        if tail and body.endswith("."):
            body = body[:-1] + tail
        text = lead + body
        if chatter is not None and self.chance(0.45):
            other = chatter(self)
            text = f"{other} {text}" if self.chance(0.5) else f"{text} {other}"
        return text

    def ack(self, extra: str = "") -> str:
        sentences = [self.choose(_ACKS)]
        if extra:
            sentences.append(extra)
        return " ".join(sentences)


def _casual(text: str) -> str:
    if text[:1].isupper() and text[1:2].islower() and not text.startswith("I "):
        text = text[0].lower() + text[1:]
    if text.endswith(".") and "\n" not in text:
        text = text[:-1]
    return text


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


_LEADS = (
    "Oh and ", "By the way, ", "Quick note: ", "Before I forget — ", "Also, ", "One more thing: ",
    "FYI ", "Random, but ", "Ok so ", "Right, ", "Btw ", "Just remembered: ", "Side note: ",
    "Meant to say earlier — ", "For the record, ", "Not urgent, but ", "Ah, and ", "Another thing: ",
)  # fmt: skip
_TAILS = (
    " — just so you know.", ", in case that matters.", ", fyi.", " (writing it here so I don't forget).",
    ", if that helps.", ", for what it's worth.", " — keep that in mind please.", ", just noting it.",
    " (that one's important).", ", anyway.",
)  # fmt: skip
# what people add to a fact they state: why, how it went, how they feel about it
_CLAUSES = (
    ", after a lot of back and forth", ", which took ages to sort out", " — finally", ", my partner found it",
    ", because the other option fell through", ", at least for now", ", which I'm quite happy about",
    " (long story)", ", as far as I know", ", thanks to a friend's tip", ", believe it or not",
    ", if nothing changes", " after comparing about five options", ", which surprised me",
    ", on the advice of a colleague", ", as we discussed last week", ", no drama this time",
)  # fmt: skip
_ACKS = (
    "Noted.", "Got it.", "Thanks, good to know.", "Okay, I'll keep that in mind.", "Understood.",
    "Good to know!", "Thanks for flagging that.", "Makes sense.", "Alright.", "Perfect, noted.",
    "Thanks — that helps.", "Sure.", "Will do.", "Good, that simplifies things.", "Ah, okay.",
)  # fmt: skip


# --- small talk ----------------------------------------------------------------------------------------

_LIFE_SUBJECTS = (
    "the weather", "my commute", "work", "the neighbours' dog", "my back", "the kettle", "the heating",
    "my phone", "the train", "the kids' school run", "my sleep", "the coffee machine", "the laptop",
    "the traffic", "the garden", "my inbox", "the gym", "our internet",
)  # fmt: skip
_LIFE_PREDICATES = (
    "has been a mess", "is driving me a bit mad", "was surprisingly fine", "has been better",
    "decided to act up again", "is finally behaving", "took forever", "was a whole saga", "is not great",
    "has been weirdly good", "keeps getting worse", "was the highlight, honestly",
)  # fmt: skip
_LIFE_WHEN = (
    "today", "this week", "since Sunday", "all morning", "lately", "this afternoon", "again", "yesterday",
    "the last few days", "since the weekend",
)  # fmt: skip
_LIFE_TAILS = (
    "", "", " so I'm a bit slow", " which isn't helping", ", whatever", " lol", " :)", ", anyway",
    " — don't ask", ", so bear with me", ", typical",
)  # fmt: skip
_OPENERS = (
    "", "", "", "Honestly, ", "Ugh, ", "Anyway, ", "So ", "Well, ", "Funny enough, ", "Not gonna lie, ",
    "Hm. ", "Okay so ", "Right. ",
)  # fmt: skip
_GREETINGS = (
    "Hi!", "Hello again.", "Hey.", "Morning!", "Evening.", "Hi, me again.", "Hey, quick one.", "Back again!",
)  # fmt: skip
_USER_ACKS = (
    "Thanks!", "ok", "Great, thanks.", "Makes sense.", "cool", "Perfect.", "Got it.", "Nice.", "Hmm okay.",
    "Brilliant, cheers.", "Fair enough.", "right", "Yes, exactly.", "lol ok", "Thank you so much!",
    "That's useful.", "Okay, noted.", "👍", "Sounds about right.",
)  # fmt: skip
_ASSISTANT_OPENERS = (
    "Good question.", "Happy to help.", "Sure.", "Of course.", "Let me think.", "Here's how I'd approach it.",
    "A few thoughts.", "Absolutely.", "Short answer: it depends.", "Okay!", "Right.", "That's fair.",
)  # fmt: skip
_ASSISTANT_GENERIC = (
    "Breaking it into smaller steps usually makes it feel more manageable.",
    "It helps to write down what matters most before deciding.",
    "A short checklist goes a long way here.",
    "A little preparation up front saves time later.",
    "If anything is unclear, ask early rather than guess.",
    "There's no single right answer, but a few rules of thumb work well.",
    "Keeping notes as you go makes it easier to pick things up later.",
    "Try the simplest option first and add complexity only when needed.",
    "Small problems are cheaper to fix early than large ones later.",
    "Putting the options side by side tends to make the choice obvious.",
    "Consistency matters more than intensity for this kind of thing.",
    "You can always revisit the decision once you know more.",
)  # fmt: skip


def life_line(b: Builder) -> str:
    """A sentence about the user's day: composed, so it rarely repeats."""
    opener = b.choose(_OPENERS)
    subject = cap(b.choose(_LIFE_SUBJECTS)) if opener.endswith(". ") else b.choose(_LIFE_SUBJECTS)
    text = f"{opener}{subject} {b.choose(_LIFE_PREDICATES)} {b.choose(_LIFE_WHEN)}"
    text += b.choose(_LIFE_TAILS)
    return cap(text) + "."


@dataclass(frozen=True, slots=True)
class Talk:
    """A style's small talk: the user's questions and asides, and the assistant's advice."""

    questions: tuple[str, ...]
    advice: tuple[str, ...]
    asides: tuple[str, ...] = ()
    # noun phrases the user asks about in composed questions ("Any tips for {topic}?")
    topics: tuple[str, ...] = ()
    # the assistant's tool work during small talk (no planted fact in it); None: no tools in this style
    tool_turn: Callable[[Builder], list[dict[str, Any]]] | None = None


_TOPIC_QUESTIONS = (
    "Any tips for {t}?", "How do people usually handle {t}?",
    "What's the least stressful way to deal with {t}?", "Can you explain {t} like I'm five?",
    "What am I forgetting about {t}?", "Is it normal to worry about {t}?",
    "What would you do about {t}?", "Quick sanity check on {t}?", "How much time should {t} take?",
    "What's a common mistake with {t}?", "Where do I even start with {t}?", "Any good checklist for {t}?",
)  # fmt: skip


def question(b: Builder, talk: Talk) -> str:
    """A question of the style: one of its own, or a frame about one of its topics."""
    if talk.topics and b.chance(0.45):
        return b.choose(_TOPIC_QUESTIONS).format(t=b.choose(talk.topics))
    return b.choose(talk.questions)


def chatter(b: Builder, talk: Talk) -> str:
    roll = b.rng.random()
    if roll < 0.18:
        return b.choose(_USER_ACKS)
    pieces: list[str] = []
    if b.chance(0.1):
        pieces.append(b.choose(_GREETINGS))
    if b.chance(0.4):
        pieces.append(life_line(b))
    if talk.asides and b.chance(0.35):
        pieces.append(b.choose(talk.asides))
    if roll < 0.26 and b.messages:
        pieces.append(
            b.choose(("Asking again, sorry: ", "Back to this: ", "Still wondering: ")) + question(b, talk)
        )
    else:
        pieces.append(question(b, talk))
    if b.chance(0.2):
        pieces.append(life_line(b))
    return " ".join(pieces)


def advice(b: Builder, talk: Talk, sentences: tuple[int, int] = (1, 4)) -> str:
    lines = [b.choose(_ASSISTANT_OPENERS)]
    pool = list(dict.fromkeys(b.choose(talk.advice + _ASSISTANT_GENERIC) for _ in range(sentences[1])))
    count = b.rng.randint(*sentences)
    if b.chance(0.25):
        lines.append("\n".join(f"- {line}" for line in pool[:count]))
    else:
        lines += pool[:count]
    if b.chance(0.3):
        lines.append(b.choose(("Want me to go into more detail?", "Does that help?", "Anything else?")))
    return " ".join(lines)


def small_talk(b: Builder, talk: Talk) -> None:
    """One exchange of small talk: a user message (sometimes two) and the assistant's answer."""
    b.user(chatter(b, talk))
    if b.chance(0.08):
        follow = question(b, talk)
        if not follow.startswith("I "):
            follow = follow[0].lower() + follow[1:]
        b.user(b.choose(("oh and", "also", "sorry, one more:")) + " " + follow)
    if talk.tool_turn is not None and b.chance(0.3):
        b.assistant(
            b.rng.choice(("Let me check.", "One moment.", "Checking.")), talk.tool_turn(b), advice(b, talk)
        )
    else:
        b.assistant(advice(b, talk))


# --- slots: things with a value the user states, corrects, or is offered ------------------------------


@dataclass(frozen=True, slots=True)
class Slot:
    """``noun`` names the thing in generic frames ("the outbound flight"); ``says`` are the user's ways to
    state it (``{v}`` is the value); ``detail`` describes an option when the assistant lists or proposes
    values; ``renderings`` gives other ways the same value may be written."""

    key: str
    noun: str
    draw: Callable[[random.Random], str]
    says: tuple[str, ...]
    priority: str = "medium"
    detail: Callable[[random.Random], str] | None = None
    renderings: Callable[[str], tuple[str, ...]] = lambda value: ()
    # whether the assistant can sensibly offer values of it (a policy number is the user's, not a choice)
    offered: bool = True

    def part(self, value: str) -> Part:
        return value_part(value, *self.renderings(value))


_CORRECTIONS = (
    "Actually, {noun} changed — it's {v} now, not {old}.",
    "Scratch what I said about {noun}: {v}.",
    "Update on {noun}: {v}. They changed it on us.",
    "Small correction, I had {noun} wrong earlier. It's {v}.",
    "Ugh, {noun} moved again. New one is {v}.",
    "Forget {old} — {noun} is {v} now.",
    "Change of plan for {noun}: {v} instead of {old}.",
    "Correction to earlier: not {old}. {v}.",
    "{Noun} is now {v}, not {old} anymore.",
    "Heads up, {noun} got changed to {v}.",
    "Turns out {old} was wrong, {noun} is actually {v}.",
    "New info: {noun} → {v} (was {old}).",
)  # fmt: skip
_CORRECTION_ACKS = (
    "Thanks, updated.", "Got it, I'll use the new one.", "Noted, that replaces the old one.",
    "Okay, changing it.", "Right, {v} it is.", "Understood — {v} from now on.",
)  # fmt: skip


def statement(b: Builder, slot: Slot, talk: Talk, category: str = "plain") -> Fact:
    value = b.fresh(slot.draw)
    sentence = cap(b.choose(slot.says).format(v=value))
    message = b.user(b.said_in_passing(sentence, lambda x: chatter(x, talk)))
    b.assistant(b.ack(advice(b, talk, (0, 2)) if b.chance(0.5) else ""))
    return b.plant(slot.key, category, slot.priority, [slot.part(value)], message, sentence)


_JOINERS = (" Also, ", " And ", " Oh, and ", " — also, ", " Plus ", "\n\nSecond thing: ")


def statement_pair(b: Builder, first: Slot, second: Slot, talk: Talk) -> None:
    """Two values stated in one message."""
    values = [b.fresh(first.draw), b.fresh(second.draw)]
    sentences = [
        cap(b.choose(slot.says).format(v=v)) for slot, v in zip((first, second), values, strict=True)
    ]
    follow = sentences[1]
    if follow.split(" ", 1)[0].casefold() in _COMMON_STARTS:
        follow = follow[0].lower() + follow[1:]
    message = b.user(b.said_in_passing(sentences[0] + b.choose(_JOINERS) + follow))
    b.assistant(b.ack(advice(b, talk, (0, 2))))
    for slot, value, sentence in zip((first, second), values, sentences, strict=True):
        b.plant(slot.key, "plain", slot.priority, [slot.part(value)], message, sentence)


@dataclass(slots=True)
class Pending:
    """The first statement of a value that a later episode corrects."""

    slot: Slot
    value: str = ""
    message_id: str = ""


def first_statement(b: Builder, pending: Pending, talk: Talk) -> None:
    fact = statement(b, pending.slot, talk)
    b.facts.remove(fact)
    pending.value, pending.message_id = fact.parts[0].shown, fact.message_id


def correction(b: Builder, pending: Pending, talk: Talk) -> None:
    slot = pending.slot
    value = b.fresh(slot.draw)
    sentence = b.choose(_CORRECTIONS).format(v=value, old=pending.value, noun=slot.noun, Noun=cap(slot.noun))
    message = b.user(b.said_in_passing(cap(sentence)))
    b.assistant(b.choose(_CORRECTION_ACKS).format(v=value) + " " + advice(b, talk, (0, 2)))
    b.plant(
        slot.key,
        "correction",
        slot.priority,
        [slot.part(value)],
        message,
        sentence,
        superseded=(slot.part(pending.value),),
        first_message_id=pending.message_id,
    )


# --- the assistant proposes, the user confirms ------------------------------------------------------------

_ASKS = (
    "Can you suggest {noun}?", "What would you go with for {noun}?", "Any idea for {noun}?",
    "Help me choose {noun}.", "I still need to sort out {noun}, any thoughts?",
    "What's your pick for {noun}?",
    "Could you look into {noun} for me?", "I can't decide on {noun}. Ideas?", "Thoughts on {noun}?",
)  # fmt: skip
_PROPOSALS = (
    "I'd go with {v}{d} — {reason}.", "My suggestion for {noun}: {v}{d}. {Reason}.",
    "The best fit looks like {v}{d}; {reason}.", "Based on what you've told me, {v} is the one I'd pick{d}.",
    "{v} stands out{d}: {reason}.", "I'd recommend {v}{d}. {Reason}.",
    "Looking at everything, {v}{d} makes the most sense — {reason}.", "Go for {v}{d}; {reason}.",
    "Honestly {v}{d}. {Reason}.",
)  # fmt: skip
_QUESTION_PROPOSALS = (
    "How about {v}{d}?", "Would {v} work for {noun}{d}?", "Shall I put down {v} for {noun}?",
    "What do you think of {v}{d}?", "Want to go with {v}{d}?", "Could {v} be the one{d}?",
    "Maybe {v}{d}?", "Does {v} sound okay{d}?", "Should we just say {v}?",
)  # fmt: skip
_REASONS = (
    "it keeps you under budget", "it has the best reviews of the lot", "it's the least hassle",
    "the timing works with everything else", "it's the most flexible option", "it's close to where you'll be",
    "it covers what you asked for", "people you trust have used it", "it leaves some slack",
    "it avoids the problem you mentioned", "it's the safest choice", "the numbers work out best",
)  # fmt: skip
_CONFIRMS = (
    "yes!! that one", "Perfect, let's do that.", "ok go with that", "Sounds good, book it.",
    "great — lock it in", "yep, that works", "Love it. Done.", "Sure, let's go with your suggestion.",
    "Yes. Do it.", "that's the one 👍", "Agreed!", "ok, sold", "Fine by me, go ahead.",
    "Perfect, that's it then.", "Yes, that.",
)  # fmt: skip
_QUESTION_CONFIRMS = (
    "yes please", "Yes, that works.", "sure, do it", "yeah why not", "works for me!", "Yes — go for it.",
    "Sounds good.", "ok yes", "Yep.", "Sure!", "Let's do that.", "Yes, perfect.",
)  # fmt: skip
_REJECTS = (
    "hmm, not that one — {why}.", "No, that doesn't work for me, {why}.", "Not keen on that, {why}.",
    "Nah, {why}.", "I'd rather not, {why}.", "Hmm no. {Why}.",
)  # fmt: skip
_REJECT_WHYS = (
    "too pricey", "the timing is off", "I've had a bad experience there", "it doesn't fit the dates",
    "it's too far", "my partner vetoed it", "it sounds like a hassle",
)  # fmt: skip
_AFTER_CONFIRM = (
    "Great, {v} it is.", "Done — {v}.", "Perfect, I've noted {v}.", "Lovely.", "Great choice.", "Done!",
    "Okay, going with that.", "Excellent.",
)  # fmt: skip


def _detail(b: Builder, slot: Slot) -> str:
    if slot.detail is None or b.chance(0.3):
        return ""
    return f" ({slot.detail(b.rng)})"


def proposal(b: Builder, slot: Slot, talk: Talk, question: bool) -> None:
    ask = b.choose(_ASKS).format(noun=slot.noun)
    b.user(b.said_in_passing(cap(ask)))
    rejected: list[Part] = []
    if b.chance(0.35):
        first = b.fresh(slot.draw)
        reason = b.choose(_REASONS)
        b.assistant(
            b.choose(_PROPOSALS).format(
                v=first, d=_detail(b, slot), noun=slot.noun, reason=reason, Reason=cap(reason)
            )
        )
        why = b.choose(_REJECT_WHYS)
        b.user(cap(b.choose(_REJECTS).format(why=why, Why=cap(why))))
        rejected.append(slot.part(first))
    value = b.fresh(slot.draw)
    reason = b.choose(_REASONS)
    frames = _QUESTION_PROPOSALS if question else _PROPOSALS
    offer = b.choose(frames).format(
        v=value, d=_detail(b, slot), noun=slot.noun, reason=reason, Reason=cap(reason)
    )
    if rejected:
        offer = (
            b.rng.choice(("Fair enough. ", "Okay, then: ", "Understood. In that case ", "Alright — ")) + offer
        )
    said = b.assistant(offer)
    confirmed = b.user(b.choose(_QUESTION_CONFIRMS if question else _CONFIRMS))
    closing = b.choose(_AFTER_CONFIRM).format(v=value) if b.chance(0.3) else b.choose(_ACKS)
    b.assistant(closing + " " + advice(b, talk, (0, 1)))
    b.plant(
        slot.key,
        "question-proposal" if question else "confirmed-proposal",
        slot.priority,
        [slot.part(value)],
        said,
        offer,
        confirmed_in=confirmed,
        superseded=tuple(rejected),
    )


_ORDINALS = ("first", "second", "third", "fourth")
_LIST_INTROS = (
    "Here are a few options for {noun}:", "I found {n} that fit:", "Options for {noun}:",
    "You could pick from these:", "These look like the best candidates:", "Shortlist for {noun}:",
)  # fmt: skip


def pick(b: Builder, slot: Slot, talk: Talk) -> None:
    b.user(b.said_in_passing(cap(b.choose(_ASKS).format(noun=slot.noun))))
    count = b.rng.randint(3, 4)
    values = [b.fresh(slot.draw) for _ in range(count)]
    details = [slot.detail(b.rng) if slot.detail else b.choose(_REASONS) for _ in values]
    layout = b.rng.randrange(4)
    if layout == 0:
        lines = [f"{i + 1}. {v} — {d}" for i, (v, d) in enumerate(zip(values, details, strict=True))]
    elif layout == 1:
        lines = [f"- {v} ({d})" for v, d in zip(values, details, strict=True)]
    elif layout == 2:
        lines = [f"{'ABCD'[i]}) {v}: {d}" for i, (v, d) in enumerate(zip(values, details, strict=True))]
    else:
        listed = [f"{v} ({d})" for v, d in zip(values, details, strict=True)]
        lines = [", ".join(listed[:-1]) + " or " + listed[-1] + "."]
    intro = b.choose(_LIST_INTROS).format(noun=slot.noun, n=count)
    highlight: int | None = None
    closing = b.rng.choice(("Which one do you prefer?", "Any favourite?", "Let me know which.", ""))
    if b.chance(0.3):
        highlight = b.rng.randrange(count)
        closing = f"If I had to choose, {values[highlight]}. " + closing
    said = b.assistant((intro + "\n" + "\n".join(lines) + "\n\n" + closing).strip())
    if highlight is not None:
        index = highlight
        reply = b.choose(
            ("that one then", "ok, that one", "Yes, that one.", "Agreed, let's go with that one.")
        )
    else:
        index = b.rng.randrange(count)
        options = [f"the {_ORDINALS[index]} one", f"the {_ORDINALS[index]} one please", f"#{index + 1}"]
        if layout == 0:
            options += [f"number {index + 1}", f"{index + 1} please", f"option {index + 1}"]
        if layout == 2:
            options += [f"option {'ABCD'[index]}", f"{'ABCD'[index]}!"]
        if index == count - 1:
            options += ["the last one", "the last one looks best"]
        if count == 3 and index == 1:
            options.append("the middle one")
        reply = cap(b.choose(options))
        if b.chance(0.3):
            reply += b.rng.choice((", looks best", " — easy choice", ". Thanks!", ", I think"))
    confirmed = b.user(reply)
    closing_reply = b.choose(_AFTER_CONFIRM).format(v=values[index]) if b.chance(0.25) else b.choose(_ACKS)
    b.assistant(closing_reply + " " + advice(b, talk, (0, 1)))
    b.plant(
        slot.key,
        "pick",
        slot.priority,
        [slot.part(values[index])],
        said,
        lines[min(index, len(lines) - 1)],
        confirmed_in=confirmed,
    )


# --- pasted structure: tables, CSV, JSON ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cell:
    """A planted cell: ``row`` and ``column`` index the rows given, whose first column labels them."""

    key: str
    row: int
    column: int
    priority: str


def _table_text(b: Builder, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if b.chance(0.6):
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        if b.chance(0.3):
            lines = [line.strip("| ").replace(" | ", " | ") for line in lines]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [headers, *rows]) + 2 for i in range(len(headers))]
    return "\n".join(
        "".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *rows]
    )


def _csv_text(b: Builder, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    sep = ";" if b.chance(0.25) else ","

    def field_of(value: str) -> str:
        return f'"{value}"' if sep in value or (" " in value and b.chance(0.3)) else value

    return "\n".join(sep.join(field_of(str(c)) for c in row) for row in [headers, *rows])


_PASTE_INTROS = (
    "Here's {what}:", "Pasting {what} below.", "This is {what}:", "ok here's {what}",
    "{What}, copied from my notes:",
    "Found {what}, pasting it:", "Dumping {what} here so you have it:",
)  # fmt: skip
_PASTE_ASKS = (
    "Can you sanity-check it?", "Anything that looks off?", "Keep this handy please.", "Thoughts?",
    "Does that look right?", "What would you change?", "", "Just so you have it.",
)  # fmt: skip


def paste_rows(
    b: Builder,
    what: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    cells: Sequence[Cell],
    talk: Talk,
    as_csv: bool,
) -> None:
    body = _csv_text(b, headers, rows) if as_csv else _table_text(b, headers, rows)
    if as_csv and b.chance(0.5):
        body = f"```csv\n{body}\n```"
    intro = b.choose(_PASTE_INTROS).format(what=what, What=cap(what))
    message = b.user(f"{intro}\n\n{body}\n\n{b.choose(_PASTE_ASKS)}".strip())
    b.assistant(advice(b, talk, (1, 3)))
    for cell in cells:
        row = rows[cell.row]
        b.plant(
            cell.key,
            "csv" if as_csv else "table",
            cell.priority,
            [value_part(row[0]), value_part(row[cell.column])],
            message,
            " ".join(str(c) for c in row),
        )


def paste_json(
    b: Builder,
    what: str,
    document: dict[str, Any],
    planted: Sequence[tuple[str, str, str]],
    talk: Talk,
    via_tool: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """``planted``: (key, value, priority) of values inside ``document``. With ``via_tool`` the JSON is a
    tool's result in the assistant's message rather than pasted by the user."""
    body = json.dumps(document, indent=b.rng.choice((2, 2, None)), ensure_ascii=False)
    if via_tool is not None:
        b.user(question(b, talk))
        message = b.assistant(
            b.rng.choice(("Let me pull that up.", "Checking.", "One sec.")),
            [b.tool(via_tool[0], via_tool[1], body)],
            advice(b, talk, (1, 2)),
        )
    else:
        fenced = f"```json\n{body}\n```" if b.chance(0.6) else body
        intro = b.choose(_PASTE_INTROS).format(what=what, What=cap(what))
        message = b.user(f"{intro}\n{fenced}\n{b.choose(_PASTE_ASKS)}".strip())
        b.assistant(advice(b, talk, (1, 3)))
    for key, value, priority in planted:
        b.plant(key, "json", priority, [value_part(value)], message, value)


# --- dates, people, other languages, tool output -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happens on a day: ``says`` are sentences with ``{when}``, in ``language``."""

    key: str
    says: tuple[str, ...]
    priority: str = "high"
    language: str = "en"


_DATE_FRAMES = ("{s}", "Heads up: {s}", "Just confirmed — {s}", "So, {s}", "Okay, news: {s}", "{s} Finally!")


def relative_date(b: Builder, event: Event, talk: Talk) -> None:
    when = b.advance_for_user()
    phrase, day = b.choose(PHRASES[event.language])(b.rng, when.date())
    sentence = b.choose(event.says).format(when=phrase)
    sentence = cap(sentence)
    text = sentence
    if event.language == "en":
        frame = b.choose(_DATE_FRAMES)
        text = frame.format(s=sentence) if frame != "{s}" else b.said_in_passing(sentence)
    message = b.user(text, when=when)
    b.assistant(b.ack(advice(b, talk, (0, 2))))
    b.plant(
        event.key, "relative-date", event.priority, [date_part(day)], message, phrase, language=event.language
    )


_DATE_CORRECTION_LEADS = (
    "Change of plan — ", "Update: it moved, ", "Scratch the earlier date: ", "They rescheduled, so ",
    "New date: ",
    "Ugh, postponed: ", "Small change, ", "Correction on the date: ", "Moved again! ", "FYI it got pushed: ",
)  # fmt: skip


@dataclass(slots=True)
class PendingDate:
    """A relative date said first, which a later message moves."""

    event: Event
    day: date | None = None
    message_id: str = ""


def first_date(b: Builder, pending: PendingDate, talk: Talk) -> None:
    relative_date(b, pending.event, talk)
    fact = b.facts.pop()
    pending.day, pending.message_id = date.fromisoformat(fact.parts[0].shown), fact.message_id


def date_correction(b: Builder, pending: PendingDate, talk: Talk) -> None:
    event = pending.event
    when = b.advance_for_user()
    phrase, day = b.choose(PHRASES[event.language])(b.rng, when.date())
    for _ in range(20):
        if day != pending.day:
            break
        phrase, day = b.choose(PHRASES[event.language])(b.rng, when.date())
    sentence = b.choose(event.says).format(when=phrase)
    lead = b.choose(_DATE_CORRECTION_LEADS)
    if event.language != "en" or sentence.split(" ", 1)[0].casefold() not in _COMMON_STARTS:
        sentence = cap(sentence)
    message = b.user(lead + sentence, when=when)
    b.assistant(b.choose(_CORRECTION_ACKS).format(v="the new date") + " " + advice(b, talk, (0, 1)))
    assert pending.day is not None
    b.plant(
        event.key,
        "correction",
        event.priority,
        [date_part(day)],
        message,
        phrase,
        superseded=(date_part(pending.day),),
        first_message_id=pending.message_id,
        language=event.language,
    )


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation to the user: how it is said, and the word a note keeps of it."""

    said: str
    kept: tuple[str, ...]


RELATIONS = (
    Relation("my best friend since uni", ("best friend",)), Relation("my older sister", ("sister",)),
    Relation("my younger brother", ("brother",)),
    Relation("an old colleague from my first job", ("colleague",)),
    Relation("my neighbour", ("neighbour", "neighbor")), Relation("my mother-in-law", ("mother in law",)),
    Relation("my cousin", ("cousin",)), Relation("my old flatmate", ("flatmate", "roommate")),
    Relation("my manager", ("manager", "boss")), Relation("my godmother", ("godmother",)),
    Relation("my partner's sister", ("sister in law", "partner s sister")), Relation("my aunt", ("aunt",)),
    Relation("my oldest friend", ("oldest friend", "friend")), Relation("my uncle", ("uncle",)),
    Relation("my childhood friend", ("childhood friend", "friend")), Relation("my mentor", ("mentor",)),
)  # fmt: skip
_PLACE_PREDICATES = (
    "just moved to {p} for a job at {o}", "lives in {p} now", "is flying in from {p} next weekend",
    "has been in {p} since the spring", "is relocating to {p} for {o}", "started at {o} in {p}",
    "is back in {p} after years abroad", "took a job with {o} in {p}",
)  # fmt: skip
_APPOSITION_FRAMES = (
    "{N}, {r}, {pred}.", "{N} — {r} — {pred}.", "{R}, {N}, {pred}.", "{N} ({r}) {pred}.",
    "So {N}, {r}, {pred}!", "Guess what: {N}, {r}, {pred}.",
)  # fmt: skip


def apposition(b: Builder, talk: Talk, relation: Relation | None = None, priority: str = "medium") -> None:
    """A name with its relation in apposition and a place: two facts (name+relation, name+place)."""
    name = b.fresh(first_name)
    relation = relation or b.rng.choice(RELATIONS)
    place = b.fresh(lambda r: r.choice(CITIES))
    predicate = b.choose(_PLACE_PREDICATES).format(p=place, o=b.rng.choice(ORGS))
    sentence = b.choose(_APPOSITION_FRAMES).format(
        N=name, r=relation.said, R=cap(relation.said), pred=predicate
    )
    message = b.user(b.said_in_passing(sentence, lambda x: chatter(x, talk)))
    b.assistant(b.ack(advice(b, talk, (0, 2))))
    b.plant(
        f"relation-{name}",
        "apposition",
        priority,
        [value_part(name), value_part(*relation.kept)],
        message,
        sentence,
    )
    b.plant(
        f"place-{name}",
        "name-place",
        "low" if priority == "low" else "medium",
        [value_part(name), value_part(place)],
        message,
        sentence,
    )


@dataclass(frozen=True, slots=True)
class Said:
    """A sentence with a planted value: ``frames`` hold ``{v}`` (and may hold ``{name}``)."""

    key: str
    frames: tuple[str, ...]
    draw: Callable[[random.Random], str]
    priority: str = "medium"
    # what besides the value a note must keep on the same line: "name" (the person said), or fixed words
    with_name: bool = False
    language: str = "en"


def said_fact(b: Builder, said: Said, category: str, talk: Talk, wrap: Sequence[str] = ("{s}",)) -> None:
    value = b.fresh(said.draw)
    name = b.fresh(first_name) if said.with_name else ""
    sentence = b.choose(said.frames).format(v=value, name=name)
    text = b.choose(wrap).format(s=sentence) if wrap else sentence
    if category not in ("lowercase-opening", "third-person", "french", "german"):
        text = b.said_in_passing(text, lambda x: chatter(x, talk))
    message = b.user(text)
    b.assistant(b.ack(advice(b, talk, (0, 2))))
    parts = [value_part(name)] if said.with_name else []
    b.plant(
        said.key,
        category,
        said.priority,
        [*parts, value_part(value)],
        message,
        sentence,
        language=said.language,
    )


FOREIGN_WRAPS = {
    "french": (
        "My landlady just texted (in French): «{s}»", "Copying the agency's message: \"{s}\"", "{s}",
        "Sorry, French mode for a sec: {s}", "From the email, word for word: {s}",
        "Translated? No, here's the original: {s}",
    ),
    "german": (
        "The office wrote (German): „{s}“", "Copying what they said: \"{s}\"", "{s}",
        "Sorry, in German because I'm pasting: {s}", "Email says: {s}", "Text from the Hausverwaltung: {s}",
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ToolReading:
    """Tool output with a number and its unit in it: ``render(value)`` is the output (a log, a report),
    ``label`` what a note must keep with the number."""

    key: str
    tool: str
    args: dict[str, Any]
    draw: Callable[[random.Random], str]
    render: Callable[[random.Random, str], str]
    label: tuple[str, ...]
    priority: str = "medium"


def tool_reading(b: Builder, reading: ToolReading, talk: Talk) -> None:
    b.user(b.said_in_passing(cap(question(b, talk))))
    value = b.fresh(reading.draw)
    output = reading.render(b.rng, value)
    message = b.assistant(
        b.rng.choice(("Running it now.", "Let me check.", "Checking the numbers.", "On it.")),
        [b.tool(reading.tool, reading.args, output)],
        advice(b, talk, (1, 2)),
    )
    line = next((ln for ln in output.split("\n") if value in ln), value)
    b.plant(
        reading.key,
        "tool-number",
        reading.priority,
        [value_part(*reading.label), value_part(value)],
        message,
        line,
    )


# --- the plan ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Episode:
    """A few messages that plant facts; ``after`` must have run before this one (a correction)."""

    category: str
    run: Callable[[Builder], None]
    after: Episode | None = None
    facts: int = 1


def build(
    style: str,
    seed: int,
    messages: int | None,
    talk: Talk,
    episodes_for: Callable[[Builder], list[Episode]],
) -> Conversation:
    """A conversation of ``messages`` messages (300–600 drawn from the seed when None): the style's
    episodes spread over it in a random order, corrections well after what they correct, small talk
    between them and a stretch of small talk at the end."""
    rng = random.Random(f"om-styles:{style}:{seed}")
    start = datetime(2026, 1, 3, 7, 30, tzinfo=UTC) + timedelta(
        days=rng.randint(0, 700), minutes=rng.randint(0, 600)
    )
    b = Builder(style, seed, rng, start, casual=rng.random() < 0.4)
    total = messages if messages is not None else rng.randint(300, 600)
    pool = episodes_for(b)
    wanted = min(rng.randint(18, 24), max(2, total // 15))
    chosen = _choose_episodes(b, pool, wanted)
    order = _order(b, chosen)
    tail = min(12, total // 10)
    for index, episode in enumerate(order):
        left = len(order) - index
        budget = total - tail - len(b.messages) - 3 * left
        gap = max(0, budget // (left + 1)) if left else 0
        if gap > 2:
            gap = min(b.rng.randint(gap // 2, gap + gap // 2), budget)
        _small_talk_for(b, talk, gap)
        episode.run(b)
    _small_talk_for(b, talk, total - len(b.messages))
    planned = len(b.facts)
    # a length too short for the episodes cuts the last ones off, with their facts
    del b.messages[total:]
    kept_ids = {m["id"] for m in b.messages}
    facts = [f for f in b.facts if f.message_id in kept_ids and (f.confirmed_in or f.message_id) in kept_ids]
    return Conversation(style, seed, b.messages, facts, planned_facts=planned)


def _small_talk_for(b: Builder, talk: Talk, count: int) -> None:
    target = len(b.messages) + count
    while len(b.messages) < target - 1:
        small_talk(b, talk)
    if len(b.messages) < target:
        b.user(chatter(b, talk))


def _choose_episodes(b: Builder, pool: list[Episode], wanted: int) -> list[Episode]:
    """One episode of each category the style has, then others at random, up to ``wanted`` facts."""
    b.rng.shuffle(pool)
    chosen: list[Episode] = []
    seen: set[str] = set()
    for episode in pool:
        if episode.category not in seen:
            seen.add(episode.category)
            chosen.append(episode)
    rest = [e for e in pool if e not in chosen]
    chosen += rest
    # an apposition plants two facts and a correction needs its first statement: count what they plant
    out: list[Episode] = []
    planted = 0
    for episode in chosen:
        if planted >= wanted:
            break
        out.append(episode)
        if episode.after is not None:
            out.append(episode.after)
        planted += episode.facts
    return out


def _order(b: Builder, episodes: list[Episode]) -> list[Episode]:
    firsts = [e for e in episodes if e.category != "correction"]
    b.rng.shuffle(firsts)
    order = list(firsts)
    for correction_episode in (e for e in episodes if e.category == "correction"):
        assert correction_episode.after is not None
        at = order.index(correction_episode.after)
        order.insert(b.rng.randint(min(at + 3, len(order)), len(order)), correction_episode)
    return order


SLOT_CATEGORIES = ("plain", "correction", "confirmed-proposal", "question-proposal", "pick")


def _plain(b: Builder, slot: Slot, talk: Talk) -> None:
    statement(b, slot, talk)


def slot_episodes(
    b: Builder, slots: Sequence[Slot], talk: Talk, categories: Sequence[str] = SLOT_CATEGORIES
) -> list[Episode]:
    """Episodes of the slot-based hard cases: the slots in a random order, each used for one of
    ``categories`` in turn from a random start, so a slot is stated by one seed and offered by another."""
    order = list(slots)
    b.rng.shuffle(order)
    offset = b.rng.randrange(len(categories))
    out: list[Episode] = []
    plain_slots: dict[int, Slot] = {}
    for index, slot in enumerate(order):
        category = categories[(index + offset) % len(categories)]
        if not slot.offered and category not in ("plain", "correction"):
            category = b.rng.choice(("plain", "correction"))
        if category == "correction":
            pending = Pending(slot)
            first = Episode("first-statement", lambda b, p=pending: first_statement(b, p, talk))
            out.append(Episode("correction", lambda b, p=pending: correction(b, p, talk), after=first))
        elif category == "plain":
            out.append(Episode("plain", lambda b, s=slot: _plain(b, s, talk)))
            waiting = [e for e in out if e.category == "plain" and e.facts == 1 and e is not out[-1]]
            if waiting and b.chance(0.5):
                # the two plain slots said in one message
                out.remove(waiting[0])
                out.pop()
                other = plain_slots[id(waiting[0])]
                out.append(
                    Episode("plain", lambda b, s=slot, o=other: statement_pair(b, o, s, talk), facts=2)
                )
                continue
            plain_slots[id(out[-1])] = slot
        elif category in ("confirmed-proposal", "question-proposal"):
            question = category == "question-proposal"
            out.append(Episode(category, lambda b, s=slot, q=question: proposal(b, s, talk, q)))
        elif category == "pick":
            out.append(Episode("pick", lambda b, s=slot: pick(b, s, talk)))
        else:
            raise ValueError(f"{category} is not a slot category")
    return out


# --- values written more than one way -------------------------------------------------------------------


def clock_renderings(value: str) -> tuple[str, ...]:
    """``07:05`` is also ``7:05`` and ``7.05``."""
    hours, minutes = value.split(":")
    return (f"{int(hours)}:{minutes}", f"{hours}.{minutes}", f"{int(hours)}h{minutes}")


def money_renderings(value: str) -> tuple[str, ...]:
    """``€1,240`` is also ``€1240`` and ``1.240 €``."""
    digits = "".join(c for c in value if c.isdigit() or c == ".")
    return (digits, value.replace(",", "."))


def spaced_code_renderings(value: str) -> tuple[str, ...]:
    """``SK 8090`` is also ``SK8090``."""
    return (value.replace(" ", ""),) if " " in value else ()


@dataclass(frozen=True, slots=True)
class StyleDef:
    name: str
    description: str
    talk: Talk
    episodes: Callable[[Builder], list[Episode]]

    def generate(self, seed: int, messages: int | None = None) -> Conversation:
        return build(self.name, seed, messages, self.talk, self.episodes)


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """What a style plants: its slots, pastes (category and episode), events, people and lines."""

    slots: tuple[Slot, ...]
    pastes: tuple[tuple[str, Callable[[Builder, Talk], None]], ...] = ()
    events: tuple[Event, ...] = ()
    third_person: tuple[Said, ...] = ()
    lowercase: tuple[Said, ...] = ()
    foreign: tuple[Said, ...] = ()
    tools: tuple[ToolReading, ...] = ()
    relations: tuple[Relation, ...] = RELATIONS
    appositions: int = 2


def vocabulary_episodes(b: Builder, vocabulary: Vocabulary, talk: Talk) -> list[Episode]:
    out = slot_episodes(b, vocabulary.slots, talk)
    out += [Episode(category, lambda x, run=run: run(x, talk)) for category, run in vocabulary.pastes]
    events = list(vocabulary.events)
    b.rng.shuffle(events)
    if events and b.chance(0.6):
        # one event is said, then moved later: a correction whose values are dates
        moved = PendingDate(events.pop())
        said = Episode("first-statement", lambda x, p=moved: first_date(x, p, talk))
        out.append(Episode("correction", lambda x, p=moved: date_correction(x, p, talk), after=said))
    out += [Episode("relative-date", lambda x, e=event: relative_date(x, e, talk)) for event in events]
    out += [
        Episode("third-person", lambda x, s=said: said_fact(x, s, "third-person", talk))
        for said in vocabulary.third_person
    ]
    out += [
        Episode("lowercase-opening", lambda x, s=said: said_fact(x, s, "lowercase-opening", talk))
        for said in vocabulary.lowercase
    ]
    for said in vocabulary.foreign:
        category = {"fr": "french", "de": "german"}[said.language]
        out.append(
            Episode(category, lambda x, s=said, c=category: said_fact(x, s, c, talk, FOREIGN_WRAPS[c]))
        )
    out += [Episode("tool-number", lambda x, t=tool: tool_reading(x, t, talk)) for tool in vocabulary.tools]
    relations = list(vocabulary.relations)
    b.rng.shuffle(relations)
    out += [
        Episode("apposition", lambda x, r=relation: apposition(x, talk, r), facts=2)
        for relation in relations[: vocabulary.appositions]
    ]
    return out


def style(name: str, description: str, talk: Talk, vocabulary: Vocabulary) -> StyleDef:
    return StyleDef(name, description, talk, lambda b: vocabulary_episodes(b, vocabulary, talk))
