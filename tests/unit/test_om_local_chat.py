"""``om-local/chat``: deterministic answers from what the prompt holds, tool calls on request, chunks."""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from om_core.adapters.models.om_local_chat import observation_lines, reply_chunks, reply_to

MEMORY = {
    "role": "system",
    "content": "<observations>\nDate: Jan 6, 2026\n* 🔴 (10:00) User's sister Priya lives in Lisbon.\n"
    "* 🟡 (10:05) User prefers green tea.\n</observations>",
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_it_quotes_the_question_and_lists_the_matching_observations() -> None:
    reply = reply_to([MEMORY, {"role": "user", "content": "Where does my sister live?"}])
    assert reply.text is not None and reply.finish_reason == "stop"
    assert '"Where does my sister live?"' in reply.text
    assert "Priya lives in Lisbon" in reply.text and "green tea" not in reply.text
    assert reply_to([MEMORY, {"role": "user", "content": "Where does my sister live?"}]) == reply


def test_without_memory_it_says_so() -> None:
    reply = reply_to([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert reply.text is not None and "no observations" in reply.text
    assert observation_lines([{"role": "user", "content": MEMORY["content"]}]) == []


def test_it_calls_a_tool_when_asked_and_reports_the_result() -> None:
    asked = [{"role": "user", "content": 'please call get_weather {"city": "Paris"}'}]
    reply = reply_to(asked, TOOLS)
    assert reply.text is None and reply.finish_reason == "tool_calls"
    (call,) = reply.tool_calls
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert reply_to(asked, TOOLS, "none").tool_calls == []
    assert reply_to(asked).tool_calls == []
    answered = [
        *asked,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
    ]
    assert reply_to(answered, TOOLS).text == "Tool result: sunny"
    forced = reply_to([{"role": "user", "content": "weather?"}], TOOLS, "required")
    assert forced.tool_calls[0]["function"]["arguments"] == "{}"


def test_its_chunks_add_up_to_the_reply() -> None:
    reply = reply_to([MEMORY, {"role": "user", "content": "Where does my sister live?"}])
    chunks = list(reply_chunks(reply))
    assert len(chunks) > 2 and chunks[-1]["is_finished"] and chunks[-1]["finish_reason"] == "stop"
    assert "".join(c["text"] for c in chunks) == reply.text
    call = reply_to([{"role": "user", "content": 'call get_weather {"city": "Paris"}'}], TOOLS)
    pieces = [c["tool_use"] for c in reply_chunks(call) if c.get("tool_use")]
    assert len(pieces) == 2 and pieces[0]["id"] == call.tool_calls[0]["id"]
    assert json.loads("".join(p["function"]["arguments"] for p in pieces)) == {"city": "Paris"}
