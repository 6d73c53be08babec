"""What the embedding and reranker registries share: a table of named providers, filled by a
registration hook, in which ``none`` is reserved (it switches the feature off)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from vancetope_rag.errors import RagError

PROVIDER_NONE = "none"


class Named(Protocol):
    @property
    def name(self) -> str: ...


P = TypeVar("P", bound=Named)
#: What a provider loads (a model, a reranker).
L = TypeVar("L")


def key_digest(api_key: str | None) -> str:
    """What a cache key holds of an API key: its hash, never the key."""
    return hashlib.sha256((api_key or "").encode()).hexdigest()


class ProviderTable(Generic[P, L]):
    """Provider name → provider, and what the providers loaded, by settings. A later
    registration of a name replaces an earlier one (the built-in providers register first,
    so a plugin can replace them)."""

    #: What a provider is, in messages ("embedding provider").
    what = "provider"
    #: What ``none`` switches off, in messages ("RAG").
    off = "it"

    def __init__(self) -> None:
        self._providers: dict[str, P] = {}
        self._loaded: dict[tuple[Hashable, ...], L] = {}
        self._lock = threading.Lock()

    def error(self, message: str) -> RagError:
        """The error this table raises (a subclass names its own configuration error)."""
        return RagError(message)

    def register(self, provider: P) -> None:
        if provider.name == PROVIDER_NONE:
            raise self.error(f"'none' is reserved: it switches {self.off} off")
        self._providers[provider.name] = provider
        with self._lock:  # what a replaced provider loaded is not used again
            self._loaded = {k: v for k, v in self._loaded.items() if k[0] != provider.name}

    def forget(self, match: Callable[[tuple[Hashable, ...]], bool]) -> None:
        """Drop what was loaded under the keys ``match`` accepts: loaded again when asked."""
        with self._lock:
            self._loaded = {k: v for k, v in self._loaded.items() if not match(k)}

    def names(self) -> list[str]:
        return sorted([PROVIDER_NONE, *self._providers])

    def provider(self, name: str) -> P:
        try:
            return self._providers[name]
        except KeyError:
            raise self.error(
                f"unknown {self.what} {name!r}; available: {', '.join(self.names())}"
            ) from None

    def cached(self, key: tuple[Hashable, ...], load: Callable[[], L]) -> L:
        """What ``load`` gives for ``key`` (its first item the provider's name), loaded once
        (two threads may both load; the second result is kept)."""
        with self._lock:
            loaded = self._loaded.get(key)
        if loaded is None:
            loaded = load()
            with self._lock:
                self._loaded[key] = loaded
        return loaded
