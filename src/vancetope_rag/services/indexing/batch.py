"""What one indexing pass did (:class:`BatchResult`), the chunk fingerprint and the retry
back-off: shared by the live indexer (:mod:`.indexer`) and a rebuild's shadow indexer
(:mod:`vancetope_rag.services.rebuilds.shadow_indexer`), below both so neither imports the
other's services."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import RagRecord
from vancetope_rag.domain.wire import camel_json
from vancetope_rag.services.indexing.sources import SourceText


@dataclass
class BatchResult:
    indexed: int = 0
    removed: int = 0
    failed: int = 0
    lost_lease: int = 0
    unchanged: int = 0
    chunks: int = 0
    embedded_texts: int = 0
    cache_hits: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    #: Failures of the store itself (not of a document), and the last one's message.
    store_errors: int = 0
    store_error: str | None = None
    #: Documents of the batch whose claim was finished or given back.
    handled: set[str] = field(default_factory=set)
    #: Documents given back untouched because their provider is down (no attempt spent).
    paused: int = 0

    def add(self, other: BatchResult) -> None:
        self.indexed += other.indexed
        self.removed += other.removed
        self.failed += other.failed
        self.lost_lease += other.lost_lease
        self.unchanged += other.unchanged
        self.chunks += other.chunks
        self.embedded_texts += other.embedded_texts
        self.cache_hits += other.cache_hits
        self.errors.update(other.errors)
        self.store_errors += other.store_errors
        self.store_error = other.store_error or self.store_error
        self.handled |= other.handled
        self.paused += other.paused

    @property
    def progressed(self) -> bool:
        """Some document got done (indexed, removed or confirmed unchanged)."""
        return bool(self.indexed or self.removed or self.unchanged)

    def to_json(self) -> dict[str, object]:
        return camel_json(
            self, "indexed", "removed", "failed", "chunks", "embedded_texts", "cache_hits"
        )


def fingerprint(rag: RagRecord, parts: Sequence[SourceText]) -> str:
    """What a document's chunks are built from: the RAG (and its pinned model and chunking)
    and every text with its kind and path. Equal fingerprints → identical chunks."""
    h = hashlib.sha256()
    for item in (
        rag.id,
        rag.embedding_provider,
        rag.embedding_model,
        str(rag.chunk_size),
        str(rag.chunk_overlap),
    ):
        h.update(item.encode() + b"\x00")
    for part in parts:
        meta = json.dumps(dict(part.metadata), sort_keys=True, default=str)
        for item in (part.kind, part.path or "", meta, part.text):
            h.update(item.encode() + b"\x00")
        h.update(b"\x01")
    return h.hexdigest()


def retry_delay(config: EngineConfig, attempts: int) -> float:
    """Exponential backoff with jitter, capped (the indexer's and a rebuild's retries)."""
    base = config.retry_backoff_s * (2 ** max(0, attempts))
    capped: float = min(config.retry_backoff_max_s, base)
    return capped * random.uniform(0.8, 1.2)
