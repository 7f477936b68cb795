"""Trip planning: flights, hotels, a budget, bookings pasted as JSON, an itinerary table, shared costs."""

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
    code,
    money,
    money_renderings,
    paste_json,
    paste_rows,
    spaced_code_renderings,
    style,
)

AIRLINES = ("SK", "KL", "LH", "TP", "AY", "IB", "OS", "LX", "EI", "BA", "AF", "JL")
HOTELS = (
    "Hotel Miramar", "Casa do Largo", "the Grand Oriental", "Pension Edelweiss", "the Harbourview Inn",
    "Villa Serena", "the Old Customs House", "Hostal Alcazaba", "Hotel Lindenhof", "Ryokan Kiyomizu",
    "the Salt Loft", "Hotel Aurora Borealis", "Casa Amarilla", "the Tannery Rooms",
)  # fmt: skip
RESTAURANTS = (
    "Taberna Moura", "Osteria Gialla", "Kōbō", "Le Petit Zinc", "Casa Lupita", "Mangal 2", "Fischerstube",
    "Trattoria Nonna Pia", "Izakaya Hoshi", "Bistro Lapin", "The Copper Pot", "Adega Velha",
)  # fmt: skip
TOURS = (
    "the sunrise kayak tour", "a street-food walk", "the glacier hike", "a cooking class",
    "the wine cellar tour",
    "a boat trip to the caves", "the night market walk", "a cycling tour of the old town",
)  # fmt: skip


def _flight(rng: random.Random) -> str:
    return f"{rng.choice(AIRLINES)} {rng.randint(120, 9899)}"


def _flight_detail(rng: random.Random) -> str:
    return f"leaves {clock(rng)}, {money(rng, 90, 640, 1, '€')}"


def _hotel_detail(rng: random.Random) -> str:
    return f"{money(rng, 70, 260, 1, '€')}/night, rated {rng.randint(78, 97) / 10}"


SLOTS = (
    Slot(
        "flight-out",
        "the outbound flight",
        _flight,
        (
            "Our flight out is {v}.",
            "We're booked on {v} on the way out.",
            "Outbound is {v}, leaving early.",
            "I got us seats on {v}!",
            "The flight there is {v}.",
            "We fly out on {v}.",
        ),
        "high",
        _flight_detail,
        spaced_code_renderings,
    ),
    Slot(
        "flight-back",
        "the return flight",
        _flight,
        ("Coming back we're on {v}.", "The return is {v}.", "Home flight: {v}.", "We fly back on {v}."),
        "high",
        _flight_detail,
        spaced_code_renderings,
    ),
    Slot(
        "hotel",
        "the hotel for the first nights",
        lambda r: r.choice(HOTELS),
        (
            "We're staying at {v} for the first three nights.",
            "First nights are at {v}.",
            "I booked {v} to start with.",
            "Base for the first part: {v}.",
        ),
        "medium",
        _hotel_detail,
    ),
    Slot(
        "budget",
        "the budget",
        lambda r: money(r, 1200, 9800, 50),
        (
            "The whole trip has to stay under {v}.",
            "Budget is {v} for everything.",
            "We set aside {v} in total.",
            "Max spend: {v}, flights included.",
        ),
        "high",
        None,
        money_renderings,
    ),
    Slot(
        "car-pickup",
        "the rental car pickup time",
        clock,
        (
            "We pick the rental car up at {v}.",
            "Car pickup is at {v} at the airport desk.",
            "The rental desk expects us at {v}.",
        ),
        "medium",
        lambda r: rng_desk(r),
        clock_renderings,
    ),
    Slot(
        "dinner",
        "the dinner on the first evening",
        lambda r: r.choice(RESTAURANTS),
        (
            "We have a table at {v} the first evening.",
            "Dinner on night one is at {v}.",
            "I reserved {v} for the first night.",
        ),
        "low",
        lambda r: r.choice(
            ("seafood, €€", "tasting menu", "tiny place, cash only", "great terrace", "vegan options")
        ),
    ),
    Slot(
        "tour",
        "the one activity we book ahead",
        lambda r: r.choice(TOURS),
        ("The one thing we booked ahead is {v}.", "We're doing {v} on day two.", "Booked {v} already."),
        "low",
        lambda r: f"{money(r, 25, 140, 1, '€')} per person, {r.randint(2, 6)} hours",
    ),
    Slot(
        "day-trip",
        "the day trip",
        lambda r: r.choice(CITIES),
        ("For the day trip we'll do {v}.", "Day trip: {v}.", "We want one day in {v}."),
        "low",
        lambda r: f"{r.randint(1, 3)}h by train",
    ),
    Slot(
        "insurance",
        "the travel insurance policy number",
        lambda r: code(r, 3, 7),
        (
            "Travel insurance policy number is {v}.",
            "The insurance policy is {v}, keep it somewhere.",
            "Policy no. {v} for the insurance.",
        ),
        "high",
        offered=False,
    ),
    Slot(
        "seat",
        "the seats",
        lambda r: f"{r.randint(8, 41)}{r.choice('ACDF')} and {r.randint(8, 41)}{r.choice('ACDF')}",
        ("Our seats are {v}.", "We got seats {v}.", "Seats: {v}."),
        "low",
        lambda r: r.choice(("window + aisle", "exit row", "near the front", "together")),
    ),
)


def rng_desk(rng: random.Random) -> str:
    return rng.choice(("desk in arrivals", "shuttle from terminal 2", "city office", "free upgrade offered"))


def _itinerary(b: Builder, talk: Talk, as_csv: bool = False) -> None:
    days = b.rng.randint(4, 7)
    headers = ["Day", "City", "Stay", "Cost"]
    rows = [
        [f"Day {i + 1}", b.rng.choice(CITIES), b.rng.choice(HOTELS), money(b.rng, 60, 300, 1, "€")]
        for i in range(days)
    ]
    row = b.rng.randrange(days)
    column = b.rng.choice((2, 3))
    paste_rows(
        b, "the itinerary", headers, rows, [Cell(f"itinerary-{row}", row, column, "medium")], talk, as_csv
    )


def _shared_costs(b: Builder, talk: Talk) -> None:
    items = ["Flights", "Ferry", "Hotel deposit", "Car rental", "Museum pass", "Groceries", "Fuel", "Tour"]
    b.rng.shuffle(items)
    payers = [b.rng.choice(("me", "Jonas", "Hana", "Mirko", "Sanne")) for _ in range(5)]
    rows = [
        [item, payer, f"{b.rng.randint(12, 900)}.{b.rng.randint(0, 99):02d}"]
        for item, payer in zip(items, payers, strict=False)
    ]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the shared costs so far",
        ["item", "paid_by", "amount_eur"],
        rows,
        [Cell(f"cost-{rows[row][0]}", row, 2, "low")],
        talk,
        True,
    )


def _booking_json(b: Builder, talk: Talk) -> None:
    reference = b.fresh(lambda r: code(r, 3, 3))
    document = {
        "booking": {
            "reference": reference,
            "property": b.rng.choice(HOTELS),
            "guests": b.rng.randint(1, 4),
            "nights": b.rng.randint(2, 6),
            "breakfast": b.chance(0.5),
            "status": "CONFIRMED",
        }
    }
    paste_json(b, "the booking confirmation", document, [("booking-ref", reference, "high")], talk)


def _flight_status(b: Builder, talk: Talk) -> None:
    gate = b.fresh(lambda r: f"{r.choice('ABCDEF')}{r.randint(2, 58)}")
    document = {
        "flight": _flight(b.rng),
        "status": "ON TIME",
        "gate": gate,
        "terminal": str(b.rng.randint(1, 3)),
    }
    paste_json(
        b, "", document, [("gate", gate, "medium")], talk, via_tool=("flight_status", {"date": "today"})
    )


def _baggage(rng: random.Random, value: str) -> str:
    return (
        f"Fare: Light\nCabin bag: 1 x 8kg\nChecked baggage allowance: {value} per passenger\n"
        f"Change fee: €{rng.randint(40, 90)}"
    )


def _forecast(rng: random.Random, value: str) -> str:
    return "\n".join(
        [
            f"Mon  max {rng.randint(14, 24)}°C  rain {rng.randint(0, 60)}%",
            f"Tue  max {value}  rain {rng.randint(0, 60)}%",
        ]
    )


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(
        ("table", _itinerary),
        ("csv", _shared_costs),
        ("json", _booking_json),
        ("json", _flight_status),
    ),
    events=(
        Event(
            "leave-date",
            ("we leave {when}", "our flight out is {when}", "we're off {when}", "departure is {when}"),
        ),
        Event("ferry-date", ("the ferry to the island is {when}", "we take the ferry {when}"), "medium"),
        Event(
            "checkin-fr",
            ("Le check-in à l'hôtel est prévu {when}.", "Notre arrivée à l'hôtel est {when}."),
            "medium",
            "fr",
        ),
        Event(
            "ryokan-ja", ("旅館の予約は{when}です。", "{when}に旅館にチェックインします。"), "medium", "ja"
        ),
    ),
    third_person=(
        Said(
            "agent",
            (
                "{name} at the travel agency wants a {v} deposit to hold our seats.",
                "{name} from the agency said the deposit is {v}.",
            ),
            lambda r: money(r, 100, 600, 10, "€"),
            "medium",
            True,
        ),
        Said(
            "guide",
            ("{name} is our guide for {v}.", "{name} will meet us at the harbour for {v}."),
            lambda r: r.choice(TOURS),
            "low",
            True,
        ),
    ),
    lowercase=(
        Said(
            "checkout",
            ("check-out is at {v} on the last day", "checkout on the final morning is {v}, strict"),
            clock,
            "medium",
        ),
        Said(
            "ferry-pier",
            ("ferries to the island leave from {v}", "the island ferry goes from {v}"),
            lambda r: f"pier {r.randint(2, 14)}",
            "low",
        ),
    ),
    foreign=(
        Said(
            "gate-code-fr",
            ("Le code du portail est {v}.", "Pour entrer, le code est le {v}."),
            lambda r: str(r.randint(1000, 9999)),
            "high",
            language="fr",
        ),
        Said(
            "key-box-de",
            ("Der Schlüssel liegt in der Box, Code {v}.", "Der Code für den Schlüsselkasten ist {v}."),
            lambda r: str(r.randint(1000, 9999)),
            "high",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "baggage",
            "airline_rules",
            {"fare": "Light"},
            lambda r: f"{r.choice((15, 20, 23, 25, 32))}kg",
            _baggage,
            ("checked", "baggage"),
            "medium",
        ),
        ToolReading(
            "forecast",
            "weather_forecast",
            {"days": 2},
            lambda r: f"{r.randint(25, 39)}°C",
            _forecast,
            ("tue",),
            "low",
        ),
    ),
)

TALK = Talk(
    questions=(
        "What should I pack for ten days?",
        "Is it better to rent a car or use trains?",
        "Which neighbourhoods are nice to walk around?",
        "Do we need travel insurance for this?",
        "What's a reasonable daily spend on food there?",
        "How early should we be at the airport?",
        "What local dishes should we try?",
        "Are museums free on certain days?",
        "How does tipping work there?",
        "Can you sketch the first three days?",
        "Should we get a local SIM?",
        "Is it safe to drink tap water?",
        "How do we avoid the crowds at the main sights?",
        "What's the best way from the airport into town?",
        "Do I need an adapter for the plugs?",
        "Any tips for jet lag?",
        "Is a rail pass worth it?",
    ),
    advice=(
        "Book the popular sights for early morning; queues build after ten.",
        "A day with nothing planned in the middle of the trip helps everyone recharge.",
        "Trains are usually faster city to city; a car pays off in the countryside.",
        "Carry a small amount of cash for markets and tips.",
        "Download offline maps before you go.",
        "Keep copies of your passport and bookings somewhere separate from the originals.",
        "Local bakeries are the cheapest good breakfast you'll find.",
        "Check whether the museums close on Mondays.",
        "Pack layers; the evenings can be much cooler than the afternoons.",
        "Arrive at the airport two hours before an international flight.",
    ),
    asides=(
        "My partner already bought a guidebook, lol.",
        "I've never been this organised for a holiday.",
        "The kids are more excited than we are.",
        "I keep checking the weather app.",
        "We haven't had a proper holiday in two years.",
    ),
    topics=(
        "the visa on arrival",
        "packing light",
        "airport transfers",
        "travel insurance",
        "jet lag",
        "booking trains abroad",
        "eating out with kids",
    ),
)

STYLE = style("trip", "planning a trip: flights, hotels, a budget, bookings, an itinerary", TALK, VOCABULARY)
