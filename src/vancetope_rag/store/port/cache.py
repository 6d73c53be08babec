"""The store port of the embedding cache: vectors by model and text hash, shared by every
tenant. Re-exported by :mod:`.port`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class EmbeddingCache(Protocol):
    """Embeddings already computed, keyed by model key and text hash."""

    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]:
        """The cached vectors of those ``text_hashes`` that are cached (others left out)."""
        ...

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        """Cache vectors by text hash; an entry already cached stays (first writer wins)."""
        ...

    def scan_cached_embeddings(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str, list[float]]]:
        """Up to ``limit`` cached entries ``(model_key, text_hash, vector)`` ordered by model key
        then text hash, starting after the key ``after`` (exclusive): pages through the whole
        cache with bounded memory (a copy to another store)."""
        ...
