"""Test-only embedding providers (real computations, instrumented)."""

from __future__ import annotations

import threading
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from vancetope_rag.default_plugins.hashing import HashingEmbedding
from vancetope_rag.embeddings import EmbeddingRegistry, EmbeddingSettings, LoadedModel
from vancetope_rag.extract import ExtractorRegistry
from vancetope_rag.plugins import get_plugin_manager


class CountingEmbedding(BaseEmbedding):
    """Feature hashing, counting every text it is asked to embed."""

    _inner: HashingEmbedding = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _texts: int = PrivateAttr(default=0)
    _calls: int = PrivateAttr(default=0)

    def __init__(self, dimension: int = 64, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._inner = HashingEmbedding(dimension=dimension)

    @property
    def texts(self) -> int:
        return self._texts

    @property
    def calls(self) -> int:
        return self._calls

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._inner.get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        with self._lock:
            self._texts += len(texts)
            self._calls += 1
        return [self._inner.get_text_embedding(t) for t in texts]


class CountingProvider:
    """Provider ``counting``; ``dimension_by_base_url`` lets a test change the dimension."""

    name = "counting"

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.model = CountingEmbedding(dimension=dimension)

    def default_model(self) -> str:
        return "counting-model"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        dim = self.dimension
        if settings.base_url and settings.base_url.rstrip("/").endswith("/dim32"):
            dim = 32
        embed = self.model if dim == self.dimension else CountingEmbedding(dimension=dim)
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed,
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


def registry_with(*providers: Any) -> EmbeddingRegistry:
    """The default providers (from the default plugins) plus ``providers``."""
    reg = EmbeddingRegistry()
    get_plugin_manager(load_entrypoints=False).hook.register_embedding_providers(
        register=reg.register
    )
    for p in providers:
        reg.register(p)
    return reg


def default_extractors() -> ExtractorRegistry:
    """The extractors the default plugins register, built as the app builds its registry."""
    reg = ExtractorRegistry()
    get_plugin_manager(load_entrypoints=False).hook.register_extractors(register=reg.register)
    return reg
