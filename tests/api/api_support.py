"""Helpers of the REST API and web UI tests: tokens and test embedding providers."""

from __future__ import annotations

from collections.abc import Callable

from llama_index.core.base.embeddings.base import Embedding

from vancetope_rag.api import issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins.hashing import HashingEmbedding, HashingProvider
from vancetope_rag.embeddings import EmbeddingRegistry, EmbeddingSettings, LoadedModel
from vancetope_rag.errors import EmbeddingConfigError

T, P = "t1", "p1"
SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"
API_KEY = "sk-test-APIKEY-d41d8cd98f00b204e9800998ecf8427e"
POISON = "POISON"
POISON_MESSAGE = "provider rejected the input: unsupported token sequence"


class PoisonEmbedding(HashingEmbedding):
    """Hashing vectors; fails any batch holding ``POISON`` and, like some real providers,
    echoes its API key in the error."""

    api_key: str = ""

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        if any(POISON in t for t in texts):
            raise RuntimeError(f"{POISON_MESSAGE} (request with key {self.api_key})")
        return [self._vector(t) for t in texts]


class PoisonProvider:
    name = "poison"

    def default_model(self) -> str:
        return "poison-64"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=64,
            embed_model=PoisonEmbedding(dimension=64, api_key=settings.api_key or ""),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


class LeakyProvider:
    """A badly written plugin: its load error carries the API key."""

    def __init__(self, name: str, error: type[Exception]) -> None:
        self.name = name
        self.error = error

    def default_model(self) -> str:
        return "leaky-1"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        raise self.error(f"the server refused key {settings.api_key!s} for {model}")


def registry() -> EmbeddingRegistry:
    reg = EmbeddingRegistry()
    for provider in (
        HashingProvider(),
        PoisonProvider(),
        LeakyProvider("leaky-config", EmbeddingConfigError),
        LeakyProvider("leaky-crash", RuntimeError),
    ):
        reg.register(provider)  # type: ignore[arg-type]
    return reg


ApiAppFactory = Callable[..., RagApp]


def make_token(
    *,
    tenant: str = T,
    projects: list[str] | str | None = None,
    perms: tuple[str, ...] = ("WRITE",),
    ttl_s: float = 600,
    now: float | None = None,
    secret: str = SECRET,
) -> str:
    return issue_token(
        secret,
        subject="tester",
        tenant=tenant,
        projects=[P] if projects is None else projects,
        perms=perms,
        ttl_s=ttl_s,
        now=now,
    )


def bearer(token: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token or make_token()}"}
