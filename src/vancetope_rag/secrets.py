"""Keeping secrets (API keys, JWT secrets) out of logs, stored errors and tool results.

Every secret the package reads (``ai.embedding.apiKey``, the JWT secret) is registered here;
:func:`redact` replaces any registered secret, and anything shaped like a common API key, in a
text. Our loggers (:func:`get_logger`) redact every record, so an exception message that quotes
a key (some HTTP clients do) never reaches a log handler, and the indexer redacts the error it
stores as a document's ``lastError``.
"""

from __future__ import annotations

import logging
import re
import threading

from vancetope_rag.errors import RagError

MASK = "********"
_MIN_SECRET_LEN = 6
#: Shapes of well-known key formats (OpenAI/compatible ``sk-…``, Google ``AIza…``, bearer JWTs).
_KEY_SHAPES = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|AIza[0-9A-Za-z_\-]{20,}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-.]{10,})"
)

_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret so that :func:`redact` hides it from now on (in this process)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)


def known_secrets() -> list[str]:
    """Every registered secret, longest first (a longer one may contain a shorter one)."""
    with _lock:
        return sorted(_secrets, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every registered secret and key-shaped token replaced by ``********``."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return _KEY_SHAPES.sub(MASK, text)


class RedactingFilter(logging.Filter):
    """Formats the record's message and redacts it before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            if redact(str(exc)) != str(exc):
                record.exc_info = None  # the traceback would print the secret
                record.msg = f"{record.msg} ({type(exc).__name__}, details redacted)"
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """A logger of ours whose records are redacted."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def error_text(exc: BaseException) -> str:
    """What the store, a record and the log keep of a failure: redacted, capped."""
    text = exc.message if isinstance(exc, RagError) else f"{type(exc).__name__}: {exc}"
    return redact(text)[:2000]
