"""How the chat proxy runs: its upstream, callers' key table, recipe, limits and CORS.

Read from the environment with the ``VANCETOPE_RAG_PROXY_`` prefix (the CLI's options win);
the engine itself (store, JWT secret, retrieval defaults) stays in
:class:`~vancetope_rag.config.EngineConfig`.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlparse

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Where the block goes: its own system message, or appended to the caller's last one.
Placement = Literal["separate", "merge"]


class ProxyConfig(BaseSettings):
    """Configuration of ``vancetope-rag proxy``. Pass it explicitly; nothing else reads it."""

    model_config = SettingsConfigDict(
        env_prefix="VANCETOPE_RAG_PROXY_", extra="ignore", populate_by_name=True
    )

    upstream: str | None = Field(
        default=None,
        description="Base URL of the OpenAI-compatible upstream, with its /v1 (e.g. "
        "https://api.openai.com/v1, http://localhost:11434/v1); `--upstream` sets it too.",
    )
    upstream_api_key: SecretStr | None = Field(
        default=None,
        description="The key the proxy sends upstream as 'Authorization: Bearer <key>'. "
        "The caller's own credential is never forwarded; unset: no Authorization upstream.",
    )
    keys_file: str | None = Field(
        default=None,
        description="YAML/JSON table of callers' API keys (hashed), each bound to a tenant, "
        "its projects, an optional recipe and a rate; re-read when it changes (replace it by "
        "rename); while a changed file fails to load, no proxy key is accepted.",
    )
    recipe: str | None = Field(
        default=None,
        description="Recipe file for callers whose key names none (and for JWT callers): "
        "its rag.autoInject decides ON/OFF/AUTO.",
    )
    placement: Placement = Field(
        default="separate",
        description="separate: the block is its own system message after the caller's "
        "system/developer messages; merge: appended to the last of them (for upstream "
        "templates that allow one system message).",
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description="Largest request body accepted; larger answer 413 before being read.",
    )
    connect_timeout_s: float = Field(
        default=10.0, gt=0, description="Seconds to connect to the upstream; then 504."
    )
    timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Seconds the upstream may stay silent (before its answer, or between "
        "two streamed chunks); then 504, or the stream ends.",
    )
    cors_origins: str = Field(
        default="",
        description="Comma-separated origins browsers may call the proxy from ('*': any); "
        "empty: no CORS headers.",
    )
    requests_per_minute: int = Field(
        default=120,
        ge=0,
        le=1_000_000,
        description="Requests per minute per caller (one budget per key or token, whatever "
        "the project; every route that reaches the upstream spends it) when the caller's key "
        "names no rate (JWT callers always), in bursts of up to a minute's worth; more answer "
        "429 with Retry-After. 0: no limit.",
    )

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        if value is None:
            return None
        url = urlparse(value.strip())
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(
                f"the upstream must be an http(s) URL with a host, e.g. "
                f"https://api.openai.com/v1; got {value!r}"
            )
        if url.username or url.password:
            raise ValueError(
                "the upstream URL must not carry credentials; set "
                "VANCETOPE_RAG_PROXY_UPSTREAM_API_KEY instead"
            )
        return value.strip().rstrip("/")

    def origins(self) -> list[str]:
        """The CORS origins, parsed."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]
