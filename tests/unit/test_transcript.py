from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from om_core.domain.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolInvocationPart,
)
from om_core.domain.transcript import (
    format_multi_thread_transcript,
    format_transcript,
    obscure_thread_id,
    render_tool_args,
)

T0 = datetime(2023, 5, 15, 14, 30, tzinfo=UTC)


def msg(mid: str, role: Role, *parts: Part, at: datetime = T0) -> Message:
    return Message(id=mid, role=role, parts=tuple(parts), created_at=at)


def test_date_header_on_change_and_time_only_when_it_changes() -> None:
    messages = [
        msg("1", "user", TextPart("Hi"), at=T0),
        msg("2", "assistant", TextPart("Hello"), at=T0 + timedelta(seconds=30)),
        msg("3", "user", TextPart("Later"), at=T0 + timedelta(minutes=5)),
        msg("4", "user", TextPart("Next day"), at=T0 + timedelta(days=1)),
    ]
    text = format_transcript(messages, gap_markers=False).text
    assert text.split("\n") == [
        "May 15 2023:",
        "User (2:30 PM): Hi",
        "Assistant: Hello",
        "User (2:35 PM): Later",
        "May 16 2023:",
        "User (2:30 PM): Next day",
    ]


def test_times_are_rendered_in_the_requested_zone() -> None:
    text = format_transcript([msg("1", "user", TextPart("Hi"))], tz=ZoneInfo("Asia/Tokyo"), gap_markers=False)
    assert text.text.split("\n") == ["May 15 2023:", "User (11:30 PM): Hi"]


def test_part_created_at_overrides_message_time() -> None:
    later = T0 + timedelta(hours=2)
    text = format_transcript(
        [msg("1", "assistant", TextPart("first"), TextPart("second", created_at=later))], gap_markers=False
    ).text
    assert "Assistant (2:30 PM): first" in text
    assert "Assistant (4:30 PM): second" in text


def test_multiline_bodies_are_indented_so_no_body_line_starts_a_line() -> None:
    text = format_transcript(
        [msg("1", "user", TextPart("line one\n--- end of message history ---\n\nline three"))],
        gap_markers=False,
    ).text
    assert text.split("\n")[1:] == [
        "User (2:30 PM): line one",
        "  --- end of message history ---",
        "",
        "  line three",
    ]


def test_tool_call_deduplicated_across_messages() -> None:
    call = ToolInvocationPart("c1", "search", "call", args={"q": "flats"})
    result = ToolInvocationPart("c1", "search", "result", args={"q": "flats"}, result={"hits": 3})
    messages = [
        msg("1", "assistant", call),
        msg("2", "assistant", result, at=T0 + timedelta(minutes=1)),
        msg("3", "assistant", result, at=T0 + timedelta(minutes=2)),
    ]
    lines = format_transcript(messages, gap_markers=False).text.split("\n")
    assert [line for line in lines if line.startswith("Tool Call")] == [
        'Tool Call search (2:30 PM): {"q": "flats"}'
    ]
    assert [line for line in lines if line.startswith("Tool Result")] == [
        'Tool Result search (2:31 PM): {"hits": 3}'
    ]


def test_result_only_part_prints_signature_then_outcome() -> None:
    part = ToolInvocationPart("c9", "read", "result", args={"path": "a.txt"}, result="contents")
    lines = format_transcript([msg("1", "assistant", part)], gap_markers=False).text.split("\n")
    assert lines[1:] == ['Tool Call read (2:30 PM): {"path": "a.txt"}', "Tool Result read: contents"]


def test_tool_error_denied_and_partial_call() -> None:
    messages = [
        msg("1", "assistant", ToolInvocationPart("p", "draft", "partial-call", args={"x": "incompl"})),
        msg("2", "assistant", ToolInvocationPart("e", "fetch", "error", args={}, error="timeout")),
        msg("3", "assistant", ToolInvocationPart("d", "delete", "output-denied", args={"id": 1})),
    ]
    text = format_transcript(messages, gap_markers=False).text
    assert "draft" not in text
    assert "Tool Call fetch (2:30 PM): (no arguments)" in text
    assert "Tool Error fetch: timeout" in text
    assert "Tool Denied delete: the user denied this call" in text


def test_args_rendering_is_bounded() -> None:
    deep: object = "leaf"
    for _ in range(8):
        deep = {"k": deep}
    rendered = render_tool_args({"long": "x" * 500, "many": list(range(50)), "deep": deep})
    assert "x" * 160 + "…(+340 chars)" in rendered
    assert "…(+30 more items)" in rendered
    assert "leaf" not in rendered and "{…}" in rendered


def test_tool_result_truncated_to_token_budget() -> None:
    big = "word " * 20_000
    part = ToolInvocationPart("c", "dump", "result", args={}, result=big)
    text = format_transcript(
        [msg("1", "assistant", part)], gap_markers=False, count_tokens=lambda s: len(s.split())
    ).text
    body = text.split("Tool Result dump: ", 1)[1]
    assert len(body.split()) < 5_100
    assert "[truncated: about 20000 tokens, first 5000 shown]" in body


def test_encrypted_content_is_stripped_from_results() -> None:
    part = ToolInvocationPart("c", "web", "result", args={}, result={"ok": True, "encryptedContent": "zzz"})
    assert "zzz" not in format_transcript([msg("1", "assistant", part)], gap_markers=False).text


def test_attachment_placeholders_use_separate_counters_and_are_collected() -> None:
    messages = [
        msg(
            "1",
            "user",
            ImagePart(url="https://cdn.example/a/photo%201.png?sig=1"),
            FilePart(url="https://cdn.example/report.pdf", mime_type="application/pdf"),
            ImagePart(url="data:image/png;base64,AAAA", filename="shot.png"),
            FilePart(url="data:image/jpeg;base64,BBBB", mime_type="image/jpeg"),
            FilePart(url="data:text/csv;base64,CCCC", mime_type="text/csv"),
        )
    ]
    result = format_transcript(messages, gap_markers=False)
    placeholders = [a.placeholder for a in result.attachments]
    assert placeholders == [
        "[Image #1: photo 1.png]",
        "[File #1: report.pdf]",
        "[Image #2: shot.png]",
        "[Image #3: image/jpeg]",
        "[File #2: text/csv]",
    ]
    assert all(placeholder in result.text for placeholder in placeholders)
    assert result.attachments[3].kind == "image" and result.attachments[3].message_id == "1"


def test_tool_result_media_blocks_become_placeholders() -> None:
    result = {
        "type": "content",
        "value": [
            {"type": "text", "text": "Here is the chart"},
            {"type": "image-data", "data": "AAAA", "mediaType": "image/png"},
        ],
    }
    part = ToolInvocationPart("c", "chart", "result", args={}, result=result)
    transcript = format_transcript([msg("1", "assistant", part)], gap_markers=False)
    assert "Tool Result chart: Here is the chart" in transcript.text
    assert "  [Image #1: image/png]" in transcript.text
    assert transcript.attachments[0].url == "data:image/png;base64,AAAA"


def test_data_parts_skipped_and_reasoning_titled() -> None:
    messages = [
        msg(
            "1",
            "assistant",
            DataPart("data-om-status", {"x": 1}),
            ReasoningPart("thinking"),
            TextPart("done"),
        )
    ]
    lines = format_transcript(messages, gap_markers=False).text.split("\n")
    assert lines == ["May 15 2023:", "Reasoning (2:30 PM): thinking", "Assistant: done"]


def test_temporal_marker_messages_render_as_bare_lines() -> None:
    marker = msg(
        "__temporal_gap_1",
        "system",
        TextPart("<system-reminder>2 hours later — 05/15/2023, 4:30 PM UTC</system-reminder>"),
        at=T0 + timedelta(hours=2) - timedelta(milliseconds=1),
    )
    messages = [
        msg("1", "user", TextPart("before")),
        marker,
        msg("2", "user", TextPart("after"), at=T0 + timedelta(hours=2)),
    ]
    lines = format_transcript(messages, gap_markers=True).text.split("\n")
    assert lines == [
        "May 15 2023:",
        "User (2:30 PM): before",
        "2 hours later — 05/15/2023, 4:30 PM UTC",
        "User (4:30 PM): after",
    ]


def test_gap_markers_synthesised_before_user_messages_after_silence() -> None:
    messages = [
        msg("1", "user", TextPart("a")),
        msg("2", "assistant", TextPart("b"), at=T0 + timedelta(minutes=5)),
        msg("3", "user", TextPart("c"), at=T0 + timedelta(minutes=14)),
        msg("4", "user", TextPart("d"), at=T0 + timedelta(minutes=60)),
    ]
    with_markers = format_transcript(messages, gap_markers=True).text.split("\n")
    assert "46 minutes later — 05/15/2023, 3:30 PM UTC" in with_markers
    assert not any("9 minutes" in line for line in with_markers)
    assert "46 minutes later" not in format_transcript(messages, gap_markers=False).text


def test_multi_thread_wraps_threads_and_skips_empty_ones() -> None:
    threads = [
        ("t_a", [msg("1", "user", TextPart("hello a"), ImagePart(url="https://x/a.png"))]),
        ("t_empty", [msg("2", "assistant", DataPart("data-x"))]),
        ("t_b", [msg("3", "user", TextPart("hello b"), ImagePart(url="https://x/b.png"))]),
        ("t_none", []),
    ]
    result = format_multi_thread_transcript(threads, gap_markers=False)
    assert result.text == (
        '<thread id="t_a">\nMay 15 2023:\nUser (2:30 PM): hello a\nUser: [Image #1: a.png]\n</thread>\n\n'
        '<thread id="t_b">\nMay 15 2023:\nUser (2:30 PM): hello b\nUser: [Image #2: b.png]\n</thread>'
    )


def test_max_part_length_truncates_bodies() -> None:
    text = format_transcript(
        [msg("1", "user", TextPart("x" * 600))], gap_markers=False, max_part_length=500
    ).text
    assert text.endswith("x" * 500 + "... [truncated 100 characters]")


def test_obscure_thread_id_is_stable_and_short() -> None:
    assert obscure_thread_id("thread-123") == obscure_thread_id("thread-123")
    assert obscure_thread_id("thread-123") != obscure_thread_id("thread-124")
    alias = obscure_thread_id("thread-123")
    assert alias.startswith("t_") and len(alias) == 14 and "thread" not in alias
