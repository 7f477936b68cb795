"""What a use case refuses reaches HTTP as its status, code, message and details (om_api/errors.py maps the
application's typed errors; test_recall_erase_keys and test_bad_input cover the others)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from .conftest import AUTH_A

THREAD = "refusals"


@pytest.fixture(scope="module")
def thread(client: TestClient) -> str:
    message = {
        "id": "f1",
        "role": "user",
        "content": "twelve characters",
        "createdAt": "2026-03-02T10:00:00Z",
    }
    r = client.post(f"/v1/threads/{THREAD}/messages", json={"messages": [message]}, headers=AUTH_A)
    assert r.status_code == 200, r.text
    return THREAD


@pytest.mark.parametrize(
    ("path", "params", "status", "error"),
    [
        (
            "recall",
            {"cursor": "nope"},
            404,
            {
                "code": "cursor_not_found",
                "message": "no message 'nope' in the threads this recall can read",
                "details": {"cursor": "nope"},
            },
        ),
        (
            "recall",
            {"part_index": 0},
            422,
            {
                "code": "cursor_required",
                "message": "partIndex needs the cursor of the message it belongs to",
                "details": {},
            },
        ),
        (
            "recall",
            {"cursor": "f1", "part_index": 3},
            422,
            {
                "code": "part_index_out_of_range",
                "message": "message 'f1' has 1 parts; partIndex 3 does not exist",
                "details": {},
            },
        ),
        (
            "recall",
            {"cursor": "f1", "part_index": 0, "char_offset": 18},
            422,
            {"code": "char_offset_out_of_range", "message": "charOffset must be within 0..17", "details": {}},
        ),
        (
            "recall",
            {"thread_id": "another"},
            404,
            # another thread is readable only within the caller's resource; this one has none
            {
                "code": "thread_not_found",
                "message": "no thread 'another'",
                "details": {"thread_id": "another"},
            },
        ),
        (
            "observations",
            {"generation": 5},
            404,
            {"code": "generation_not_found", "message": "generation 5 does not exist yet", "details": {}},
        ),
    ],
)
def test_a_refusal_is_answered_with_its_code(
    client: TestClient, thread: str, path: str, params: dict[str, Any], status: int, error: dict[str, Any]
) -> None:
    r = client.get(f"/v1/threads/{thread}/{path}", params=params, headers=AUTH_A)
    assert (r.status_code, r.json()) == (status, {"error": error})
