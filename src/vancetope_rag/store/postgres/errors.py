"""Every psycopg failure as a :class:`~vancetope_rag.errors.StoreError` saying what to do.

The database layer (:mod:`.postgres.db`) translates at its one boundary, so adapters and
services only see :class:`~vancetope_rag.errors.RagError`\\ s. Messages name the store by
its shown URI (password hidden) and never quote the connection string; a constraint failure
becomes :class:`ConstraintViolation`, worded by the adapter that knows what it means.
"""

from __future__ import annotations

from vancetope_rag.errors import RagError, StoreError, StoreFullError
from vancetope_rag.secrets import redact
from vancetope_rag.store.sql.errors import ConstraintViolation, lone_surrogate_error

__all__ = ["ConstraintViolation", "scrubbed", "store_error"]

#: SQLSTATEs of a connection that went away: the server shut down or restarted, or an
#: administrator ended the session (``pg_terminate_backend``).
_GONE = {"57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004"}


def scrubbed(exc: BaseException, password: str | None) -> str:
    """The first line of an error's message, with the password and known secrets hidden."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return redact(text)


def store_error(
    exc: BaseException, shown: str, *, password: str | None = None, timeout_ms: int | None = None
) -> RagError:
    """The :class:`RagError` for what psycopg (or its pool) raised on the store ``shown``.

    Args:
        exc: The exception.
        shown: The store URI without its password, named in the message.
        password: Scrubbed from the message, should the driver ever quote it.
        timeout_ms: The statement timeout in force (named when a statement hit it).
    """
    if isinstance(exc, RagError):
        return exc
    where = f"store {shown!r}"
    if isinstance(exc, UnicodeEncodeError):
        return lone_surrogate_error()
    text = scrubbed(exc, password)
    if type(exc).__name__ == "PoolTimeout":
        return StoreError(
            f"{where}: no connection to PostgreSQL could be made or freed in time ({text}); "
            "check that the server is up and reachable, the credentials, and that pool_size "
            "suits the number of threads"
        )
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate == "53100":
        return StoreFullError(
            f"{where} is full: the server's disk has no room left; free space (or grow the "
            "volume) and run again — nothing was written by the failed step"
        )
    if sqlstate.startswith("23"):
        return ConstraintViolation(f"{where}: a write broke a constraint: {text}", text)
    if sqlstate == "57014":
        limit = f"{timeout_ms} ms" if timeout_ms else "the statement timeout"
        return StoreError(
            f"{where}: a statement ran longer than {limit} and was cancelled; retry, raise "
            "statement_timeout_ms in the store URI (or "
            "VANCETOPE_RAG_POSTGRES_STATEMENT_TIMEOUT_MS), or look for locks held by another "
            "session"
        )
    if sqlstate in ("42P01", "42704", "3F000"):
        return StoreError(
            f"{where}: a table or type of the store is missing ({text}); run "
            "`vancetope-rag --store … init` to create the schema"
        )
    if sqlstate == "42501":
        return StoreError(
            f"{where}: the role lacks a privilege ({text}); grant it, or run "
            "`vancetope-rag --store … init` as the schema's owner"
        )
    if sqlstate == "53300":
        return StoreError(
            f"{where}: the server refuses more connections ({text}); lower pool_size in the "
            "store URI (or VANCETOPE_RAG_POSTGRES_POOL_SIZE) or raise max_connections on the "
            "server"
        )
    if sqlstate == "25006":
        return StoreError(
            f"{where}: a write met a read-only transaction or server ({text}); if the server "
            "is a standby, point the store URI at the primary"
        )
    if sqlstate in _GONE or _is_connection_loss(exc):
        return StoreError(
            f"{where}: lost the connection to PostgreSQL ({text}): the server restarted, "
            "shut down, or ended the session; nothing of the failed step was kept, and the "
            "next call reconnects — retry it"
        )
    return StoreError(f"{where} failed: {type(exc).__name__}: {text}")


def _is_connection_loss(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
