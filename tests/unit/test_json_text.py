"""sorted_json writes what the standard library writes, for any JSON value a message can hold."""

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.domain.json_text import sorted_json
from om_core.domain.state import window_message


def standard(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


# floats of every magnitude, weighted towards the ones orjson and the standard library write differently
floats = st.floats(allow_nan=False, allow_infinity=False) | st.builds(
    lambda mantissa, exponent: mantissa * 10.0**exponent,
    st.floats(min_value=-10, max_value=10, allow_nan=False),
    st.integers(min_value=-12, max_value=20),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too: orjson refuses those
    | floats
    | st.text()
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None)
@given(values)
def test_any_value_is_written_as_the_standard_library_writes_it(value: Any) -> None:
    assert sorted_json(value) == standard(value)


def test_the_numbers_the_two_encoders_disagree_on_are_written_the_standard_way() -> None:
    for number in (1e-5, 3.2e-6, 1.5e-7, 1e-9, 0.00001234, 2**64, -(2**70)):
        assert sorted_json({"n": number, "text": "e-1 0.0000"}) == standard(
            {"n": number, "text": "e-1 0.0000"}
        )
    assert sorted_json({1: "a key that is not a string"}) == standard({1: "a key that is not a string"})


def test_a_window_message_waits_for_a_result_only_when_a_tool_call_is_open() -> None:
    def held(parts: list[dict[str, Any]]) -> bool:
        message = {"id": "m", "role": "assistant", "parts": parts}
        return window_message(
            seq=1,
            message_id="m",
            role="assistant",
            thread_id="t",
            tokens=1,
            created_at="2026-01-01T00:00:00.000Z",
            model=None,
            message=message,
        ).pending_tool_call

    call = {"type": "tool-invocation", "toolCallId": "c", "toolName": "search", "state": "call"}
    assert held([call])
    assert not held([{**call, "state": "result", "result": 1}])
    assert not held([{"type": "text", "text": 'a text that names "tool-invocation" and "call"'}])
