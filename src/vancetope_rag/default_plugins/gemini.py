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
from vancetope_rag.model_profiles import (
    EMPTY_PROFILE,
    TOKENIZER_CL100K,
    ModelProfile,
    known_profile,
    prefix_tokens,
    with_prefixes,
)

DEFAULT_MODEL = "gemini-embedding-001"


class GeminiProvider:
    """Gemini embeddings through LlamaIndex's ``GoogleGenAIEmbedding``; needs an API key."""

    name = "gemini"
    #: ``ai.embedding.apiKey`` is required (status says so before any call is made).
    needs_api_key = True

    def default_model(self) -> str:
        return DEFAULT_MODEL

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        key = require_api_key(settings)
        try:
            from llama_index.embeddings.google_genai import GoogleGenAIEmbedding
        except ImportError as exc:
            raise MissingDependencyError("the gemini embedding provider", "gemini") from exc
        embed = GoogleGenAIEmbedding(model_name=model, api_key=key)
        pinned = settings.pinned_profile
        if pinned is not None and pinned != EMPTY_PROFILE:
            profile = pinned
        else:  # new, or from before profiles (whose window was this same 2,048)
            profile = known_profile(model) or ModelProfile(2048, TOKENIZER_CL100K)
            if pinned is None:
                profile = profile.with_overrides(
                    max_input_tokens=settings.max_input_tokens,
                    query_prefix=settings.query_prefix,
                    document_prefix=settings.document_prefix,
                )
        tokenizer = llama_tokenizer()
        # A pinned RAG's dimension and a known model's are known; any other is learnt
        # with one call.
        dim = settings.dimension or profile.dimension or len(embed.get_text_embedding("probe"))
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=with_prefixes(embed, profile),
            max_input_tokens=profile.max_input_tokens,
            tokenizer=tokenizer,
            remote=True,
            profile=profile,
            prefix_tokens=prefix_tokens(profile, tokenizer),
        )


# tryfirst: a third-party plugin registering the same name replaces the built-in.
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(GeminiProvider())
