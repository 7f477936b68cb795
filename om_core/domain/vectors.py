"""Ranking embeddings by cosine similarity (pure; the vector index keeps a few thousand groups at most)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0 for a zero vector or vectors of different lengths (another embedder's)."""
    if len(a) != len(b):
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def nearest(
    query: Sequence[float], candidates: Sequence[tuple[T, Sequence[float]]], k: int
) -> list[tuple[T, float]]:
    """The ``k`` candidates most similar to ``query``, best first; ties keep the candidates' order."""
    scored = [(item, cosine(query, vector)) for item, vector in candidates]
    ranked = sorted(enumerate(scored), key=lambda pair: (-pair[1][1], pair[0]))
    return [pair for _, pair in ranked[:k]]
