"""Whose failure is it? An embedding call's exception sorted into the provider's (an outage),
the settings' (a configuration error), the pinned model's (an answer of another dimension
than the RAG pinned) or the input's (the document's), with the wait the provider asked for
(``Retry-After``).

Pure: it reads the exception chain by duck typing (``status_code``/``code``, ``response``
headers, class names), so the OpenAI, httpx, requests and Google clients are all understood
without importing any of them.
"""

from __future__ import annotations

import contextlib
import email.utils
import enum
import socket
import time
from dataclasses import dataclass
from typing import Any

from vancetope_rag.errors import DimensionMismatchError
from vancetope_rag.secrets import error_text

#: Class names of transport failures in the clients the providers use (openai, httpx,
#: requests, urllib3, google-genai): the server was not reached or did not answer in time.
_TRANSPORT = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "ConnectError",
        "ConnectTimeout",
        "ConnectionError",
        "NetworkError",
        "PoolTimeout",
        "ReadError",
        "ReadTimeout",
        "RemoteProtocolError",
        "NewConnectionError",
        "MaxRetryError",
        "Timeout",
        "TimeoutException",
        "WriteError",
    }
)
#: Statuses that say the provider is overloaded or down, not that the request is wrong
#: (424: text-embeddings-inference's "backend" error, its model failed to run).
_OUTAGE_STATUSES = frozenset({408, 424, 425, 429})
#: Statuses that say the settings are wrong (key, permission, model or URL).
_CONFIG_STATUSES = frozenset({401, 403, 404})
#: The longest ``Retry-After`` honoured (a broken header must not pause indexing for days).
MAX_RETRY_AFTER_S = 3600.0


class FailureKind(enum.Enum):
    #: The provider is unreachable or overloaded: connection refused, DNS, timeout, 5xx, 429.
    OUTAGE = "outage"
    #: The provider refuses these settings: 401, 403, 404.
    CONFIG = "config"
    #: The provider answers vectors of another dimension than the RAG pinned (a model
    #: swapped behind the same name, a wrong base URL): no document can cure it.
    DIMENSION = "dimension"
    #: The provider refused this input (400 and anything unrecognised): the document's.
    INPUT = "input"


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    #: The HTTP status, when the provider answered.
    status: int | None
    #: Seconds the provider asked to wait (``Retry-After``), when it said.
    retry_after_s: float | None
    #: What happened, redacted (:func:`~vancetope_rag.secrets.error_text`).
    detail: str

    @property
    def provider_side(self) -> bool:
        """Not the document's fault: no attempt is spent on it."""
        return self.kind is not FailureKind.INPUT

    @property
    def lasting(self) -> bool:
        """Waiting does not cure it, the settings (or a rebuild) do: a refused key, URL or
        model, or the wrong dimension."""
        return self.kind in (FailureKind.CONFIG, FailureKind.DIMENSION)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and a tenacity ``RetryError``'s last one."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 16:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
        attempt: Any = _attr(e, "last_attempt")  # tenacity.RetryError
        if attempt is not None and callable(_attr(attempt, "exception")):
            with contextlib.suppress(Exception):  # a cancelled future, or not one at all
                todo.append(attempt.exception())
    return seen


def _attr(obj: object, name: str) -> object:
    """``getattr`` for client objects whose properties may raise (httpx's ``request``)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _status(exc: BaseException) -> int | None:
    for value in (
        _attr(exc, "status_code"),
        _attr(_attr(exc, "response"), "status_code"),
        _attr(exc, "code"),
        _attr(exc, "status"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    return None


def _is_transport(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError | TimeoutError | socket.gaierror | socket.timeout):
        return True
    return any(cls.__name__ in _TRANSPORT for cls in type(exc).__mro__)


def parse_retry_after(value: object, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` value (seconds or an HTTP date), capped; None if bad."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = _attr(_attr(exc, "response"), "headers")
    if headers is None or not hasattr(headers, "get"):
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        parsed = parse_retry_after(ms)
        if parsed is not None:
            return min(parsed / 1000.0, MAX_RETRY_AFTER_S)
    return parse_retry_after(headers.get("retry-after"))


def classify(exc: BaseException) -> Failure:
    """Sort an embedding call's failure: the first status or transport failure found along
    the exception chain decides; anything else is the input's (the document's)."""
    detail = error_text(exc)
    for e in _chain(exc):
        if isinstance(e, DimensionMismatchError):
            return Failure(FailureKind.DIMENSION, None, None, detail)
        status = _status(e)
        if status is not None:
            if status >= 500 or status in _OUTAGE_STATUSES:
                return Failure(FailureKind.OUTAGE, status, _retry_after(e), detail)
            if status in _CONFIG_STATUSES:
                return Failure(FailureKind.CONFIG, status, None, detail)
            return Failure(FailureKind.INPUT, status, None, detail)
        if _is_transport(e):
            return Failure(FailureKind.OUTAGE, None, None, detail)
    return Failure(FailureKind.INPUT, None, None, detail)
