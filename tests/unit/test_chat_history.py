"""Placing a proxied request's messages against the thread's stored tail (om_core/application/chat.py)."""

from __future__ import annotations

from typing import Any

import pytest

from om_core.application.chat import ReplyAssembly, derive_message_id, known_prefix, signature
from om_core.domain.message_input import MessageValidationError


def key(role: str, text: str) -> tuple[str, str]:
    return role, signature({"role": role, "content": text})


def conversation(turns: int) -> list[tuple[str, str]]:
    keys: list[tuple[str, str]] = []
    for turn in range(turns):
        keys += [key("user", f"question {turn}"), key("assistant", f"answer {turn}")]
    return keys


def test_the_whole_history_resent_with_a_new_message_brings_only_the_new_one() -> None:
    stored = conversation(5)
    sent = [*stored, key("user", "question 5")]
    assert known_prefix(sent, stored, whole_thread=True) == (10, 10)


def test_a_window_of_the_history_resent_is_placed_at_the_stored_end() -> None:
    stored = conversation(5)
    sent = [*stored[4:], key("user", "question 5")]
    assert known_prefix(sent, stored, whole_thread=False) == (6, 10)


def test_only_the_new_message_sent_is_new() -> None:
    assert known_prefix([key("user", "question 5")], conversation(5), whole_thread=True) == (0, 10)


def test_a_message_repeated_later_in_the_conversation_is_stored_again() -> None:
    # "question 1" was said before; sent alone after a reply it is a new message, not a retry
    assert known_prefix([key("user", "question 1")], conversation(5), whole_thread=True)[0] == 0


def test_a_resent_history_ending_before_a_reply_the_app_lost_is_a_retry() -> None:
    stored = conversation(3)
    # the app never got "answer 2" and sends the same request again
    assert known_prefix(stored[:-1], stored, whole_thread=True) == (5, 5)


def test_a_retried_first_message_is_not_stored_twice() -> None:
    stored = conversation(1)
    assert known_prefix(stored[:1], stored, whole_thread=True) == (1, 1)
    # unless the tail read is not the whole thread: then it may be a repeat late in a conversation
    assert known_prefix(stored[:1], stored, whole_thread=False)[0] == 0


def test_an_edited_history_brings_only_what_follows_its_last_reply() -> None:
    stored = conversation(3)
    sent = [key("user", "question 0, edited"), *stored[1:], key("user", "question 3")]
    assert known_prefix(sent, stored, whole_thread=True)[0] == len(sent) - 1


def test_a_new_thread_takes_everything() -> None:
    sent = conversation(2)
    assert known_prefix(sent, [], whole_thread=True) == (0, 0)


def test_the_same_content_in_another_place_gets_another_id() -> None:
    ok = signature({"role": "user", "content": "ok"})
    first = derive_message_id("t", "", ok)
    assert derive_message_id("t", "", ok) == first
    assert derive_message_id("t", first, ok) != first
    assert derive_message_id("other", "", ok) != first


def test_the_signature_is_what_the_message_says_in_any_format() -> None:
    openai = {"role": "user", "content": "hello"}
    ui = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}
    timed = {"role": "user", "content": "hello", "createdAt": "2026-01-01T00:00:00Z"}
    assert signature(openai) == signature(ui) == signature(timed)
    assert signature(openai) != signature({"role": "assistant", "content": "hello"})
    call: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
    spaced = {
        **call,
        "tool_calls": [{**call["tool_calls"][0], "function": {"name": "f", "arguments": '{"a":1}'}}],
    }
    assert signature(call) == signature(spaced)
    with pytest.raises(MessageValidationError):
        signature({"role": "user", "content": ""})


def test_a_streamed_reply_is_put_back_together() -> None:
    reply = ReplyAssembly()
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {"choices": [{"index": 1, "delta": {"content": "other choice"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"a"'},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}
            ]
        },
    ]
    for chunk in chunks:
        reply.add(chunk)
    assert not reply.finished
    reply.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    assert reply.finished
    assert reply.message() == {
        "content": "Hello",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    }
