"""The ``gemini`` provider: Google's Gemini embedding models.

Needs ``pip install 'vancetope-rag[gemini]'``.
"""

from __future__ import annotations

from collections.abc import Callable

from vancetope_rag.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    LoadedModel,
    llama_tokenizer,
    require_api_key,
)
from vancetope_rag.errors import MissingDependencyError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.model_profiles import TOKENIZER_CL100K, ModelProfile, known_profile

DEFAULT_MODEL = "gemini-embedding-001"


class GeminiProvider:
    """Gemini embeddings through LlamaIndex's ``GoogleGenAIEmbedding``; needs an API key."""

    name = "gemini"

    def default_model(self) -> str:
        return DEFAULT_MODEL

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        key = require_api_key(settings)
        try:
            from llama_index.embeddings.google_genai import GoogleGenAIEmbedding
        except ImportError as exc:
            raise MissingDependencyError("the gemini embedding provider", "gemini") from exc
        embed = GoogleGenAIEmbedding(model_name=model, api_key=key)
        profile = known_profile(model) or ModelProfile(2048, TOKENIZER_CL100K)
        # A pinned RAG's dimension and a known model's are known; any other is learnt
        # with one call.
        dim = settings.dimension or profile.dimension or len(embed.get_text_embedding("probe"))
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed,
            max_input_tokens=profile.max_input_tokens,
            tokenizer=llama_tokenizer(),
            remote=True,
            profile=profile,
        )


# tryfirst: a third-party plugin registering the same name replaces the built-in.
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(GeminiProvider())
