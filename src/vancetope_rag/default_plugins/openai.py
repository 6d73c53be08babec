"""The ``openai`` provider: OpenAI or any OpenAI-compatible endpoint through ``baseUrl``.

Ollama, TEI, vLLM and OpenRouter speak the same API. Needs
``pip install 'vancetope-rag[openai]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from vancetope_rag.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    LoadedModel,
    llama_tokenizer,
    require_api_key,
)
from vancetope_rag.errors import EmbeddingError, MissingDependencyError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.secrets import MASK, redact

#: Dimensions of OpenAI's own models; other models' dimension is probed with one call.
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIProvider:
    """OpenAI or any OpenAI-compatible endpoint (Ollama, TEI, vLLM, OpenRouter) via baseUrl."""

    name = "openai"

    def default_model(self) -> str:
        return "text-embedding-3-small"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        key = require_api_key(settings)
        try:
            from llama_index.embeddings.openai import OpenAIEmbedding
        except ImportError as exc:
            raise MissingDependencyError("the openai embedding provider", "openai") from exc
        # The client and LlamaIndex each retry ``max_retries`` times (nested, with backoff,
        # sleeping out any Retry-After): the default 10 blocks a failing call for minutes.
        # No retry here: the endpoint's circuit (services/providers) pauses and retries the
        # whole endpoint, honouring Retry-After, and a chat turn fails fast meanwhile.
        kwargs: dict[str, Any] = {"model_name": model, "api_key": key, "max_retries": 0}
        if settings.base_url:
            kwargs["api_base"] = settings.base_url
        embed = OpenAIEmbedding(**kwargs)
        dim = (
            settings.dimension  # pinned by a RAG: never probed again
            or KNOWN_DIMENSIONS.get(model)
            or self._probe_dimension(embed, settings, model, key)
        )
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed,
            max_input_tokens=8191,
            tokenizer=llama_tokenizer(),
            remote=True,
        )

    @staticmethod
    def _probe_dimension(
        embed: BaseEmbedding, settings: EmbeddingSettings, model: str, key: str
    ) -> int:
        """One call to learn an unknown model's dimension. Its failure (rejected key, server
        down, unknown model) becomes an EmbeddingError — a RagError the lifecycle and indexer
        report — whose message never holds the key (some servers quote it back)."""
        try:
            return len(embed.get_text_embedding("dimension probe"))
        except Exception as exc:
            detail = redact(f"{type(exc).__name__}: {exc}").replace(key, MASK)
            where = settings.base_url or "api.openai.com"
            raise EmbeddingError(
                f"the dimension probe of embedding model {model!r} at {where} failed: {detail}; "
                "check ai.embedding.apiKey, ai.embedding.baseUrl and ai.embedding.model"
            ) from None  # the cause's message may quote the key


# tryfirst: a third-party plugin registering the same name replaces the built-in.
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(OpenAIProvider())
