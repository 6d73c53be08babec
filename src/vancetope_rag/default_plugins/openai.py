"""The ``openai`` provider: OpenAI or any OpenAI-compatible endpoint through ``baseUrl``.

Ollama, TEI, vLLM and OpenRouter speak the same API. Needs
``pip install 'vancetope-rag[openai]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from vancetope_rag.default_plugins import server_tokens
from vancetope_rag.embeddings import (
    EmbeddingProvider,
    EmbeddingSettings,
    LoadedModel,
    Tokenizer,
    llama_tokenizer,
    require_api_key,
)
from vancetope_rag.errors import EmbeddingConfigError, EmbeddingError, MissingDependencyError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.model_profiles import (
    EMPTY_PROFILE,
    SERVER_COUNTS,
    TOKENIZER_CL100K,
    TOKENIZER_ESTIMATE,
    TOKENIZER_FILE,
    ModelProfile,
    describe_counting,
    estimate_tokens,
    fallback_profile,
    known_profile,
    prefix_tokens,
    scaled_estimate,
    with_prefixes,
)
from vancetope_rag.secrets import MASK, get_logger, redact

log = get_logger(__name__)


def typed_embedding(base: type[Any], types: tuple[str, str], **kwargs: Any) -> BaseEmbedding:
    """An ``OpenAIEmbedding`` (``base``) that sends ``input_type`` — ``types[0]`` with queries,
    ``types[1]`` with documents — for servers that add a model's prefixes themselves."""
    from llama_index.embeddings.openai import base as oai

    class TypedOpenAIEmbedding(base):  # type: ignore[misc]
        def _extra(self, kind: str) -> dict[str, Any]:
            extra = dict(self.additional_kwargs)
            extra["extra_body"] = {**extra.get("extra_body", {}), "input_type": kind}
            return extra

        def _get_query_embedding(self, query: str) -> list[float]:
            return oai.get_embedding(  # type: ignore[no-any-return]
                self._get_client(), query, engine=self._query_engine, **self._extra(types[0])
            )

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return await oai.aget_embedding(  # type: ignore[no-any-return]
                self._get_aclient(), query, engine=self._query_engine, **self._extra(types[0])
            )

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embeddings([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return oai.get_embeddings(  # type: ignore[no-any-return]
                self._get_client(), texts, engine=self._text_engine, **self._extra(types[1])
            )

        async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return await oai.aget_embeddings(  # type: ignore[no-any-return]
                self._get_aclient(), texts, engine=self._text_engine, **self._extra(types[1])
            )

    embed: BaseEmbedding = TypedOpenAIEmbedding(**kwargs)
    return embed


def _takes_input_type(embed: BaseEmbedding, settings: EmbeddingSettings, key: str) -> bool:
    """Whether the server embeds a text differently by ``input_type`` (one short call each):
    it then adds the prefixes itself, and sending them as text too would double them. A
    server that refuses the field (400/422) takes the prefixes as text; any other failure is
    the server's and is raised, so an outage never switches a model to the other form."""
    import openai

    try:
        query = embed.get_query_embedding("input type probe")
        document = embed.get_text_embedding("input type probe")
    except (openai.BadRequestError, openai.UnprocessableEntityError):
        return False
    except Exception as exc:
        raise _probe_failed(exc, settings, embed.model_name, key) from None
    return any(abs(a - b) > 1e-6 for a, b in zip(query, document, strict=False))


def _probe_failed(
    exc: Exception, settings: EmbeddingSettings, model: str, key: str
) -> EmbeddingError:
    """A test call's failure (rejected key, server down, unknown model) as an EmbeddingError —
    a RagError the lifecycle, the indexer, a refused rebuild and the UI show — that says what
    to check first, the exception only at the end; it never holds the key (some servers
    quote it back)."""
    import openai

    detail = redact(f"{type(exc).__name__}: {exc}").replace(key, MASK)
    where = settings.base_url or "api.openai.com"
    if isinstance(exc, openai.APIConnectionError):  # refused, unresolved, timed out
        first = (
            f"could not reach the embedding server at {where}: check that it runs and that "
            "ai.embedding.baseUrl is right"
        )
    elif isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        first = f"the embedding server at {where} refused the key: check ai.embedding.apiKey"
    elif isinstance(exc, openai.NotFoundError):
        first = (
            f"the embedding server at {where} does not know model {model!r}: check "
            "ai.embedding.model (and ai.embedding.baseUrl)"
        )
    else:
        first = (
            f"the embedding server at {where} failed: check ai.embedding.baseUrl, "
            "ai.embedding.model and ai.embedding.apiKey"
        )
    return EmbeddingError(f"{first} (a test call for embedding model {model!r}: {detail})")


class OpenAIProvider:
    """OpenAI or any OpenAI-compatible endpoint (Ollama, TEI, vLLM, OpenRouter) via baseUrl."""

    name = "openai"
    #: ``ai.embedding.apiKey`` is required (status says so before any call is made).
    needs_api_key = True

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
        profile = self.profile(settings, model)
        embed: BaseEmbedding = OpenAIEmbedding(**kwargs)
        if profile.input_types is not None:
            candidate = typed_embedding(OpenAIEmbedding, profile.input_types, **kwargs)
            # a pinned profile says whether the server takes input_type: never probed again
            pinned = settings.pinned_profile is not None
            if pinned or (settings.base_url and _takes_input_type(candidate, settings, key)):
                embed = candidate
            else:
                profile = replace(profile, input_types=None)
        typed = profile.input_types is not None
        dim = (
            settings.dimension  # pinned by a RAG: never probed again
            or profile.dimension
            or self._probe_dimension(embed, settings, model, key)
        )
        if settings.pinned_profile is None and settings.tokenizer:
            named = server_tokens.tokenizer_path(settings.tokenizer)
            profile = replace(profile, tokenizer=TOKENIZER_FILE + named, token_ratio=None)
        elif settings.pinned_profile is None and settings.base_url:
            profile = self._count_with_server(profile, embed, settings, model, key)
        tokenizer: Tokenizer = estimate_tokens
        if profile.tokenizer.startswith(TOKENIZER_FILE):
            tokenizer = self._pinned_file(profile, settings)
        elif profile.tokenizer == TOKENIZER_CL100K:
            tokenizer = llama_tokenizer()
        elif profile.tokenizer in SERVER_COUNTS and profile.token_ratio:
            tokenizer = scaled_estimate(profile.token_ratio)
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed if typed else with_prefixes(embed, profile),
            max_input_tokens=profile.max_input_tokens,
            tokenizer=tokenizer,
            special_tokens=profile.special_tokens,
            remote=True,
            profile=profile,
            prefix_tokens=prefix_tokens(profile, tokenizer),
            sends_input_type=typed,
        )

    def profile(self, settings: EmbeddingSettings, model: str) -> ModelProfile:
        """The RAG's pinned profile (a RAG from before profiles: the old 8,191 cl100k window,
        no prefixes); for a new RAG the shipped profile of ``model``, else the safe one for
        its endpoint, with the tenant's or project's overrides."""
        pinned = settings.pinned_profile
        if pinned == EMPTY_PROFILE:
            return ModelProfile(8191, TOKENIZER_CL100K)
        if pinned is not None:
            return pinned
        shipped = known_profile(model) or fallback_profile(settings.base_url)
        return shipped.with_overrides(
            max_input_tokens=settings.max_input_tokens,
            query_prefix=settings.query_prefix,
            document_prefix=settings.document_prefix,
        )

    def token_counting(self, pinned: ModelProfile) -> str:
        """What counts the chunks of a RAG that pinned ``pinned`` (status)."""
        if pinned == EMPTY_PROFILE:
            return describe_counting(ModelProfile(8191, TOKENIZER_CL100K))
        return describe_counting(pinned)

    @staticmethod
    def _pinned_file(profile: ModelProfile, settings: EmbeddingSettings) -> Tokenizer:
        """The tokenizer file a profile names; for a RAG that pinned it and lost the file,
        the estimate (smaller chunks, never over the window) with a warning."""
        path = profile.tokenizer.removeprefix(TOKENIZER_FILE)
        try:
            return server_tokens.file_tokenizer(path)
        except EmbeddingConfigError:
            if settings.pinned_profile is None:
                raise
            log.warning("the RAG's tokenizer %s cannot be read: chunks sized by the estimate", path)
            return estimate_tokens

    @staticmethod
    def _count_with_server(
        profile: ModelProfile,
        embed: BaseEmbedding,
        settings: EmbeddingSettings,
        model: str,
        key: str,
    ) -> ModelProfile:
        """A new RAG's profile counting the server's tokens (see :mod:`.server_tokens`)
        where the shipped one would estimate them and the server tells its counts."""
        if profile.tokenizer != TOKENIZER_ESTIMATE or not settings.base_url:
            return profile
        typed = profile.input_types is not None
        found = server_tokens.measure(
            base_url=settings.base_url,
            api_key=key,
            client=embed._get_client(),  # type: ignore[attr-defined]
            model=model,
            input_type=profile.input_types[1] if profile.input_types is not None else None,
            prefix="" if typed else profile.document_prefix,
            special_tokens=profile.special_tokens,
        )
        if found is None:
            return profile
        return replace(profile, tokenizer=found[0], token_ratio=found[1])

    @staticmethod
    def _probe_dimension(
        embed: BaseEmbedding, settings: EmbeddingSettings, model: str, key: str
    ) -> int:
        """One call to learn an unknown model's dimension (:func:`_probe_failed` on failure)."""
        try:
            return len(embed.get_text_embedding("dimension probe"))
        except Exception as exc:  # the cause's message may quote the key: not chained
            raise _probe_failed(exc, settings, model, key) from None


# tryfirst: a third-party plugin registering the same name replaces the built-in.
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(OpenAIProvider())
