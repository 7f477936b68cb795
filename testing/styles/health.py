"""A health journey: a diagnosis being worked out, appointments, medication, results from the lab portal."""

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
    code,
    paste_json,
    paste_rows,
    person,
    style,
)

MEDICATIONS = (
    "metformin",
    "levothyroxine",
    "ramipril",
    "sertraline",
    "atorvastatin",
    "omeprazole",
    "propranolol",
)
CLINICS = (
    "Riverside Physio",
    "the Parkview Clinic",
    "St Luke's outpatients",
    "Harbour Health Centre",
    "MoveWell",
)
PHARMACIES = (
    "Boots on King Street",
    "the Apotheke am Markt",
    "Pharmacie du Centre",
    "the late-night pharmacy",
    "Lloyds",
)


def _dose(rng: random.Random) -> str:
    return f"{rng.choice(MEDICATIONS)} {rng.choice((5, 10, 20, 25, 50, 75, 100, 250, 500))} mg"


def _doctor(rng: random.Random) -> str:
    return "Dr " + person(rng).split(" ")[1]


def _spaced_unit(value: str) -> tuple[str, ...]:
    return (value.replace(" mg", "mg"),)


SLOTS = (
    Slot(
        "medication",
        "the new medication",
        _dose,
        (
            "They started me on {v}.",
            "New prescription: {v}, once a day.",
            "I'm taking {v} now, every morning.",
            "The GP put me on {v}.",
        ),
        "high",
        lambda r: r.choice(
            ("fewer side effects", "once daily", "cheapest generic", "what the guidelines suggest")
        ),
        _spaced_unit,
    ),
    Slot(
        "specialist",
        "the specialist",
        _doctor,
        ("My cardiologist is {v}.", "I'm seeing {v} at the hospital.", "The referral is to {v}."),
        "high",
        lambda r: r.choice(("shorter waiting list", "good reviews", "sees patients on Saturdays")),
    ),
    Slot(
        "physio",
        "the physio clinic",
        lambda r: r.choice(CLINICS),
        ("Physio is at {v}.", "I booked the physio sessions at {v}.", "{v} does my knee rehab."),
        "medium",
        lambda r: f"{r.randint(2, 15)} min away, €{r.randint(40, 90)} a session",
    ),
    Slot(
        "pharmacy",
        "the pharmacy",
        lambda r: r.choice(PHARMACIES),
        ("I pick prescriptions up at {v}.", "My pharmacy is {v}.", "Repeat prescriptions go to {v}."),
        "low",
        lambda r: r.choice(("open till 10pm", "does delivery", "next to the office")),
    ),
    Slot(
        "allergy",
        "my drug allergy",
        lambda r: r.choice(("penicillin", "ibuprofen", "codeine", "sulfa drugs", "latex", "aspirin")),
        (
            "I'm allergic to {v}, it's in my file.",
            "Big one: I can't take {v}, I get hives.",
            "Remember I react badly to {v}.",
        ),
        "high",
        offered=False,
    ),
    Slot(
        "insurance",
        "my health insurance number",
        lambda r: code(r, 1, 9),
        ("My insurance number is {v}.", "Health insurance no. {v}.", "The card says {v}."),
        "medium",
        offered=False,
    ),
    Slot(
        "appointment-time",
        "the blood test time",
        clock,
        ("The blood test is at {v}.", "I'm booked in for bloods at {v}.", "Bloods at {v}, fasting."),
        "high",
        lambda r: r.choice(("earliest slot", "no queue then", "walk-in window")),
        clock_renderings,
    ),
    Slot(
        "exercise",
        "the exercise plan",
        lambda r: r.choice(
            ("30 minutes of walking daily", "swimming twice a week", "a couch-to-5k plan", "yoga on Tuesdays")
        ),
        ("The plan is {v}.", "I'm committing to {v}.", "Doctor's orders: {v}."),
        "low",
        lambda r: r.choice(("easy on the knee", "fits your schedule", "low impact")),
    ),
)


def _medication_table(b: Builder, talk: Talk) -> None:
    times = ("morning", "evening", "with lunch", "at bedtime", "twice daily")
    meds = list(MEDICATIONS)
    b.rng.shuffle(meds)
    rows = [
        [m, f"{b.rng.choice((5, 10, 20, 50, 100))} mg", b.rng.choice(times)]
        for m in meds[: b.rng.randint(3, 5)]
    ]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"dose-{rows[row][0]}", row, 1, "high")]
    paste_rows(b, "my medication list", ["Medication", "Dose", "When"], rows, cells, talk, False)


def _results_csv(b: Builder, talk: Talk) -> None:
    tests = [
        ("HbA1c", "%"),
        ("LDL", "mmol/L"),
        ("TSH", "mU/L"),
        ("Vitamin D", "nmol/L"),
        ("Ferritin", "ug/L"),
    ]
    b.rng.shuffle(tests)
    rows = [[name, f"{b.rng.randint(1, 90)}.{b.rng.randint(0, 9)}", unit] for name, unit in tests[:4]]
    row = b.rng.randrange(len(rows))
    cells = [Cell(f"result-{rows[row][0]}", row, 1, "medium")]
    paste_rows(b, "the blood results from the portal", ["test", "value", "unit"], rows, cells, talk, True)


def _referral(b: Builder, talk: Talk) -> None:
    reference = b.fresh(lambda r: f"REF-{r.randint(100000, 999999)}")
    document = {
        "referral": {
            "id": reference,
            "department": b.rng.choice(("Cardiology", "Endocrinology", "Orthopaedics", "Dermatology")),
            "priority": b.rng.choice(("routine", "urgent")),
            "status": "accepted",
        }
    }
    paste_json(b, "the referral status", document, [("referral-id", reference, "medium")], talk)


def _pressure(rng: random.Random, value: str) -> str:
    first = f"{rng.randint(118, 150)}/{rng.randint(70, 95)} mmHg"
    return f"date,reading\nmon,{first}\ntue,{value}\navg_hr,{rng.randint(55, 80)} bpm"


def _glucose(rng: random.Random, value: str) -> str:
    in_range = f"time in range: {rng.randint(50, 95)}%"
    return f"Sensor summary (14 days)\naverage glucose: {value}\n{in_range}\nlows: {rng.randint(0, 6)}"


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _medication_table), ("csv", _results_csv), ("json", _referral)),
    events=(
        Event("mri", ("the MRI is {when}", "my scan is booked for {when}", "the follow-up is {when}")),
        Event("cardio", ("the cardiology appointment is {when}", "I see the specialist {when}"), "high"),
        Event(
            "irm-fr",
            ("L'IRM est prévue {when}.", "Le rendez-vous chez le cardiologue est {when}."),
            "high",
            "fr",
        ),
        Event(
            "kontrolle-de",
            ("Die Kontrolluntersuchung ist {when}.", "Die Blutabnahme ist {when}."),
            "high",
            "de",
        ),
        Event("kensa-ja", ("検査は{when}です。", "{when}に病院で再検査があります。"), "medium", "ja"),
    ),
    third_person=(
        Said(
            "reception",
            (
                "{name} at the clinic reception said results take {v}.",
                "{name} from the practice says it's {v}.",
            ),
            lambda r: r.choice(("three working days", "about a week", "ten days", "48 hours")),
            "medium",
            True,
        ),
        Said(
            "physio-name",
            ("{name} wants me doing the exercises {v}.", "{name} thinks I should rest {v}."),
            lambda r: r.choice(("twice a day", "every other day", "for two weeks", "before bed")),
            "low",
            True,
        ),
    ),
    lowercase=(
        Said(
            "fasting",
            ("fasting starts at {v} the night before", "no food after {v} before the test"),
            clock,
            "high",
        ),
        Said(
            "gp-letters",
            ("results go straight to {v}", "the discharge letter gets sent to {v}"),
            lambda r: r.choice(("my GP", "the portal", "the cardiologist", "my email")),
            "low",
        ),
    ),
    foreign=(
        Said(
            "cardio-time-fr",
            ("Le rendez-vous chez le cardiologue est à {v}.", "La prise de sang est à {v}."),
            clock,
            "high",
            language="fr",
        ),
        Said(
            "blood-de",
            ("Die Blutabnahme ist um {v} Uhr, nüchtern.", "Der Termin in der Praxis ist um {v} Uhr."),
            clock,
            "high",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "bp",
            "bp_monitor_export",
            {"days": 2},
            lambda r: f"{r.randint(125, 165)}/{r.randint(78, 104)} mmHg",
            _pressure,
            ("tue",),
            "high",
        ),
        ToolReading(
            "glucose",
            "cgm_summary",
            {"days": 14},
            lambda r: f"{r.randint(5, 11)}.{r.randint(0, 9)} mmol/L",
            _glucose,
            ("average glucose",),
            "high",
        ),
    ),
)

TALK = Talk(
    questions=(
        "Is it normal to feel this tired on a new medication?",
        "What should I ask the specialist?",
        "How do I keep track of symptoms without obsessing?",
        "Any tips for sleeping with a sore knee?",
        "What does a high LDL actually mean?",
        "Should I worry about the side effects leaflet?",
        "How do I bring this up with my boss?",
        "Is coffee okay before a blood test?",
        "What exercises are safe right now?",
        "How do I read these results?",
    ),
    advice=(
        "Write your questions down before the appointment; it's easy to forget them in the room.",
        "A symptom diary with dates makes patterns much easier to spot.",
        "Bring the full medication list, including supplements, to every appointment.",
        "Side-effect leaflets list everything ever reported; most people get none of them.",
        "If something changes suddenly, call the practice rather than waiting.",
        "Small daily walks help more than the occasional big effort.",
    ),
    asides=(
        "The waiting room had the worst music.",
        "My partner has been great about it.",
        "I'm a bit scared, honestly.",
    ),
    topics=(
        "the new medication",
        "the waiting list",
        "sleep",
        "the physio exercises",
        "telling work",
        "the symptom diary",
        "fasting before the test",
    ),
)

STYLE = style("health", "a health journey: appointments, medication, results, referrals", TALK, VOCABULARY)
