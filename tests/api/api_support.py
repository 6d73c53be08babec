"""Helpers of the REST API and web UI tests: tokens and the providers their apps use."""

from __future__ import annotations

from collections.abc import Callable

from fakes import LeakyProvider, P, Poison, ProbeProvider, T
from vancetope_rag.api import issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.errors import EmbeddingConfigError

SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"
API_KEY = "sk-test-APIKEY-d41d8cd98f00b204e9800998ecf8427e"
POISON = "POISON"


def api_providers() -> list[object]:
    """What the API tests' apps can embed with besides the built-ins: ``poison`` fails any
    batch holding :data:`POISON` and echoes its API key in the error; ``leaky-config`` and
    ``leaky-crash`` fail to load, quoting the key."""
    return [
        ProbeProvider("poison", Poison(POISON), echo_key=True),
        LeakyProvider("leaky-config", EmbeddingConfigError),
        LeakyProvider("leaky-crash", RuntimeError),
    ]


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
