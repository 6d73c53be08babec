"""What MongoDB's failures mean to a user of this package, worded once.

* :func:`store_error` turns any runtime ``PyMongoError`` into a :class:`StoreError` whose
  message says what to do (credentials scrubbed); :func:`guard_errors` applies it to every
  public method of an adapter class, so no driver exception leaves the store layer.
* :func:`search_unsupported` recognises the one answer that means "this server has no Atlas
  Search" (a community ``mongod``, an old server), and only that one: an authorization error
  or a timeout is not a reason to switch to client-side ranking.
* :func:`guard_errors` also holds a chat turn's deadline (:mod:`vancetope_rag.store.port.deadline`):
  inside a turn each operation runs under ``pymongo.timeout`` with the time the turn has left.
* :func:`check_bson_size` refuses a document over MongoDB's 16 MiB limit before the driver
  raises ``DocumentTooLarge`` half-way through a write.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import bson
import pymongo
from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    DocumentTooLarge,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
)

from vancetope_rag.errors import InvalidInputError, RagError, StoreError
from vancetope_rag.store.port import deadline

#: MongoDB's maximum BSON document size.
MAX_BSON_BYTES = 16 * 1024 * 1024

#: Server codes that mean "no Atlas Search here": SearchNotEnabled (community ``mongod`` 7+,
#: 31082), CommandNotFound (59), unknown pipeline stage (40324, servers before 6.0.7).
SEARCH_UNSUPPORTED_CODES = frozenset({31082, 59, 40324})
_UNAUTHORIZED_CODES = frozenset({13, 8000})  # Unauthorized; AtlasError (e.g. no privilege)
_TIMEOUT_CODES = frozenset({50, 262})  # MaxTimeMSExpired; ExceededTimeLimit
_CREDENTIALS = re.compile(r"(mongodb(?:\+srv)?://[^:/@\s]+):[^@\s]*@")

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def scrub(text: str) -> str:
    """``text`` with the password of any MongoDB URI in it replaced by ``***``."""
    return _CREDENTIALS.sub(r"\1:***@", text)


def error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    return int(code) if isinstance(code, int) else None


def search_unsupported(exc: BaseException) -> bool:
    """Does this failure mean the server has no Atlas Search at all?"""
    if not isinstance(exc, OperationFailure):
        return False
    if error_code(exc) in SEARCH_UNSUPPORTED_CODES:
        return True
    details = exc.details if isinstance(exc.details, Mapping) else {}
    return details.get("codeName") == "SearchNotEnabled"


def is_unauthorized(exc: BaseException) -> bool:
    return isinstance(exc, OperationFailure) and error_code(exc) in _UNAUTHORIZED_CODES


def store_error(exc: PyMongoError, action: str) -> StoreError:
    """A :class:`StoreError` telling the user what went wrong while ``action`` and what to do."""
    reason = scrub(str(exc))
    unreachable = (
        "MongoDB could not be reached; check the store URI, the network and the cluster's "
        "state (Atlas: is this machine's IP on the access list?), then retry"
    )
    if isinstance(exc, ServerSelectionTimeoutError):
        hint = unreachable
    elif isinstance(exc, NetworkTimeout | ExecutionTimeout | WaitQueueTimeoutError) or (
        error_code(exc) in _TIMEOUT_CODES or getattr(exc, "timeout", False)
    ):
        hint = (
            "MongoDB did not answer within the client's timeout (the URI's timeoutMS); the "
            "cluster may be overloaded — retry, or raise timeoutMS in the store URI"
        )
    elif isinstance(exc, ConnectionFailure | AutoReconnect):
        hint = unreachable
    elif is_unauthorized(exc):
        hint = (
            "the database user lacks a privilege for this; grant it readWrite on the whole "
            "database of the store (it holds the search-index actions init needs; readWrite "
            "on single collections does not cover creating search indexes)"
        )
    elif search_unsupported(exc):
        hint = (
            "this MongoDB server has no Atlas Search; use Atlas, the "
            "mongodb/mongodb-atlas-local image, or a plain store with exact ranking"
        )
    elif isinstance(exc, DocumentTooLarge):
        hint = "a document exceeds MongoDB's 16 MiB limit; split the text"
    else:
        hint = "see the server's message; retry if the failure was transient"
    return StoreError(f"MongoDB failed while {action}: {reason} — {hint}")


def guard_errors(cls: C) -> C:
    """Wrap every public method of an adapter class, and those its port (a Protocol base)
    writes for every adapter, so a ``PyMongoError`` leaves it as a :class:`StoreError`
    (errors of this package pass through unchanged)."""
    ports = [base for base in cls.__mro__[1:] if getattr(base, "_is_protocol", False)]
    members = {name: m for base in (*reversed(ports), cls) for name, m in vars(base).items()}
    for name, member in members.items():
        if name.startswith("_") or not callable(member):
            continue
        setattr(cls, name, _guarded(member, f"{cls.__name__}.{name}"))
    return cls


def _guarded(method: F, where: str) -> F:
    action = f"running {where}"

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        left = deadline.remaining()
        try:
            if left is None:
                return method(*args, **kwargs)
            if left <= 0:
                raise StoreError(
                    f"MongoDB was not asked ({where}): the chat turn's deadline passed "
                    "(VANCETOPE_RAG_TURN_DEADLINE_S); the turn goes on without retrieval"
                )
            with pymongo.timeout(left):  # the turn's time left, not the client's 30 s
                return method(*args, **kwargs)
        except RagError:
            raise
        except PyMongoError as exc:
            raise store_error(exc, action) from exc

    return call  # type: ignore[return-value]


def bson_size(document: Mapping[str, Any]) -> int:
    return len(bson.encode(document))


def check_bson_size(document: Mapping[str, Any], what: str, **context: Any) -> None:
    """Refuse ``document`` when it would exceed MongoDB's 16 MiB per document."""
    size = bson_size(document)
    if size > MAX_BSON_BYTES:
        raise InvalidInputError(
            f"{what} would take {size / 2**20:.1f} MiB in MongoDB, which stores at most 16 MiB "
            "per document; split or shorten the text",
            **context,
        )
