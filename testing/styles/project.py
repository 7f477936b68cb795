"""A software project: decisions, owners, milestones, CI output, config, the client."""

from __future__ import annotations

import random
from typing import Any

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
    first_name,
    money,
    money_renderings,
    paste_json,
    paste_rows,
    person,
    style,
)

FRAMEWORKS = (
    "FastAPI",
    "Django",
    "Next.js",
    "SvelteKit",
    "Phoenix",
    "Rails",
    "Remix",
    "Spring Boot",
    "Laravel",
    "NestJS",
)
DATABASES = ("Postgres 16", "MySQL 8.4", "SQLite", "DynamoDB", "CockroachDB", "MongoDB 7")
HOSTS = ("Fly.io", "Render", "Hetzner", "AWS ECS", "Vercel", "Cloud Run", "a single VPS")
AREAS = (
    "the onboarding flow",
    "the billing page",
    "the search index",
    "the mobile app",
    "the admin panel",
    "the public API",
    "the data export",
)


def _repo(rng: random.Random) -> str:
    owner = rng.choice(("acme", "northwind", "kestrel", "bluefin", "halcyon"))
    name = rng.choice(("portal", "core", "web", "sync", "billing"))
    return f"{owner}/{name}-{rng.choice(('app', 'service', 'api'))}"


SLOTS = (
    Slot(
        "framework",
        "the backend framework",
        lambda r: r.choice(FRAMEWORKS),
        (
            "We're building it on {v}.",
            "Backend is {v}, decided.",
            "The team knows {v}, so that's what we use.",
        ),
        "high",
        lambda r: r.choice(
            ("the team knows it", "mature ecosystem", "fast to prototype", "good async story")
        ),
    ),
    Slot(
        "database",
        "the database",
        lambda r: r.choice(DATABASES),
        ("Data lives in {v}.", "We'll store everything in {v}.", "The DB is {v}."),
        "high",
        lambda r: r.choice(("managed option available", "what ops supports", "cheap at our scale")),
    ),
    Slot(
        "hosting",
        "the hosting",
        lambda r: r.choice(HOSTS),
        ("We deploy to {v}.", "Hosting is on {v}.", "Prod runs on {v}."),
        "medium",
        lambda r: f"~{money(r, 20, 900, 5, '$')}/month",
    ),
    Slot(
        "repo",
        "the repository",
        _repo,
        ("The code is in {v}.", "Repo: {v}.", "Everything's in the {v} repo."),
        "medium",
        offered=False,
    ),
    Slot(
        "client-contact",
        "the client contact",
        person,
        (
            "Our contact at the client is {v}.",
            "{v} signs off on the client side.",
            "Client-side it's {v} who decides.",
        ),
        "high",
        offered=False,
    ),
    Slot(
        "budget",
        "the project budget",
        lambda r: money(r, 15000, 240000, 500),
        ("The budget is {v}.", "We have {v} for the whole thing.", "Budget signed off at {v}."),
        "high",
        None,
        money_renderings,
        offered=False,
    ),
    Slot(
        "sprint",
        "the sprint length",
        lambda r: r.choice(("one week", "two weeks", "three weeks", "ten days")),
        ("Sprints are {v}.", "We run {v} sprints."),
        "low",
        lambda r: r.choice(("matches the client's cadence", "less overhead")),
    ),
    Slot(
        "analytics",
        "the analytics tool",
        lambda r: r.choice(("Plausible", "PostHog", "Matomo", "Amplitude", "Umami")),
        ("For analytics we use {v}.", "Tracking goes through {v}."),
        "low",
        lambda r: r.choice(("GDPR-friendly", "self-hostable", "free tier")),
    ),
    Slot(
        "standup",
        "the standup time",
        clock,
        ("Standup is at {v} every day.", "Daily sync at {v}."),
        "low",
        lambda r: "15 minutes",
    ),
)


def _milestones(b: Builder, talk: Talk) -> None:
    names = ["Design sign-off", "Alpha", "Beta", "Load test", "Security review", "Launch", "Handover"]
    owners = [b.fresh(first_name) for _ in range(3)]
    rows = [[name, b.rng.choice(owners), f"W{b.rng.randint(2, 52)}"] for name in names[: b.rng.randint(4, 7)]]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the milestone plan",
        ["Milestone", "Owner", "Due"],
        rows,
        [Cell(f"milestone-{rows[row][0]}", row, 1, "medium")],
        talk,
        False,
    )


def _budget_csv(b: Builder, talk: Talk) -> None:
    lines = ["Design", "Backend", "Frontend", "QA", "Hosting", "Licences", "Contingency"]
    rows = [
        [line, str(b.rng.randrange(1000, 60000, 250)), b.rng.choice(("approved", "pending", "spent"))]
        for line in lines[: b.rng.randint(4, 7)]
    ]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the budget breakdown",
        ["line", "amount", "status"],
        rows,
        [Cell(f"budget-{rows[row][0]}", row, 1, "medium")],
        talk,
        True,
    )


def _config(b: Builder, talk: Talk) -> None:
    version = b.fresh(lambda r: f"{r.randint(1, 5)}.{r.randint(0, 30)}.{r.randint(0, 12)}")
    document: dict[str, Any] = {
        "name": "portal-web",
        "version": version,
        "private": True,
        "engines": {"node": f">={b.rng.choice((18, 20, 22))}"},
        "scripts": {"build": "vite build", "test": "vitest"},
    }
    paste_json(b, "the package.json", document, [("package-version", version, "low")], talk)


def _ci_noise(b: Builder) -> list[dict[str, Any]]:
    out = f"{b.rng.randint(120, 900)} passed, 0 failed in {b.rng.randint(10, 300)}s"
    return [b.tool("run_tests", {"path": "tests/"}, out)]


def _coverage(rng: random.Random, value: str) -> str:
    return (
        "Name                 Stmts   Miss  Cover\n"
        f"src/api.py             {rng.randint(100, 400)}     {rng.randint(1, 40)}    {rng.randint(60, 99)}%\n"
        f"TOTAL                 {rng.randint(1000, 9000)}    {rng.randint(50, 900)}    {value}"
    )


def _build(rng: random.Random, value: str) -> str:
    return (
        f"vite v5.{rng.randint(0, 4)} building for production...\n"
        f"✓ {rng.randint(200, 1900)} modules transformed.\n"
        f"dist/assets/index.js   {value} │ gzip: {rng.randint(40, 200)} kB\n"
        f"✓ built in {rng.randint(2, 40)}.{rng.randint(1, 9)}s"
    )


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _milestones), ("csv", _budget_csv), ("json", _config)),
    events=(
        Event("demo", ("the client demo is {when}", "we show the beta to the client {when}")),
        Event("freeze", ("code freeze starts {when}", "the release branch gets cut {when}"), "medium"),
        Event(
            "review-fr", ("La revue de sprint est {when}.", "La démo client a lieu {when}."), "medium", "fr"
        ),
        Event(
            "acceptance-de",
            ("Die Abnahme beim Kunden ist {when}.", "Das Kick-off mit dem Kunden ist {when}."),
            "high",
            "de",
        ),
    ),
    third_person=(
        Said(
            "design-owner",
            ("{name} from design owns {v}.", "{name} is the one reviewing {v}."),
            lambda r: r.choice(AREAS),
            "medium",
            True,
        ),
        Said(
            "on-leave",
            ("{name} is on leave until {v}, so no reviews from her.", "{name} will be out until {v}."),
            lambda r: r.choice(("Monday", "the 14th", "after Easter", "the end of the month")),
            "low",
            True,
        ),
    ),
    lowercase=(
        Said(
            "review-rule",
            ("every PR needs {v} approvals before merge", "merges to main need {v} reviewers"),
            lambda r: r.choice(("two", "three", "one")),
            "medium",
        ),
        Said(
            "deploys",
            ("deploys happen on {v} only", "prod deploys go out {v}"),
            lambda r: r.choice(("Tuesdays and Thursdays", "weekday mornings", "Wednesdays")),
            "medium",
        ),
    ),
    foreign=(
        Said(
            "demo-time-fr",
            ("La démo client est à {v}.", "On présente au client à {v}."),
            clock,
            "high",
            language="fr",
        ),
        Said(
            "acceptance-time-de",
            ("Die Abnahme ist um {v} Uhr.", "Das Meeting mit dem Kunden beginnt um {v} Uhr."),
            clock,
            "medium",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "coverage",
            "coverage_report",
            {},
            lambda r: f"{r.randint(61, 97)}%",
            _coverage,
            ("total",),
            "medium",
        ),
        ToolReading(
            "bundle",
            "npm_build",
            {},
            lambda r: f"{r.randint(180, 1900)}.{r.randint(1, 9)} kB",
            _build,
            ("index js", "bundle"),
            "low",
        ),
    ),
)

TALK = Talk(
    questions=(
        "How should we structure the first sprint?",
        "Is it worth writing an ADR for this?",
        "How do I push back on scope creep?",
        "Should we add e2e tests now or later?",
        "How do we estimate the search feature?",
        "What's a good branching strategy here?",
        "Can you draft the weekly update for the client?",
        "Is a monorepo overkill for us?",
        "How do we handle feature flags?",
        "What should be in the definition of done?",
        "How do I onboard the new dev quickly?",
    ),
    advice=(
        "Write the decision down with its reason; future you will thank you.",
        "Cut scope before cutting quality.",
        "A walking skeleton deployed early flushes out the hard problems.",
        "Keep the client update short: done, next, risks.",
        "Estimate in ranges and say what the range depends on.",
        "Small PRs get reviewed faster and break less.",
    ),
    asides=(
        "The client changed their logo again.",
        "Our designer is on fire this week.",
        "Standup ran 40 minutes today, ugh.",
    ),
    tool_turn=_ci_noise,
    topics=(
        "scope creep",
        "the release plan",
        "code review turnaround",
        "flaky tests",
        "the client update",
        "tech debt",
        "estimating the search feature",
    ),
)

STYLE = style(
    "project", "a software project: decisions, owners, milestones, CI output, config", TALK, VOCABULARY
)
