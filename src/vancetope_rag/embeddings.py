"""Embedding providers as LlamaIndex ``BaseEmbedding``s: registry, pinning, kill switch, cache.

``ai.embedding.provider`` names a provider in the :class:`EmbeddingRegistry`, or ``none`` (RAG
off for the tenant). Every provider comes from the ``register_embedding_providers`` hook: the
built-in ones (``embedded``, ``openai``, ``gemini``, ``hashing``) are default plugins in
:mod:`vancetope_rag.default_plugins`, registered exactly like third-party ones. This module
holds what they share: the :class:`EmbeddingProvider` protocol, :class:`LoadedModel`, the
registry, the embedding cache wrapper and the pinned-dimension check.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from vancetope_rag.errors import (
    DimensionMismatchError,
    EmbeddingConfigError,
    EmbeddingDisabledError,
)
from vancetope_rag.model_profiles import ModelProfile, profile_to_json
from vancetope_rag.provider_table import PROVIDER_NONE as PROVIDER_NONE
from vancetope_rag.provider_table import ProviderTable, key_digest

Tokenizer = Callable[[str], Sequence[Any]]


@dataclass(frozen=True)
class EmbeddingSettings:
    """The effective ``ai.embedding.*`` settings of a project (cascade already applied)."""

    provider: str = PROVIDER_NONE
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed
    base_url: str | None = None
    #: The dimension a RAG pinned: a provider that would learn it with a call takes it
    #: instead (a pinned RAG is never probed again; a wrong answer shows at the first call).
    dimension: int | None = None
    #: The profile a RAG pinned (:data:`EMPTY_PROFILE` for one created before profiles): the
    #: provider uses it as it is. None for a new RAG: the shipped profile, with the overrides.
    pinned_profile: ModelProfile | None = None
    #: ``ai.embedding.maxInputTokens`` / ``.queryPrefix`` / ``.documentPrefix`` (None: the
    #: model's own).
    max_input_tokens: int | None = None
    query_prefix: str | None = None
    document_prefix: str | None = None
    #: ``ai.embedding.tokenizer``: a local tokenizer.json of the model (None: the server's
    #: counts, else the estimate).
    tokenizer: str | None = None

    @property
    def enabled(self) -> bool:
        return self.provider != PROVIDER_NONE


@dataclass(frozen=True)
class LoadedModel:
    """A ready embedding model and the facts a RAG pins and the splitter needs."""

    provider: str
    model: str
    dimension: int
    embed_model: BaseEmbedding
    #: Tokens the model reads per input, special tokens included.
    max_input_tokens: int
    #: Counts the model's own tokens of a text (special tokens excluded).
    tokenizer: Tokenizer
    #: Tokens the model adds around every input (``[CLS]``/``[SEP]`` for BERT models).
    special_tokens: int = 0
    #: Called over the network (HTTP): circuits and pacing apply; in-process models drain
    #: as fast as they compute.
    remote: bool = False
    #: What the provider knows of the model (prefixes, ``input_type``, window).
    profile: ModelProfile | None = None
    #: Tokens of the prefix put before every input (by us or by the server).
    prefix_tokens: int = 0
    #: The profile's ``input_type`` values reach the server (it adds the prefixes itself).
    sends_input_type: bool = False

    @property
    def cache_key(self) -> str:
        key = f"{self.provider}:{self.model}:{self.dimension}"
        p = self.profile
        if p is None or not p.has_prefixes:
            return key  # the vectors of a model without prefixes, as before profiles
        how = "type" if self.sends_input_type else "text"
        mark = text_hash(f"{how}\0{p.query_prefix}\0{p.document_prefix}")[:12]
        return f"{key}:{mark}"

    @property
    def max_chunk_tokens(self) -> int:
        """The longest chunk (in the model's tokens) the model reads without truncation."""
        return self.max_input_tokens - self.special_tokens - self.prefix_tokens

    def pinned_profile(self) -> str:
        """The profile a RAG created with this model pins (JSON; see ``profile_to_json``)."""
        if self.profile is None:
            return "{}"
        return profile_to_json(self.profile)

    def default_chunking(self) -> tuple[int, int]:
        """(chunk_size, chunk_overlap) in model tokens that fit the input window."""
        size = max(32, self.max_chunk_tokens - 8)  # margin: splitter counts are sums of parts
        size = min(size, 1024)
        return size, min(64, size // 8)


class EmbeddingProvider(Protocol):
    """What a provider plugin hands to ``register_embedding_providers``.

    Attributes:
        name: The value of ``ai.embedding.provider`` that selects it (not ``none``).
    """

    name: str

    def default_model(self) -> str:
        """The model used when ``ai.embedding.model`` is unset."""
        ...

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        """Build the model (the registry caches the result per settings and model).

        Raises:
            EmbeddingConfigError: Bad settings (missing key, unknown model); no secret in it.
            MissingDependencyError: The provider's extra is not installed.
        """
        ...


# -- helpers for providers ----------------------------------------------------------------


def missing_api_key(settings: EmbeddingSettings) -> str | None:
    """What to do when the settings hold no API key (None: they hold one)."""
    if settings.api_key and settings.api_key.strip():
        return None
    return (
        f"ai.embedding.apiKey is required for provider {settings.provider!r} "
        "(for keyless OpenAI-compatible servers such as Ollama or TEI set any placeholder); "
        "set it with: vancetope-rag settings set ai.embedding.apiKey <key>"
    )


def require_api_key(settings: EmbeddingSettings) -> str:
    """The settings' API key, or an :class:`EmbeddingConfigError` that says how to set one."""
    missing = missing_api_key(settings)
    if missing is not None or settings.api_key is None:
        raise EmbeddingConfigError(missing or "")
    return settings.api_key


def llama_tokenizer() -> Tokenizer:
    """LlamaIndex's default tokenizer (tiktoken), for models whose own tokenizer is remote."""
    from llama_index.core.utils import get_tokenizer

    fn: Tokenizer = get_tokenizer()
    return fn


# -- the cache wrapper ---------------------------------------------------------------------


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache(Protocol):
    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]: ...

    def put_cached_embeddings(self, model_key: str, items: Any) -> None: ...


class CachedEmbedding(BaseEmbedding):
    """Wraps a pinned model: text already embedded with it is read from the store's cache.

    Query embeddings are not cached (chat messages rarely repeat and would fill the cache).
    ``embedded_texts`` and ``cache_hits`` count what this instance did; ``on_call``, when
    given, hears of every call to the model: its duration and whether it succeeded.
    """

    _inner: BaseEmbedding = PrivateAttr()
    _cache: EmbeddingCache = PrivateAttr()
    _key: str = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _embedded: int = PrivateAttr(default=0)
    _hits: int = PrivateAttr(default=0)
    _on_call: Callable[[float, bool], None] | None = PrivateAttr(default=None)
    _call: Callable[[list[str]], list[Embedding]] | None = PrivateAttr(default=None)

    def __init__(
        self,
        inner: BaseEmbedding,
        cache: EmbeddingCache,
        cache_key: str,
        on_call: Callable[[float, bool], None] | None = None,
        call: Callable[[list[str]], list[Embedding]] | None = None,
    ) -> None:
        """``call``, when given, embeds the texts the cache lacks instead of the inner
        model's batch call (the service's paced and guarded path to a remote provider)."""
        super().__init__(model_name=inner.model_name, embed_batch_size=2048)
        self._inner = inner
        self._cache = cache
        self._key = cache_key
        self._on_call = on_call
        self._call = call

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await self._inner.aget_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        hashes = [text_hash(t) for t in texts]
        found = self._cache.get_cached_embeddings(self._key, hashes)
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts, strict=True):
            if h not in found and h not in missing:
                missing[h] = t
        if missing:
            started, ok = time.perf_counter(), False
            try:
                todo = list(missing.values())
                vectors = (
                    self._call(todo)
                    if self._call is not None
                    else self._inner.get_text_embedding_batch(todo)
                )
                ok = True
            finally:
                if self._on_call is not None:
                    self._on_call(time.perf_counter() - started, ok)
            new = dict(zip(missing.keys(), vectors, strict=True))
            self._cache.put_cached_embeddings(self._key, new)
            found.update(new)
        with self._lock:
            self._embedded += len(missing)
            self._hits += len(texts) - len(missing)
        return [found[h] for h in hashes]

    @property
    def embedded_texts(self) -> int:
        """Texts sent to the model by this instance."""
        return self._embedded

    @property
    def cache_hits(self) -> int:
        """Texts answered from the cache (or deduplicated in a batch) by this instance."""
        return self._hits


# -- registry ------------------------------------------------------------------------------


class EmbeddingRegistry(ProviderTable[EmbeddingProvider, LoadedModel]):
    """Provider name → provider. The app fills it through the ``register_embedding_providers``
    hook, which the built-in providers implement as default plugins like any other plugin."""

    what, off = "embedding provider", "RAG"

    def error(self, message: str) -> EmbeddingConfigError:
        return EmbeddingConfigError(message)

    def configure(self, options: Mapping[str, object]) -> None:
        """Hand the engine's provider settings to every provider with a ``configure(options)``
        method (before any model loads); providers take the keys they know."""
        for provider in self._providers.values():
            configure = getattr(provider, "configure", None)
            if callable(configure):
                configure(options)

    def prepare(self) -> dict[str, str]:
        """Do now what a provider would otherwise do in the background after its first load
        (a ``prepare()`` method: the embedded model's ONNX export, check and measurement);
        provider name → what it says it will serve with."""
        done: dict[str, str] = {}
        for name, provider in sorted(self._providers.items()):
            prepare = getattr(provider, "prepare", None)
            if callable(prepare):
                done[name] = str(prepare())
        return done

    def runtime(self) -> dict[str, str]:
        """Provider name → how its loaded model computes in this process, and why (a
        ``runtime()`` method returning None until the model is loaded)."""
        found: dict[str, str] = {}
        for name, provider in sorted(self._providers.items()):
            runtime = getattr(provider, "runtime", None)
            line = runtime() if callable(runtime) else None
            if line:
                found[name] = str(line)
        return found

    def label(self, settings: EmbeddingSettings) -> str | None:
        """``provider:model`` these settings embed with, without loading the model (what a
        rebuild builds onto); None when embeddings are off or the provider is unknown."""
        if not settings.enabled or settings.provider not in self._providers:
            return None
        model = settings.model or self._providers[settings.provider].default_model()
        return f"{settings.provider}:{model}"

    def problem(self, settings: EmbeddingSettings) -> str | None:
        """Why these settings cannot make a model, told without loading it or calling out
        (an unknown provider, a key its provider needs and that is not set), with the fix;
        None when nothing is wrong that can be seen so."""
        if not settings.enabled:
            return None
        if settings.provider not in self._providers:
            return f"unknown embedding provider {settings.provider!r}; available: " + ", ".join(
                self.names()
            )
        if getattr(self._providers[settings.provider], "needs_api_key", False):
            return missing_api_key(settings)
        return None

    def chooses_model(self, provider_name: str) -> bool:
        """Whether the provider's model is one chosen by name from a remote service (the
        providers that need an API key), which the legacy ``RAG_EMBEDDING_MODEL`` can name;
        an in-process provider makes its own model."""
        provider = self._providers.get(provider_name)
        return bool(getattr(provider, "needs_api_key", False))

    def check_model(self, provider_name: str, model: str) -> None:
        """Refuse a model the provider says it does not make, when it can tell without a
        call (a provider with a ``check_model(model)`` method); others accept any name.

        Raises:
            EmbeddingConfigError: Unknown provider, or a model it does not make.
        """
        check = getattr(self.provider(provider_name), "check_model", None)
        if callable(check):
            check(model)

    def load(self, settings: EmbeddingSettings, model: str | None = None) -> LoadedModel:
        """The model for these settings (``model`` overrides the settings' model)."""
        if not settings.enabled:
            raise EmbeddingDisabledError(
                "embeddings are switched off (ai.embedding.provider=none) for this tenant"
            )
        provider = self.provider(settings.provider)
        name = model or settings.model or provider.default_model()
        key = (
            settings.provider,
            name,
            settings.base_url,
            key_digest(settings.api_key),
            settings.dimension,
            settings.pinned_profile,
            settings.max_input_tokens,
            settings.query_prefix,
            settings.document_prefix,
            settings.tokenizer,
        )
        return self.cached(key, lambda: provider.load(settings, name))

    def forget_probes(self, provider: str, model: str) -> None:
        """The model answered another dimension than it was probed with (swapped behind its
        name): its loads without a pinned dimension are probed again when next asked (a
        rebuild pins the new one), not served from the old probe."""
        self.forget(lambda k: k[0] == provider and k[1] == model and k[4] is None)


def check_dimension(loaded: LoadedModel, pinned: int, rag_name: str) -> None:
    if loaded.dimension != pinned:
        raise DimensionMismatchError(
            f"RAG {rag_name!r} is pinned to {pinned}-dim vectors but {loaded.provider}:"
            f"{loaded.model} makes {loaded.dimension}-dim ones; rebuild the RAG "
            "(vancetope-rag reindex --rebuild) to move it to the new model",
            rag_name=rag_name,
        )
