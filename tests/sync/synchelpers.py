"""Helpers of the project-RAG sync tests: probe embedding providers and store read-outs."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from llama_index.core.base.embeddings.base import Embedding
from pydantic import PrivateAttr

from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins.hashing import HashingEmbedding, HashingProvider
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Document, Hit, RagRecord
from vancetope_rag.embeddings import EmbeddingRegistry, EmbeddingSettings, LoadedModel
from vancetope_rag.store.types import RagScope

T, P = "t1", "p1"

#: Called with ("text" | "query", texts) before a probe embedding answers; may raise.
Probe = Callable[[str, list[str]], None]


class ProbeEmbedding(HashingEmbedding):
    """The lexical hashing embedder with a hook that sees (and may fail) every model call."""

    _probe: Probe = PrivateAttr()

    def __init__(self, probe: Probe, dimension: int) -> None:
        super().__init__(dimension=dimension, embed_batch_size=256)
        self._probe = probe

    @classmethod
    def class_name(cls) -> str:
        return "ProbeEmbedding"

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        self._probe("text", list(texts))
        return [self._vector(t) for t in texts]

    def _get_text_embedding(self, text: str) -> Embedding:
        self._probe("text", [text])
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> Embedding:
        self._probe("query", [query])
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)


@dataclass
class ProbeProvider:
    """An embedding provider (any name) whose model calls go through ``probe``."""

    name: str
    probe: Probe
    dimension: int = 64

    def default_model(self) -> str:
        return f"{self.name}-v1"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=self.dimension,
            embed_model=ProbeEmbedding(self.probe, self.dimension),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


@dataclass
class CallLog:
    """Records every model call: ``calls`` holds (kind, texts)."""

    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, kind: str, texts: list[str]) -> None:
        with self._lock:
            self.calls.append((kind, list(texts)))

    @property
    def text_calls(self) -> list[list[str]]:
        return [texts for kind, texts in self.calls if kind == "text"]

    @property
    def embedded(self) -> list[str]:
        return [t for texts in self.text_calls for t in texts]

    def clear(self) -> None:
        self.calls.clear()


class Flaky(CallLog):
    """Fails a share of the model calls at random (seeded), like a shaky network."""

    def __init__(self, rate: float, seed: int = 7) -> None:
        super().__init__()
        self.rate = rate
        self.rng = random.Random(seed)
        self.failures = 0

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if self.rng.random() < self.rate:
            self.failures += 1
            raise ConnectionError("simulated network failure (connection reset by peer)")


class Poison(CallLog):
    """Fails every call whose batch holds a text containing ``marker``."""

    message = "provider rejected the input: unsupported token sequence"

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if any(self.marker in t for t in texts):
            raise RuntimeError(self.message)


class FailFirst(CallLog):
    """Fails the first ``n`` text calls with ``error``, then answers."""

    def __init__(self, n: int, error: Exception) -> None:
        super().__init__()
        self.left = n
        self.error = error

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if kind == "text" and self.left > 0:
            self.left -= 1
            raise self.error


def registry(*providers: object) -> EmbeddingRegistry:
    """A registry with the built-in ``hashing`` provider plus ``providers``."""
    reg = EmbeddingRegistry()
    reg.register(HashingProvider())
    for p in providers:
        reg.register(p)  # type: ignore[arg-type]
    return reg


# -- read-outs ---------------------------------------------------------------------------------


def default_rag(app: RagApp, tenant: str = T, project: str = P) -> RagRecord:
    rag = app.store.control.find_rag(tenant, project, DEFAULT_RAG_NAME)
    assert rag is not None, f"no {DEFAULT_RAG_NAME} RAG in {tenant}/{project}"
    return rag


def chunks(app: RagApp, rag: RagRecord, source_ref: str | None = None) -> list[Hit]:
    """Every stored chunk of ``rag`` (of one document when ``source_ref`` is given)."""
    filters = {"sourceRef": source_ref} if source_ref is not None else None
    return app.store.chunks.get_chunks(RagScope.of(rag), filters=filters)


def chunk_count(app: RagApp, rag: RagRecord) -> int:
    return app.store.chunks.count_chunks(RagScope.of(rag))


def doc(app: RagApp, doc_id: str, tenant: str = T, project: str = P) -> Document:
    return app.documents.get(tenant, project, doc_id)


def states(app: RagApp, tenant: str = T, project: str = P) -> dict[str, int]:
    return {k: v for k, v in app.store.control.document_state_counts(tenant, project).items() if v}


def ticks_until_idle(app: RagApp, max_ticks: int = 500) -> int:
    """Tick (no sleeps) until a tick claims nothing; returns the number of claiming ticks."""
    n = 0
    while app.scheduler.tick().claimed:
        n += 1
        assert n < max_ticks, "indexer never went idle"
    return n
