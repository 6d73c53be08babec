"""The errors both SQL engines' database layers raise alike (each maps its driver's failures
in its own ``errors`` module): a broken UNIQUE or NOT NULL rule, and text that is not valid
Unicode."""

from __future__ import annotations

from vancetope_rag.errors import InvalidInputError, StoreError

__all__ = ["ConstraintViolation", "lone_surrogate_error"]


class ConstraintViolation(StoreError):
    """A write broke a UNIQUE or NOT NULL rule; ``detail`` is the database's message. The
    adapter that wrote the row knows what it means (a path or a name already taken) and
    words it for the user."""

    code = "STORE_CONSTRAINT"

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


def lone_surrogate_error() -> InvalidInputError:
    """Text with a lone surrogate cannot be stored as UTF-8 (entry points refuse it first)."""
    return InvalidInputError(
        "text contains a lone surrogate (an unpaired UTF-16 half), which is not valid "
        "Unicode text; remove or replace it"
    )
