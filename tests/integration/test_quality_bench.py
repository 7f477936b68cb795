"""``om bench quality`` end to end on one short conversation, and how it reads an event stream."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from bench import quality_bench
from bench.quality_analysis import CAUSES, FactTrace, _red_dropped, cause_of_loss
from testing.styles.facts import Fact, SearchText, date_part, value_part


def test_a_short_styles_run_reports_retention_compression_and_causes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = quality_bench.main(
        [
            "--styles",
            "oncall",
            "--conversations",
            "1",
            "--messages",
            "160",
            "--lost",
            "--markdown",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr()
    report = json.loads(printed.out)
    assert json.loads(out.read_text()) == report
    assert report["suite"] == "styles" and report["seeds"] == "dev" and report["seed_range"] == [1, 1]
    overall = report["overall"]
    assert overall["messages"] == 160
    assert overall["facts_planted"] >= 8
    assert 0 <= overall["facts_retained"] <= overall["facts_planted"]
    assert overall["observer_calls"] > 0 and overall["message_tokens_observed"] > 0
    assert overall["compression_ratio"] > 1
    lost = overall["facts_planted"] - overall["facts_retained"]
    assert sum(overall["lost_by_cause"].values()) == lost == len(report["lost"])
    assert set(overall["lost_by_cause"]) <= set(CAUSES)
    assert sum(c["planted"] for c in overall["by_category"].values()) == overall["facts_planted"]
    assert all({"category", "cause", "value", "message_id"} <= set(fact) for fact in report["lost"])
    assert "| oncall | 1 / 160 |" in printed.err and "Lost facts by cause" in printed.err


def test_lost_facts_are_never_listed_for_held_out_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        quality_bench.main(["--seeds", "heldout", "--lost"])
    assert "development seeds only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        quality_bench.main(["--seeds", "dev", "--first-seed", "49999", "--conversations", "2"])
    assert "below 50000" in capsys.readouterr().err


def test_the_legacy_suite_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        quality_bench.main(
            ["--suite", "legacy", "--styles", "help", "--conversations", "1", "--messages", "60"]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["suite"] == "legacy" and report["styles"][0]["messages"] == 60


def _fact(**extra: Any) -> Fact:
    source = "Sanne just moved to Trondheim for a job at a vet clinic"
    return Fact("k", "plain", "high", (value_part("Trondheim"),), "m1", source, **extra)


def test_each_lost_fact_gets_the_cause_its_trace_shows() -> None:
    empty = SearchText.of("")
    assert (
        cause_of_loss(_fact(), FactTrace(extracted=True, in_log_ever=True, in_final_log=True), empty)
        == "dropped-by-rendering"
    )
    removed = FactTrace(extracted=True, in_log_ever=True, removed_by_reflection=True)
    assert cause_of_loss(_fact(), removed, empty) == "removed-by-reflection"
    assert cause_of_loss(_fact(), FactTrace(extracted=True), empty) == "never-activated"
    cut = FactTrace(outputs_for_message=["* 🔴 (10:02) Just moved for a job at a vet clinic"])
    assert cause_of_loss(_fact(), cut, empty) == "value-cut"
    assert (
        cause_of_loss(_fact(), FactTrace(outputs_for_message=["* 🟡 asked about trains"]), empty)
        == "never-extracted"
    )
    corrected = _fact(superseded=(value_part("Bergen"),))
    assert cause_of_loss(corrected, FactTrace(), SearchText.of("- 🔴 lives in Bergen")) == "superseded-only"
    dated = Fact("d", "relative-date", "high", (date_part(date(2026, 3, 9)),), "m1", "in ten days")
    unresolved = FactTrace(outputs_for_message=["* 🔴 (09:00) Movers come in ten days"])
    assert cause_of_loss(dated, unresolved, empty) == "date-unresolved"


def test_a_reflection_dropping_a_red_line_while_a_lower_one_survives_is_counted() -> None:
    before = (
        "Date: Mar 1, 2026\n* 🔴 (09:00) User is allergic to tree nuts\n"
        "* 🟡 (09:05) User watched a TV show\n* 🔴 (09:06) User lives in Ghent"
    )
    assert _red_dropped(before, "* 🟡 User watched a TV show\n* 🔴 User lives in Ghent") == 1
    assert _red_dropped(before, "* 🔴 User lives in Ghent") == 0
    assert _red_dropped(before, before) == 0
    # shortened by the reflection is not dropped
    assert (
        _red_dropped(before, "* 🟡 User watched a TV show\n* 🔴 Allergic to tree nuts\n* 🔴 Lives in Ghent")
        == 0
    )
