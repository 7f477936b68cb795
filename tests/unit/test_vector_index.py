"""The pieces of the vector index that need no database: the local embedder, ranking, group parsing."""

from __future__ import annotations

import math

from om_core.adapters.models.om_local import HASHING_DIMENSIONS, hashing_embedding
from om_core.domain.observation_log import observation_groups, wrap_observation_group
from om_core.domain.vectors import cosine, nearest


def test_the_hashing_embedder_is_deterministic_and_unit_length() -> None:
    first = hashing_embedding("Priya moved to Lisbon in March")
    assert first == hashing_embedding("Priya moved to Lisbon in March")
    assert len(first) == HASHING_DIMENSIONS
    assert math.isclose(sum(v * v for v in first), 1.0)
    assert hashing_embedding("") == [0.0] * HASHING_DIMENSIONS


def test_texts_sharing_words_are_nearer_than_unrelated_ones() -> None:
    query = hashing_embedding("where does Priya live now?")
    lisbon = hashing_embedding("* 🔴 Priya lives in Lisbon since March")
    cooking = hashing_embedding("* 🟡 The user asked for a rice and egg recipe")
    assert cosine(query, lisbon) > cosine(query, cooking)
    ranked = nearest(query, [("cooking", cooking), ("lisbon", lisbon)], 1)
    assert [name for name, _ in ranked] == ["lisbon"]


def test_vectors_of_another_length_score_zero() -> None:
    assert cosine([1.0, 0.0], [1.0, 0.0, 0.0]) == 0.0
    assert cosine([0.0, 0.0], [0.0, 0.0]) == 0.0


def test_nearest_keeps_the_candidates_order_on_ties() -> None:
    same = [1.0, 0.0]
    assert [n for n, _ in nearest([1.0, 0.0], [("a", same), ("b", same), ("c", [0.0, 1.0])], 2)] == ["a", "b"]


def test_groups_are_parsed_with_their_range_inside_thread_sections_too() -> None:
    thread_scope = wrap_observation_group("* 🔴 fact one", "0123456789abcdef", "m1", "m4")
    (group,) = observation_groups(thread_scope)
    assert (group.group_id, group.range_start, group.range_end, group.text) == (
        "0123456789abcdef",
        "m1",
        "m4",
        "* 🔴 fact one",
    )
    resource_scope = (
        '<thread id="t-a">\n'
        + wrap_observation_group("* a fact", "aaaaaaaaaaaaaaaa", "a1", "a2")
        + '\n</thread>\n<thread id="t-b">\n'
        + wrap_observation_group("* b fact", "bbbbbbbbbbbbbbbb", "b1", "b1")
        + "\n</thread>"
    )
    assert [(g.group_id, g.range_start, g.text) for g in observation_groups(resource_scope)] == [
        ("aaaaaaaaaaaaaaaa", "a1", "* a fact"),
        ("bbbbbbbbbbbbbbbb", "b1", "* b fact"),
    ]
    assert observation_groups("* plain observations, no retrieval") == []
