"""Every option of Mastra's reference either works (parsed, with a test of its effect) or is refused with
an error naming it; and the options that used to be accepted without effect (attachment policies,
extractor names, model lists) now act."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from om_core.domain import thresholds
from om_core.domain.attachments import accepts_attachments, forwarded_attachments
from om_core.domain.config import ConfigError, extractor_slug, parse_memory_config
from om_core.domain.transcript import TranscriptAttachment

TESTS = Path(__file__).resolve().parents[1]

# --- observeAttachments ---------------------------------------------------------------------------------


def _attachments() -> tuple[TranscriptAttachment, ...]:
    def one(
        kind: Any, number: int, name: str, url: str, mime: str | None, filename: str | None = None
    ) -> Any:
        return TranscriptAttachment(
            kind, number, f"[{kind.capitalize()} #{number}: {name}]", url, mime, filename, "m1"
        )

    return (
        one("image", 1, "board.png", "https://x.test/board.png", "image/png"),
        one("image", 2, "photo", "https://x.test/photo", None),
        one("file", 1, "plan.pdf", "https://x.test/plan.pdf", "application/pdf"),
        one("file", 2, "data.csv", "data:text/csv;base64,YSxiCg==", None, "data.csv"),
    )


def _names(attachments: Any) -> list[str]:
    return [a.placeholder for a in attachments]


def test_observe_attachments_true_false_and_mime_lists() -> None:
    attachments = _attachments()
    assert len(forwarded_attachments(True, attachments, "om-local/extractive")) == 4
    assert forwarded_attachments(False, attachments, "google/gemini-2.5-flash") == ()
    images = forwarded_attachments(("image/*",), attachments, "google/gemini-2.5-flash")
    # the image without a type or extension is still an image
    assert _names(images) == ["[Image #1: board.png]", "[Image #2: photo]"]
    pdf = forwarded_attachments(("application/pdf", "image/png"), attachments, "google/gemini-2.5-flash")
    assert _names(pdf) == ["[Image #1: board.png]", "[File #1: plan.pdf]"]
    csv = forwarded_attachments(("text/csv",), attachments, "google/gemini-2.5-flash")
    assert _names(csv) == ["[File #2: data.csv]"]
    assert len(forwarded_attachments(("*",), attachments, "google/gemini-2.5-flash")) == 4


def test_mime_patterns_are_case_insensitive() -> None:
    config = parse_memory_config({"observation": {"observeAttachments": ["IMAGE/PNG"]}})
    picked = forwarded_attachments(config.observation.observe_attachments, _attachments(), "openai/gpt-4o")
    assert _names(picked) == ["[Image #1: board.png]"]


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("google/gemini-2.5-flash", 4),
        ("openai/gpt-5-mini", 4),
        ("anthropic/claude-sonnet-4-5", 4),
        ("deepseek/deepseek-reasoner", 0),
        ("om-local/extractive", 0),
        ("openai/gpt-3.5-turbo", 0),
        # no capability data: sent, as Mastra does
        ("openrouter/some/model", 4),
    ],
)
def test_observe_attachments_auto_follows_the_observer_models_capabilities(model: str, sent: int) -> None:
    assert len(forwarded_attachments("auto", _attachments(), model)) == sent


def test_capability_registry_answers_unknown_for_unknown_models() -> None:
    assert accepts_attachments("openrouter/x") is None
    assert accepts_attachments("google/gemini-3-pro") is True


# --- extractor names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("User profile", "user-profile"),
        ("  Project   Status!  ", "project-status"),
        ("user's timezone", "users-timezone"),
        ("Café order", "caf-order"),
        ("already-a-slug", "already-a-slug"),
    ],
)
def test_extractor_names_are_slugged_as_mastra_does(name: str, slug: str) -> None:
    assert extractor_slug(name) == slug
    (extractor,) = parse_memory_config(
        {"observation": {"extract": [{"name": name, "instructions": "x"}]}}
    ).observation.extract
    assert extractor.name == name and extractor.slug == slug
    assert extractor.persisted_key_path == f"extracted.{slug}"


def test_extractor_names_must_be_unique_once_slugged() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config(
            {
                "observation": {
                    "extract": [
                        {"name": "User profile", "instructions": "x"},
                        {"name": "user-profile", "instructions": "y"},
                    ]
                }
            }
        )
    assert caught.value.option == "observation.extract"
    assert "'user-profile'" in caught.value.rule


# --- model lists ----------------------------------------------------------------------------------------


def test_a_model_list_resolves_to_its_enabled_models_in_order() -> None:
    config = parse_memory_config(
        {
            "model": [
                {"model": "openai/gpt-5-mini", "maxRetries": 2},
                {"model": "anthropic/claude-sonnet-4-5", "enabled": False},
                {"model": "default", "max_retries": 0},
            ]
        }
    )
    route = thresholds.resolve_model_route(config, "reflector", 10)
    assert route == (
        thresholds.ModelChoice("openai/gpt-5-mini", 2),
        thresholds.ModelChoice("google/gemini-2.5-flash", 0),
    )
    assert thresholds.resolve_model(config, "observer", 10) == "openai/gpt-5-mini"
    # a list is a choice of models, not the default selection: no default maxOutputTokens
    assert thresholds.resolve_model_settings(config, "observer").max_output_tokens is None
    assert parse_memory_config(config.to_json()) == config


@pytest.mark.parametrize(
    ("model", "option"),
    [
        ([], "model"),
        ([{"model": "gpt"}], "model[0].model"),
        ([{"model": "a/b", "maxRetries": -1}], "model[0].maxRetries"),
        ([{"model": "a/b", "retries": 1}], "model[0].retries"),
        ([{"model": "a/b", "enabled": False}], "model"),
        (["a/b"], "model[0]"),
    ],
)
def test_a_bad_model_list_is_refused_naming_the_entry(model: Any, option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config({"model": model})
    assert caught.value.option == option


# --- every option of the reference ----------------------------------------------------------------------

# Mastra's options (reference §1 and the documentation's options list), each with a value to parse and the
# test that shows it acting, or None when om refuses it.
SUPPORTED: dict[str, tuple[Any, str]] = {
    "enabled": (False, "test_enabled_false_observes_nothing_and_the_context_is_the_raw_messages"),
    "model": ("om-local/extractive", "test_a_model_list_falls_back_to_the_next_model_after_its_retries"),
    "scope": ("resource", "test_threads_share_one_record_and_see_each_other"),
    "activateAfterIdle": ("auto", "test_auto_idle_ttl_follows_the_callers_prompt_cache_retention"),
    "activateOnProviderChange": (True, "test_provider_change_wins_over_ttl"),
    "shareTokenBudget": (True, "test_scenario_4_shared_budget_message_threshold"),
    "temporalMarkers": (True, "test_temporal_gap_marker_states_gap_and_local_wall_clock"),
    "retrieval": (True, "test_retrieval_mode_wraps_groups_with_their_message_range"),
    "retrieval.vector": (True, "test_search_scope_follows_retrieval_scope_and_erasure_removes_the_index"),
    "retrieval.scope": ("thread", "test_retrieval_scope_thread_keeps_recall_to_the_calling_thread"),
    "retrieval.instructions": ("x", "test_retrieval_mode_wraps_groups_with_their_message_range"),
    "obscureThreadIds": (True, "test_obscure_thread_ids_can_be_set_explicitly"),
    "observation.model": (
        "om-local/extractive",
        "test_an_input_over_every_tier_is_observed_by_the_largest_tier",
    ),
    "observation.instruction": (
        "x",
        "test_regression_22195_instructions_only_in_system_transcript_only_after_heading",
    ),
    "observation.threadTitle": (True, "test_observer_continuation_hints_and_thread_title"),
    "observation.extract": (
        [{"name": "User profile", "instructions": "x"}],
        "test_extracted_values_reach_context_and_metadata",
    ),
    "observation.manageWorkingMemory": (True, "test_document_created_updated_in_context_and_over_http"),
    "observation.observeAttachments": (["image/*"], "test_observe_attachments_true_false_and_mime_lists"),
    "observation.messageTokens": (
        1000,
        "test_at_block_after_a_read_observes_synchronously_keeping_a_small_tail",
    ),
    "observation.maxTokensPerBatch": (5000, "test_sync_observation_batches_threads_and_keeps_them_apart"),
    "observation.modelSettings": (
        {"temperature": 0.5, "maxOutputTokens": 900},
        "test_explicit_model_settings_win",
    ),
    "observation.providerOptions": (
        {"google": {}},
        "test_completion_kwargs_translate_settings_and_provider_options",
    ),
    "observation.bufferTokens": (0.25, "test_buffering_continues_between_threshold_and_block_after"),
    "observation.bufferOnIdle": (True, "test_a_running_beat_activates_the_chunks_of_an_idle_thread"),
    "observation.bufferActivation": (0.7, "test_scenario_8_block_after_forces_the_larger_activation"),
    "observation.activateAfterIdle": ("5m", "test_idle_ttl_resolution_per_scope"),
    "observation.activateOnProviderChange": (True, "test_provider_change_resolution_per_scope"),
    "observation.blockAfter": (
        1.5,
        "test_slow_model_never_exceeds_block_after_and_reads_below_it_never_wait",
    ),
    "observation.previousObserverTokens": (500, "test_previous_observer_tokens"),
    "observation.continuationHints": (False, "test_observer_continuation_hints_and_thread_title"),
    "reflection.model": ("om-local/extractive", "test_an_input_over_every_tier_goes_to_the_largest_tier"),
    "reflection.instruction": (
        "x",
        "test_the_reflector_prompt_asks_for_inline_extractors_only_and_carries_their_values",
    ),
    "reflection.extract": (
        [{"name": "Topic", "instructions": "x"}],
        "test_reflection_extractors_reach_events_record_context_and_metadata",
    ),
    "reflection.observationTokens": (5000, "test_at_reflection_block_after_a_read_costs_at_most_the_ladder"),
    "reflection.modelSettings": ({"temperature": 0.1}, "test_default_model_settings_per_role"),
    "reflection.providerOptions": (
        {"google": {}},
        "test_provider_options_default_to_the_reference_thinking_budgets",
    ),
    "reflection.bufferActivation": (
        0.4,
        "test_below_reflection_block_after_an_operation_starts_at_most_one_reflection",
    ),
    "reflection.activateAfterIdle": (
        "5m",
        "test_reflection_activate_after_idle_activates_a_buffered_reflection_below_the_threshold",
    ),
    "reflection.activateOnProviderChange": (True, "test_reflection_activate_on_provider_change"),
    "reflection.blockAfter": (1.5, "test_at_reflection_block_after_no_small_buffered_reflection_runs_first"),
    "reflection.continuationHints": (
        False,
        "test_reflection_continuation_hints_reach_the_result_and_can_be_turned_off",
    ),
    "observation.extract[].includePreviousExtraction": (
        False,
        "test_extracted_values_reach_context_and_metadata",
    ),
    "observation.extract[].metadataKeyPath": (
        "profile.a",
        "test_extractor_metadata_key_path_can_be_set_or_disabled",
    ),
    "observation.extract[].schema": (
        {"type": "object"},
        "test_extract_json_fills_the_schema_from_what_the_user_said",
    ),
}
REFUSED = (
    "hooks",
    "hookExecution",
    "storage",
    "onDebugEvent",
    "observation.extract[].onExtracted",
    "observation.extract[].slug",
)


def _raw(option: str, value: Any) -> dict[str, Any]:
    """The smallest configuration setting ``option`` (an extractor field inside one extractor)."""
    head, _, rest = option.partition(".")
    if head.endswith("[]"):
        extractor: dict[str, Any] = {"name": "Probe", "instructions": "x"}
        extractor[rest] = value
        return {head[:-2]: [extractor]}
    if not rest:
        raw: dict[str, Any] = {head: value}
        if head == "shareTokenBudget":
            raw["observation"] = {"bufferTokens": False}
        return raw
    if "." in rest:
        return {head: _raw(rest, value)}
    return {head: {rest: value}}


def _test_exists(name: str) -> bool:
    pattern = re.compile(rf"^def {re.escape(name)}\(", re.MULTILINE)
    return any(pattern.search(path.read_text()) for path in TESTS.rglob("test_*.py"))


@pytest.mark.parametrize("option", sorted(SUPPORTED))
def test_a_supported_option_parses_and_its_effect_is_tested(option: str) -> None:
    value, effect_test = SUPPORTED[option]
    parse_memory_config(_raw(option, value))
    assert _test_exists(effect_test), f"{option}: no test named {effect_test}"


@pytest.mark.parametrize("option", REFUSED)
def test_an_option_om_does_not_have_is_refused_naming_it(option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_memory_config(_raw(option, True))
    named = option.replace("[]", "[0]")
    assert caught.value.option == named and "unknown option" in caught.value.rule
