"""The memory profile and the filler messages of the worker tests and benchmarks."""

from __future__ import annotations

from typing import Any

_WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
)


def memory_profile(latency_ms: int = 0, **observation: Any) -> dict[str, Any]:
    """Small budgets, the local model at a latency, and no reflection (a synchronous reflection would be a
    second reason for a read to block)."""
    return {
        "model": "om-local/extractive",
        "observation": {
            "messageTokens": 600,
            "bufferTokens": 0.2,
            "bufferActivation": 0.8,
            "blockAfter": 1.5,
            "providerOptions": {"omLocal": {"latencyMs": latency_ms, "seed": 1}},
            **observation,
        },
        "reflection": {"observationTokens": 60_000},
    }


def filler_message(prefix: str, index: int, role: str = "user", words: int = 45) -> dict[str, Any]:
    """A message of ``words`` filler words, id ``<prefix>-<index>``."""
    text = " ".join(_WORDS[(index + i) % len(_WORDS)] for i in range(words))
    return {
        "id": f"{prefix}-{index}",
        "role": role,
        "parts": [{"type": "text", "text": f"Note {index}: I met Dana {index} times. {text}."}],
    }
