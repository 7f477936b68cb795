"""On-call devops: an incident, its tools (kubectl, load tests, metrics), channels and owners."""

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
    paste_json,
    paste_rows,
    style,
)

SERVICES = (
    "search",
    "checkout",
    "payments",
    "ingest",
    "auth",
    "notifications",
    "catalog",
    "billing",
    "ledger",
    "gateway",
)
REGIONS = ("eu-west-1", "eu-central-1", "us-east-2", "ap-northeast-1", "eu-north-1", "us-west-2")
TEAMS = ("platform", "data", "payments", "identity", "search", "edge", "storage")
OWNED = (
    "the ingress controllers", "the Kafka cluster", "the Terraform modules", "the CDN config",
    "the Postgres replicas",
    "the Redis fleet", "the CI runners", "the TLS certificates", "the service mesh", "the backup jobs",
)  # fmt: skip


def _version(rng: random.Random) -> str:
    return f"v{rng.randint(1, 4)}.{rng.randint(0, 40)}.{rng.randint(0, 19)}"


def _flag(rng: random.Random) -> str:
    head = rng.choice(("new", "async", "fast", "legacy", "beta"))
    return f"{head}_{rng.choice(SERVICES)}_{rng.choice(('path', 'writer', 'cache', 'router', 'retry'))}"


SLOTS = (
    Slot(
        "service",
        "the failing service",
        lambda r: f"{r.choice(SERVICES)}-{r.choice(('api', 'worker', 'indexer', 'svc'))}",
        ("The service on fire is {v}.", "It's {v} that's throwing 5xx.", "Alerts are all from {v}."),
        "high",
        offered=False,
    ),
    Slot(
        "rollback",
        "the version to roll back to",
        _version,
        ("We're rolling back to {v}.", "Last good release was {v}.", "Pin it to {v} for now."),
        "high",
        lambda r: r.choice(("deployed 3 days ago", "before the cache change", "last green canary")),
    ),
    Slot(
        "region",
        "the affected region",
        lambda r: r.choice(REGIONS),
        ("Only {v} is affected.", "It's just {v} for now.", "Impact is limited to {v}."),
        "high",
        offered=False,
    ),
    Slot(
        "flag",
        "the feature flag to turn off",
        _flag,
        ("Kill switch is the {v} flag.", "Turn off {v} if it gets worse.", "The flag that gates it is {v}."),
        "high",
        lambda r: r.choice(("rolled out to 30%", "added last sprint", "safe to flip")),
    ),
    Slot(
        "db",
        "the database instance",
        lambda r: f"pg-{r.choice(SERVICES)}-{r.randint(1, 9):02d}",
        ("The primary is {v}.", "Writes go to {v}.", "DB in question: {v}."),
        "medium",
        offered=False,
    ),
    Slot(
        "ticket",
        "the incident ticket",
        lambda r: f"INC-{r.randint(1000, 9999)}",
        ("Ticket is {v}.", "I opened {v} for this.", "Tracking it in {v}."),
        "medium",
        offered=False,
    ),
    Slot(
        "replicas",
        "the replica count",
        lambda r: str(r.randint(3, 24)),
        ("We run {v} replicas of it.", "Deployment has {v} replicas right now."),
        "low",
        lambda r: f"{r.choice(('fits the node pool', 'needs one more node', 'matches last peak'))}",
    ),
    Slot(
        "timeout",
        "the upstream timeout",
        lambda r: f"{r.choice((500, 750, 1000, 1500, 2000, 3000))}ms",
        ("Upstream timeout is set to {v}.", "The client gives up after {v}."),
        "medium",
        lambda r: r.choice(("p99 is below it", "matches the SLO", "what the vendor suggests")),
    ),
    Slot(
        "status-page",
        "the status page wording",
        lambda r: r.choice(
            ("degraded performance", "partial outage", "elevated error rates", "delayed processing")
        ),
        ("Status page says {v}.", "Let's post {v} on the status page."),
        "low",
        lambda r: "customer-facing",
    ),
)


def _k6(rng: random.Random, value: str) -> str:
    return (
        f"     checks.........................: {rng.randint(90, 99)}.{rng.randint(10, 99)}%\n"
        f"     http_req_duration..............: avg={rng.randint(80, 300)}ms min={rng.randint(5, 40)}ms "
        f"med={rng.randint(60, 250)}ms max={rng.randint(2, 9)}.{rng.randint(1, 9)}s "
        f"p(90)={rng.randint(300, 600)}ms p(95)={value}\n"
        f"     http_reqs......................: {rng.randint(9000, 60000)}\n"
        f"     vus_max........................: {rng.randint(50, 400)}"
    )


def _pods(rng: random.Random, value: str) -> str:
    lines = ["NAME                         READY   STATUS    RESTARTS   AGE"]
    for _ in range(rng.randint(3, 5)):
        lines.append(
            f"{rng.choice(SERVICES)}-api-{rng.randint(1000, 9999)}-x{rng.randint(10, 99)}   1/1     "
            f"Running   {rng.randint(0, 3)}          {rng.randint(1, 9)}h"
        )
    lines.append(f"# top: cpu 1840m  memory {value}")
    return "\n".join(lines)


def _errors(rng: random.Random, value: str) -> str:
    return (
        f"window=15m\n5xx_rate={value}\n4xx_rate={rng.randint(1, 9)}.{rng.randint(0, 9)}%\n"
        f"rps={rng.randint(200, 4000)}"
    )


def _disk(rng: random.Random, value: str) -> str:
    return (
        "Filesystem      Size  Used Avail Use% Mounted on\n"
        f"/dev/nvme1n1    500G  {rng.randint(300, 480)}G   {rng.randint(10, 90)}G  {value} /var/lib/pgsql"
    )


def _rotation(b: Builder, talk: Talk) -> None:
    names = [b.fresh(first_name) for _ in range(5)]
    first = b.rng.randint(2, 46)
    rows = [[f"W{first + i}", names[i % 5], names[(i + 2) % 5]] for i in range(b.rng.randint(4, 6))]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the on-call rotation",
        ["Week", "Primary", "Secondary"],
        rows,
        [Cell(f"rotation-{rows[row][0]}", row, 1, "medium")],
        talk,
        False,
    )


def _latency_csv(b: Builder, talk: Talk) -> None:
    endpoints = ["/search", "/cart", "/login", "/orders", "/health", "/export", "/graphql"]
    b.rng.shuffle(endpoints)
    rows = [
        [e, f"{b.rng.randint(40, 2400)}ms", f"{b.rng.randint(0, 9)}.{b.rng.randint(0, 9)}%"]
        for e in endpoints[:5]
    ]
    row = b.rng.randrange(len(rows))
    paste_rows(
        b,
        "the latency export",
        ["endpoint", "p99", "error_rate"],
        rows,
        [Cell(f"latency-{rows[row][0]}", row, 1, "medium")],
        talk,
        True,
    )


def _alert(b: Builder, talk: Talk) -> None:
    fingerprint = b.fresh(lambda r: "".join(r.choice("0123456789abcdef") for _ in range(12)))
    service = b.rng.choice(SERVICES)
    document: dict[str, Any] = {
        "status": "firing",
        "labels": {"alertname": "HighErrorRate", "severity": "critical", "service": service},
        "annotations": {
            "summary": f"{service} error rate above 5%",
            "runbook": f"https://runbooks.internal/{service}",
        },
        "fingerprint": fingerprint,
    }
    paste_json(b, "the alert payload", document, [("alert-fingerprint", fingerprint, "low")], talk)


def _tool_noise(b: Builder) -> list[dict[str, Any]]:
    rng = b.rng
    tool = rng.choice(("kubectl_get", "grafana_query", "logs_tail"))
    if tool == "logs_tail":
        out = "\n".join(
            f"{clock(rng)}:{rng.randint(10, 59)} INFO request handled in {rng.randint(3, 90)}ms"
            for _ in range(rng.randint(2, 5))
        )
    elif tool == "grafana_query":
        out = f"series={rng.choice(SERVICES)}_requests_total value={rng.randint(100, 9000)}"
    else:
        out = (
            f"deployment.apps/{rng.choice(SERVICES)}-api   {rng.randint(2, 9)}/{rng.randint(2, 9)}   Running"
        )
    return [b.tool(tool, {"namespace": "prod"}, out)]


VOCABULARY = Vocabulary(
    SLOTS,
    pastes=(("table", _rotation), ("csv", _latency_csv), ("json", _alert)),
    events=(
        Event(
            "postmortem", ("the postmortem review is {when}", "we do the blameless review {when}"), "medium"
        ),
        Event(
            "cert-expiry", ("the wildcard cert expires {when}", "the TLS certificate runs out {when}"), "high"
        ),
        Event(
            "freeze-fr",
            ("Le gel des déploiements commence {when}.", "La migration est prévue {when}."),
            "medium",
            "fr",
        ),
        Event(
            "window-de", ("Das Wartungsfenster ist {when}.", "Der Failover-Test ist {when}."), "medium", "de"
        ),
    ),
    third_person=(
        Said(
            "owner",
            (
                "{name} on the {v} team owns the ingress controllers.",
                "{name} from {v} is on point for the Kafka cluster.",
            ),
            lambda r: r.choice(TEAMS),
            "medium",
            True,
        ),
        Said(
            "dba",
            ("{name} is looking at {v} right now.", "{name} said she'd take {v}."),
            lambda r: r.choice(OWNED),
            "medium",
            True,
        ),
    ),
    lowercase=(
        Said(
            "channel",
            ("incidents go to #inc-{v}", "updates for this one go in #inc-{v}, not the team channel"),
            lambda r: f"{r.choice(SERVICES)}-{r.choice(('war', 'sev1', 'outage', 'room'))}",
            "high",
        ),
        Said(
            "escalation",
            (
                "pages for this service escalate to the {v} rotation after 15 minutes",
                "escalation goes to {v} on-call",
            ),
            lambda r: r.choice(TEAMS),
            "medium",
        ),
    ),
    foreign=(
        Said(
            "freeze-until-fr",
            ("Le déploiement est gelé jusqu'à {v}.", "Pas de mise en prod avant {v}."),
            clock,
            "medium",
            language="fr",
        ),
        Said(
            "window-start-de",
            ("Das Wartungsfenster beginnt um {v} Uhr.", "Der Rollback startet um {v} Uhr."),
            clock,
            "high",
            language="de",
        ),
    ),
    tools=(
        ToolReading(
            "p95",
            "k6_run",
            {"script": "load/checkout.js"},
            lambda r: f"{r.randint(300, 2900)}ms",
            _k6,
            ("p 95", "p95", "95th"),
            "high",
        ),
        ToolReading(
            "memory",
            "kubectl_top",
            {"namespace": "prod"},
            lambda r: f"{r.randint(1, 7)}.{r.randint(1, 9)}GiB",
            _pods,
            ("memory",),
            "medium",
        ),
        ToolReading(
            "error-rate",
            "grafana_query",
            {"panel": "5xx"},
            lambda r: f"{r.randint(2, 19)}.{r.randint(1, 9)}%",
            _errors,
            ("5xx",),
            "high",
        ),
        ToolReading(
            "disk",
            "ssh_df",
            {"host": "db-1"},
            lambda r: f"{r.randint(81, 99)}%",
            _disk,
            ("pgsql",),
            "medium",
        ),
    ),
)

TALK = Talk(
    questions=(
        "Can you check the pods again?",
        "Is the error rate still climbing?",
        "Should we page the DB team?",
        "What does the dashboard say now?",
        "Can you tail the logs for the last five minutes?",
        "Is it worth scaling up while we investigate?",
        "Any sign it's the new deploy?",
        "How's the queue depth?",
        "Can you draft the status update?",
        "What would you check next?",
        "Is the canary healthy?",
        "Do we have a runbook for this?",
    ),
    advice=(
        "Stabilise first, investigate second: a rollback buys time.",
        "Post an update every thirty minutes even if nothing changed.",
        "Keep the timeline as you go; the postmortem will need it.",
        "Check whether the errors correlate with a single node or zone.",
        "Scaling hides the symptom; note it so nobody forgets to scale back.",
        "If the graphs disagree, trust the raw logs.",
        "One person drives, everyone else advises.",
    ),
    asides=(
        "Coffee number four.",
        "Slack is melting.",
        "Of course this happens at 3am.",
        "My pager app crashed, lol.",
    ),
    tool_turn=_tool_noise,
    topics=(
        "the rollback",
        "alert fatigue",
        "the status page",
        "a noisy neighbour node",
        "the incident timeline",
        "paging the DBA",
        "connection pool exhaustion",
    ),
)

STYLE = style(
    "oncall", "on-call devops: an incident with tool output, owners, channels and timings", TALK, VOCABULARY
)
