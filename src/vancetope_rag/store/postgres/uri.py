"""``postgresql://`` store URIs: our own query parameters, what goes to libpq, and the URI
as it may be shown (password hidden).

Pure functions (no I/O). Our parameters (``schema``, ``pool_size``,
``statement_timeout_ms``, ``vector_index``) are taken out before the URI reaches libpq,
which would refuse them; every other parameter (``sslmode``, ``connect_timeout``,
``application_name``…) passes through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from vancetope_rag.errors import StoreError

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_STATEMENT_TIMEOUT_MS",
    "PostgresUri",
    "redact_uri",
    "with_defaults",
]

DEFAULT_POOL_SIZE = 8
#: A statement running longer is cancelled (a StoreError says which setting raises it).
DEFAULT_STATEMENT_TIMEOUT_MS = 60_000
_OURS = ("schema", "pool_size", "statement_timeout_ms", "vector_index")
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


@dataclass(frozen=True, slots=True)
class PostgresUri:
    """A parsed store URI: ``conninfo`` for libpq, ``shown`` for messages and logs."""

    conninfo: str
    shown: str
    password: str | None
    schema: str | None
    pool_size: int
    statement_timeout_ms: int
    #: Build HNSW indexes (``vector_index=hnsw``, the default) or rank every scope by an
    #: exact scan (``vector_index=none``: small stores, or a pgvector build that cannot run
    #: its HNSW code on this CPU).
    hnsw: bool = True

    @classmethod
    def parse(cls, uri: str) -> PostgresUri:
        parts = urlsplit(uri)
        if parts.scheme not in ("postgresql", "postgres"):
            raise StoreError("a PostgreSQL store URI starts with postgresql:// or postgres://")
        shown = redact_uri(uri)
        params = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in params if k in _OURS}
        rest = [(k, v) for k, v in params if k not in ours]
        schema = ours.get("schema") or None
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise StoreError(
                f"invalid schema {schema!r} in store URI {shown!r}: use letters, digits and _ "
                "(at most 63 characters, not starting with a digit)"
            )
        pool_size = _positive(ours.get("pool_size"), DEFAULT_POOL_SIZE, "pool_size", shown)
        timeout = _positive(
            ours.get("statement_timeout_ms"),
            DEFAULT_STATEMENT_TIMEOUT_MS,
            "statement_timeout_ms",
            shown,
        )
        index = ours.get("vector_index") or "hnsw"
        if index not in ("hnsw", "none"):
            raise StoreError(
                f"vector_index in store URI {shown!r} must be hnsw or none, not {index!r}"
            )
        # percent-encoding only: libpq reads no "+" as a space
        conninfo = urlunsplit(parts._replace(query=urlencode(rest, quote_via=quote)))
        password = unquote(parts.password) if parts.password else None
        password = password or next((v for k, v in rest if k == "password"), None)
        return cls(conninfo, shown, password, schema, pool_size, timeout, index == "hnsw")


def with_defaults(uri: str, defaults: Mapping[str, str]) -> str:
    """The URI with each of ``defaults`` added as a query parameter it does not set itself.

    How engine settings (``VANCETOPE_RAG_POSTGRES_*``) reach the store: what the URI says
    wins, so one process can still point a single URI elsewhere.
    """
    if not defaults:
        return uri
    parts = urlsplit(uri)
    present = {k for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
    added = [(k, v) for k, v in defaults.items() if k not in present]
    if not added:
        return uri
    extra = urlencode(added, quote_via=quote)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit(parts._replace(query=query))


def _positive(raw: str | None, default: int, name: str, shown: str) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise StoreError(f"{name} in store URI {shown!r} must be a positive integer, not {raw!r}")
    return value


def redact_uri(uri: str) -> str:
    """The URI with its password (in the user info or a ``password=`` parameter) as ``***``."""
    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        login, _, hosts = netloc.rpartition("@")
        user, sep, _ = login.partition(":")
        netloc = f"{user}:***@{hosts}" if sep else netloc
    query = "&".join(
        f"{k}=***" if k == "password" else (f"{k}={v}" if v or "=" in q else k)
        for q in parts.query.split("&")
        if q
        for k, _, v in [q.partition("=")]
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))
