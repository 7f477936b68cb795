"""Named profiles in a profile file, a tenant profile's checks, and the fold of a profile's stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from om_core.domain.config import ConfigError
from om_core.domain.events import ProfileDeleted, ProfileSet, ThreadConfigured
from om_core.domain.profiles import check_tenant_profile, fold_profile, split_profile_document
from om_core.domain.state import fold, initial_state
from om_core.settings import ServerSettings, SettingsError


def test_a_file_without_profiles_is_the_default_profile() -> None:
    assert split_profile_document({"model": "om-local/extractive"}) == ({"model": "om-local/extractive"}, {})


def test_named_profiles_stand_on_the_built_in_defaults() -> None:
    default, named = split_profile_document(
        {"profiles": {"default": {"scope": "thread"}, "support": {"scope": "resource"}, "empty": None}}
    )
    assert default == {"scope": "thread"}
    assert named == {"support": {"scope": "resource"}, "empty": {}}
    assert split_profile_document({"profiles": {"coder": {}}}) == ({}, {"coder": {}})


@pytest.mark.parametrize(
    ("document", "option", "rule"),
    [
        ({"profiles": {}, "scope": "thread"}, "scope", "beside `profiles`"),
        ({"profiles": ["a"]}, "profiles", "must map profile names"),
        ({"profiles": {"Support Desk": {}}}, "profiles.Support Desk", "must match"),
        ({"profiles": {"a": 3}}, "profiles.a", "must be an object"),
        (
            {"profiles": {"a": {"observation": {"messageTokens": -1}}}},
            "profiles.a.observation.messageTokens",
            "",
        ),
    ],
)
def test_a_bad_profile_document_names_the_profile_and_option(
    document: dict[str, object], option: str, rule: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        split_profile_document(document)
    assert refused.value.option == option
    assert rule in refused.value.rule


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"webhooks": [{"url": "https://example.invalid/h", "events": ["activation"]}]}, "webhooks"),
        (
            {"reflection": {"modelSettings": {"apiBase": "http://10.0.0.1/v1"}}},
            "reflection.modelSettings.apiBase",
        ),
        ({"profiles": {}}, "profiles"),
        ({"observation": {"messageTokens": 0}}, "observation.messageTokens"),
    ],
)
def test_a_tenant_profile_cannot_choose_where_the_service_sends_requests(
    options: dict[str, object], option: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        check_tenant_profile(options)
    assert refused.value.option == option


def test_a_profile_stream_folds_to_its_options_and_every_change() -> None:
    state = fold_profile(
        "p",
        [
            ProfileSet(name="p", options={"scope": "thread"}, by="alpha", at="2026-12-01T10:00:00Z"),
            ProfileSet(
                name="p", options={"scope": "resource"}, by="alpha (key 1)", at="2026-12-01T11:00:00Z"
            ),
            ProfileDeleted(name="p", by="alpha", at="2026-12-01T12:00:00Z"),
        ],
    )
    assert (state.version, state.options, state.exists) == (3, None, False)
    assert [(c.version, c.by, c.options) for c in state.changes] == [
        (1, "alpha", {"scope": "thread"}),
        (2, "alpha (key 1)", {"scope": "resource"}),
        (3, "alpha", None),
    ]


def test_a_thread_names_its_profile_and_can_go_back_to_the_default() -> None:
    at = "2026-12-01T10:00:00Z"
    state = fold(initial_state("t/thread/a"), [ThreadConfigured(thread_id="a", profile="coder", at=at)])
    assert state.profile == "coder"
    assert "profile" in state.model_dump_json()
    # a change of title leaves the profile alone; "default" names the default
    state = fold(state, [ThreadConfigured(thread_id="a", title="x", at=at)])
    assert state.profile == "coder"
    state = fold(state, [ThreadConfigured(thread_id="a", profile="default", at=at)])
    assert state.profile is None
    # records written before profiles existed keep the same stored form
    assert "profile" not in state.model_dump_json()


def test_settings_read_a_file_of_named_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(
        "profiles:\n  default:\n    model: om-local/extractive\n  support:\n    scope: resource\n"
        "    model: om-local/extractive\n"
    )
    monkeypatch.setenv("OM_PROFILE", str(path))
    settings = ServerSettings()
    assert settings.profile_layer == {"model": "om-local/extractive"}
    assert settings.profile_document["profiles"]["support"]["scope"] == "resource"
    path.write_text("profiles:\n  support:\n    scope: everywhere\n")
    with pytest.raises(SettingsError, match=r"profiles\.support\.scope"):
        ServerSettings()
