"""Which attachments reach the Observer model (``observation.observeAttachments``).

The transcript always keeps its ``[Image #1: …]`` / ``[File #1: …]`` placeholders; this decides which of the
files themselves are sent along with it. ``True`` sends every one, ``False`` none, a list of mime patterns
those whose type matches one (case-insensitive: ``"application/pdf"``, ``"image/*"``, ``"*"``), and
``"auto"`` sends every one when the Observer model takes images and files, and none when it reads text
only. A model om has no capability data for is sent them, as Mastra does when its registry has no entry.
"""

from __future__ import annotations

import mimetypes
import re
import urllib.parse
from collections.abc import Sequence

from om_core.domain.transcript import TranscriptAttachment

__all__ = ["accepts_attachments", "attachment_mime_type", "forwarded_attachments", "mime_allowed"]

_DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)[;,]", re.IGNORECASE)

# (provider, model-id pattern, takes images/files), first match wins. Mastra asks the models.dev registry;
# these are the models of the providers om calls, by what their APIs accept as input.
_CAPABILITIES: tuple[tuple[str, re.Pattern[str], bool], ...] = tuple(
    (provider, re.compile(pattern), multimodal)
    for provider, pattern, multimodal in (
        # the local model reads the transcript's text and nothing else
        ("om-local", r".*", False),
        ("google", r"^gemini-", True),
        ("anthropic", r"^claude-(instant|2)", False),
        ("anthropic", r"^claude-", True),
        ("openai", r"^(gpt-3\.5|o1-mini|o3-mini)", False),
        ("openai", r"^(gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-5|o1|o3|o4)", True),
        ("deepseek", r".*", False),
        ("xai", r"^grok-(4|.*vision)", True),
        ("xai", r"^grok-", False),
        ("groq", r"^(meta-llama/)?llama-4-", True),
        ("groq", r".*", False),
    )
)


def accepts_attachments(model: str) -> bool | None:
    """Whether ``provider/model`` takes image and file input; ``None`` when om has no data for it."""
    provider, _, model_id = model.lower().partition("/")
    for known_provider, pattern, multimodal in _CAPABILITIES:
        if provider == known_provider and pattern.match(model_id):
            return multimodal
    return None


def attachment_mime_type(attachment: TranscriptAttachment) -> str | None:
    """The attachment's mime type: as given, else from a ``data:`` URL, else guessed from the file name or
    the URL's path; ``None`` when none of them tells."""
    if attachment.mime_type:
        return attachment.mime_type.lower()
    match = _DATA_URI.match(attachment.url)
    if match:
        return match["mime"].lower()
    for name in (attachment.filename, urllib.parse.urlsplit(attachment.url).path):
        if name:
            guessed, _ = mimetypes.guess_type(name, strict=False)
            if guessed:
                return guessed.lower()
    return None


def mime_allowed(attachment: TranscriptAttachment, patterns: Sequence[str]) -> bool:
    """Whether the attachment's type matches one of the (lowercase) patterns. An image whose exact type
    cannot be told still matches ``image/*``; any attachment matches ``*``."""
    mime = attachment_mime_type(attachment)
    family = mime.partition("/")[0] if mime else ("image" if attachment.kind == "image" else None)
    for pattern in patterns:
        if pattern == "*" or pattern == mime:
            return True
        if pattern.endswith("/*") and family is not None and pattern[:-2] == family:
            return True
    return False


def forwarded_attachments(
    policy: bool | str | Sequence[str],
    attachments: Sequence[TranscriptAttachment],
    observer_model: str,
) -> tuple[TranscriptAttachment, ...]:
    """The attachments to send with the transcript to ``observer_model`` under ``policy``."""
    if policy is True:
        return tuple(attachments)
    if policy is False:
        return ()
    if policy == "auto":
        return () if accepts_attachments(observer_model) is False else tuple(attachments)
    if isinstance(policy, str):
        raise ValueError(f"unknown observeAttachments policy {policy!r}")
    return tuple(a for a in attachments if mime_allowed(a, policy))
