"""The usage counters where operators scrape them: ``om worker --metrics-port`` of a prefork worker (its
children added up from the metrics directory the worker makes for itself), against the usage the outcome
events record."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from om_core.domain.events import from_recorded
from om_core.domain.usage import cycle_usage
from testing.processes import free_port, om_worker_process, wait_for

from .conftest import TENANT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODEL = "om-local/extractive"


def _samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(url, timeout=5).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_a_prefork_worker_exposes_the_usage_of_the_cycles_it_ran(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    port = free_port()
    env = cluster.env(OM_WORKER_METRICS_PORT=str(port))
    worker = om_worker_process("metered", env, cluster.tmp, concurrency=2)
    cluster.processes.append(worker)
    worker.start()

    thread = cluster.new_thread()
    cluster.append_until_buffer_requested(thread)
    wait_for(lambda: cluster.events(thread, "ObservationBufferCompleted"), 60, what="a buffered chunk")
    recorded = [
        found
        for event in cluster.events(thread)
        if (found := cycle_usage(event.event_type, event.data)) is not None
    ]
    assert [u.outcome for u in recorded] == ["completed"]
    usage = recorded[0].usage
    assert usage.model == MODEL and usage.input_tokens > 0
    # the store refuses a second outcome of the cycle before anything is counted: one cycle, once
    assert from_recorded(cluster.events(thread, "ObservationBufferCompleted")[0]).usage == usage

    labels = {"operation": "observation", "model": MODEL, "tenant": TENANT}
    url = f"http://127.0.0.1:{port}/metrics"

    def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = _samples(url)
        return samples if _value(samples, "om_usage_cycles_total", **labels, outcome="completed") else None

    samples = wait_for(counted, 30, what="the usage counters")
    assert _value(samples, "om_usage_cycles_total", **labels, outcome="completed") == 1
    assert _value(samples, "om_usage_calls_total", **labels, outcome="completed") == usage.calls
    assert _value(samples, "om_usage_tokens_total", **labels, direction="input") == usage.input_tokens
    assert _value(samples, "om_usage_tokens_total", **labels, direction="output") == usage.output_tokens
    assert _value(samples, "om_usage_cycles_total", **labels, outcome="failed") == 0
    # one verdict per answer the parser judged, as the event records them
    assert usage.verdicts
    for verdict in set(usage.verdicts):
        counted_verdicts = _value(samples, "om_usage_verdicts_total", **labels, verdict=verdict)
        assert counted_verdicts == usage.verdicts.count(verdict)
