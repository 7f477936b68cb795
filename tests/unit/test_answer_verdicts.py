"""The parser's verdict on each Observer and Reflector answer, recorded in the cycle's usage: what a real
model's answers came to (parsed, repaired, degenerate, empty) is read from the events."""

from __future__ import annotations

import pytest

from om_core.application.observer import ObserverFailedError
from om_core.domain.observer_output import answer_verdict, parse_observer_output
from tests.unit.test_observer_answers import (
    DEGENERATE,
    EMPTY,
    OBSERVED,
    SAID,
    ScriptedObserver,
    observe,
    window,
)


@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (OBSERVED, "parsed"),
        ("<observations>* 🔴 (09:00) User lives in Lisbon</observations>", "parsed"),
        # left open, wrapped in a code block, or bare list items: observations recovered
        ("<observations>\n* 🔴 (09:00) User lives in Lisbon\n", "repaired"),
        ("```\n<observations>\n* 🔴 User lives in Lisbon\n</observations>\n```", "repaired"),
        ("Here are my notes:\n* 🔴 (09:00) User lives in Lisbon\n", "repaired"),
        (EMPTY, "empty"),
        ("I have nothing to add.", "empty"),
        (DEGENERATE, "degenerate"),
    ],
)
def test_each_answer_gets_a_verdict(answer: str, verdict: str) -> None:
    assert answer_verdict(answer, parse_observer_output(answer)) == verdict


def test_a_cycle_records_the_verdict_of_every_answer() -> None:
    result = observe(ScriptedObserver([EMPTY, OBSERVED]), window(SAID))
    assert result.usage.verdicts == ("empty", "parsed")


def test_a_failed_cycle_records_them_too() -> None:
    with pytest.raises(ObserverFailedError) as failed:
        observe(ScriptedObserver([DEGENERATE, EMPTY]), window(SAID))
    assert failed.value.usage.verdicts == ("degenerate", "empty")
