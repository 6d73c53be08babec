"""The rules every text and id taken in from a caller follows: pure checks, no I/O.

One validator per kind, used by every entry point (the app's host methods, the tools, the
CLI, the REST API) so that a value refused in one place is refused in all of them.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from vancetope_rag.errors import InvalidInputError, TextTooLongError

__all__ = [
    "MAX_ID_CHARS",
    "TextLimit",
    "check_id",
    "check_label",
    "check_metadata",
    "check_text",
    "has_lone_surrogate",
    "one_line",
]

#: The longest tenant or project id.
MAX_ID_CHARS = 200


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds an unpaired UTF-16 half (not valid Unicode; not storable)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def one_line(text: str, max_chars: int) -> str:
    """``text`` on one line for a label: control and other unprintable characters and runs
    of whitespace become one blank, and past ``max_chars`` it ends with an ellipsis."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= max_chars else line[: max_chars - 1] + "…"


def _surrogate_error(what: str) -> InvalidInputError:
    return InvalidInputError(
        f"{what} contains a lone surrogate (an unpaired UTF-16 half), which is not valid "
        "Unicode text; remove or replace it"
    )


def check_text(value: object, what: str = "text") -> str:
    """A text to index or query: a non-blank string of valid Unicode; NULs are dropped.

    Raises:
        InvalidInputError: Not a string, blank, or holding a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(f"{what} is empty; give some text to index or query")
    if has_lone_surrogate(value):
        raise _surrogate_error(what)
    return value.replace("\x00", "")


def check_label(value: object, what: str, max_chars: int) -> str:
    """A short caller-given string (a source ref, a title, a MIME type): at most
    ``max_chars`` characters of valid Unicode without NUL.

    Raises:
        InvalidInputError: Not a string, too long, or holding NUL or a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise InvalidInputError(f"{what} is longer than {max_chars:,} characters")
    if "\x00" in value:
        raise InvalidInputError(f"{what} contains a NUL character")
    if has_lone_surrogate(value):
        raise _surrogate_error(what)
    return value


#: Caller metadata on a chunk: at most this many keys and this many characters as JSON.
MAX_METADATA_KEYS, MAX_METADATA_CHARS = 64, 65_536

Scalar = str | int | float | bool | None


def check_metadata(
    value: object,
    *,
    what: str = "metadata",
    max_keys: int = MAX_METADATA_KEYS,
    max_chars: int = MAX_METADATA_CHARS,
) -> dict[str, Scalar]:
    """Metadata from a caller: an object of at most ``max_keys`` string keys (64 for a
    chunk's) whose values are strings, numbers, booleans or null, ``max_chars`` characters
    of JSON at most (64 KiB for a chunk's).

    Raises:
        InvalidInputError: Another shape, or too large; the message says which.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError(f"{what} must be an object of string keys")
    if len(value) > max_keys:
        raise InvalidInputError(f"{what} has {len(value)} keys, more than {max_keys}")
    out: dict[str, Scalar] = {}
    size = 0
    for key, item in value.items():
        check_label(key, f"a {what} key", 100)
        if (isinstance(item, float) and item != item) or item in (float("inf"), float("-inf")):
            raise InvalidInputError(f"{what} {key!r} must be a finite number")
        if isinstance(item, str):
            check_label(item, f"{what} {key!r}", max_chars)
        elif not isinstance(item, int | float | bool) and item is not None:
            raise InvalidInputError(
                f"{what} {key!r} must be a string, number, boolean or null, "
                f"got {type(item).__name__}"
            )
        size += len(key) + len(str(item)) + 8
        if size > max_chars:
            raise InvalidInputError(f"{what} is larger than {max_chars:,} characters")
        out[key] = item
    return out


def check_id(value: object, what: str) -> str:
    """A tenant or project id: 1-200 characters of valid Unicode, no control character, no
    '/' or '\\', no surrounding blanks, and not '.' or '..' (ids name storage scopes and
    workspace folders; '' would fall together with the tenant scope of settings).

    Raises:
        InvalidInputError: The id breaks one of these rules; the message names it.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    shown = repr(value[:40]) + ("…" if len(value) > 40 else "")
    rule = (
        f"{what} must be 1-{MAX_ID_CHARS} characters without '/', '\\', control characters "
        f"or surrounding blanks, and not '.' or '..'; got {shown}"
    )
    if not value or len(value) > MAX_ID_CHARS or value in (".", ".."):
        raise InvalidInputError(rule)
    if value != value.strip() or "/" in value or "\\" in value:
        raise InvalidInputError(rule)
    if has_lone_surrogate(value):
        raise _surrogate_error(what)
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value):
        raise InvalidInputError(rule)
    return value


@dataclass(frozen=True, slots=True)
class TextLimit:
    """The engine's text limit (``VANCETOPE_RAG_MAX_TEXT_CHARS``)."""

    max_chars: int

    def check(self, text: str, what: str = "text") -> str:
        """``text`` when within the limit; a caller's text over it is refused.

        Raises:
            TextTooLongError: The message names the limit and its setting.
        """
        if len(text) > self.max_chars:
            raise TextTooLongError(
                f"{what} has {len(text):,} characters, more than the limit of "
                f"{self.max_chars:,} characters (VANCETOPE_RAG_MAX_TEXT_CHARS); split it "
                "into smaller parts"
            )
        return text

    def clip(self, text: str) -> tuple[str, bool]:
        """A document's text cut at the limit, and whether it was cut (documents are the
        host's: indexed up to the limit, never refused)."""
        if len(text) <= self.max_chars:
            return text, False
        return text[: self.max_chars], True
