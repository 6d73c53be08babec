"""Every SQLite (apsw) failure as a :class:`~vancetope_rag.errors.StoreError` saying what to do.

The database layer (:mod:`.sqlite.db`) translates at its one boundary, so the adapters and the
services above them only ever see :class:`~vancetope_rag.errors.RagError`\\ s. A constraint
failure becomes :class:`ConstraintViolation`: the adapter that wrote the row knows what it
means (a path or a name already taken) and words it for the user.
"""

from __future__ import annotations

from typing import Any

from vancetope_rag.errors import (
    RagError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
)
from vancetope_rag.store.sql.errors import ConstraintViolation, lone_surrogate_error

__all__ = ["ConstraintViolation", "store_error"]


def store_error(apsw: Any, exc: BaseException, path: str) -> RagError:
    """The :class:`RagError` for an exception raised by apsw on the store at ``path``.

    Args:
        apsw: The apsw module (imported lazily by the database layer).
        exc: What apsw (or the encoder of a parameter) raised.
        path: The store file, named in the message.
    """
    if isinstance(exc, RagError):
        return exc
    where = f"store {path!r}"
    if isinstance(exc, UnicodeEncodeError):
        return lone_surrogate_error()
    if isinstance(exc, UnicodeDecodeError):
        # A text column whose bytes are not UTF-8: only damage to the file writes those.
        return StoreCorruptError(
            f"{where} is corrupt (a stored text is not valid UTF-8); restore it from a "
            f"backup, or inspect it with sqlite3 {path} 'PRAGMA integrity_check'"
        )
    missing = str(exc).partition("no such table:")[2].strip()
    if isinstance(exc, apsw.SQLError) and missing and not missing.startswith("vec_"):
        # Every table but the per-dimension vec_* ones exists once the store is open (its
        # schema is upgraded then): one that is missing means the file under the connection
        # is not the store it opened (truncated or replaced under a running worker).
        return StoreCorruptError(
            f"{where} was removed, replaced or truncated while in use ({exc}); stop every "
            "process using it and restore it from a backup"
        )
    if isinstance(exc, apsw.ConstraintError):
        return ConstraintViolation(f"{where}: a write broke a constraint: {exc}", str(exc))
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError | apsw.FormatError):
        return StoreCorruptError(
            f"{where} is corrupt ({exc}); restore it from a backup, or inspect it with "
            f"sqlite3 {path} 'PRAGMA integrity_check'"
        )
    if isinstance(exc, apsw.FullError):
        return StoreFullError(
            f"{where} is full: the disk (or the database's size limit) has no room left; "
            "free space and run again — nothing was written by the failed step"
        )
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return StoreError(
            f"{where} stayed locked by another process beyond the busy timeout; retry, and "
            "look for a process holding a long transaction on it"
        )
    if isinstance(exc, apsw.ReadOnlyError | apsw.PermissionsError | apsw.CantOpenError):
        return StoreError(
            f"{where} cannot be written ({exc}); check the file, its folder and their permissions"
        )
    if isinstance(exc, apsw.IOError):
        return StoreError(
            f"{where}: the disk reported an I/O error ({exc}); check the disk and the file "
            "(it may have been truncated or removed while in use)"
        )
    return StoreError(f"{where} failed: {type(exc).__name__}: {exc}")
