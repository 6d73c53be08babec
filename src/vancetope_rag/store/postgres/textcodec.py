"""Text with NUL characters, which PostgreSQL ``text`` cannot hold, stored losslessly.

Python strings (and SQLite) may hold ``\\x00``; PostgreSQL refuses it in every text value.
So that the store keeps and returns what the SQLite store keeps and returns, every string
parameter is escaped on its way out (``\\x01`` → ``\\x01\\x01``, ``\\x00`` → ``\\x01\\x02``)
and every text value unescaped on its way in, by psycopg adapters registered on each pooled
connection (:func:`register`). The escape is one character for one character, so equality,
prefixes (``starts_with``) and uniqueness mean on the stored text what they mean on the
original. A text without either character is unchanged, byte for byte.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg.types.string import StrBinaryDumper, StrDumperUnknown, TextBinaryLoader, TextLoader

__all__ = ["escape", "register", "unescape"]

_ESCAPED = re.compile("\x01([\x01\x02])")


def escape(text: str) -> str:
    if "\x00" not in text and "\x01" not in text:
        return text
    return text.replace("\x01", "\x01\x01").replace("\x00", "\x01\x02")


def _unescaped(match: re.Match[str]) -> str:
    return "\x01" if match.group(1) == "\x01" else "\x00"


def unescape(text: str) -> str:
    if "\x01" not in text:
        return text
    return _ESCAPED.sub(_unescaped, text)


class _Dumper(StrDumperUnknown):
    def dump(self, obj: str) -> Any:
        return super().dump(escape(obj))


class _BinaryDumper(StrBinaryDumper):
    def dump(self, obj: str) -> Any:
        return super().dump(escape(obj))


class _Loader(TextLoader):
    def load(self, data: Any) -> Any:
        value = super().load(data)
        return unescape(value) if isinstance(value, str) else value


class _BinaryLoader(TextBinaryLoader):
    def load(self, data: Any) -> Any:
        value = super().load(data)
        return unescape(value) if isinstance(value, str) else value


def register(conn: Any) -> None:
    """Install the escaping adapters on a connection."""
    adapters = conn.adapters
    adapters.register_dumper(str, _Dumper)
    adapters.register_dumper(str, _BinaryDumper)
    for oid in ("text", "varchar", "bpchar"):
        adapters.register_loader(oid, _Loader)
        adapters.register_loader(oid, _BinaryLoader)
