"""Which encoding a text file is in: UTF-8 (or a BOM's UTF-16/32) first, else detected.

Files from older editors and other platforms are often Windows-1252 / Latin-1, Windows-1251,
Shift JIS…: refusing them as "not UTF-8" left them out of the index. When strict UTF-8 fails,
``charset-normalizer`` proposes the encodings the bytes decode cleanly and plausibly in, among
the common legacy ones. On short Western text it ranks Windows-1250 above Windows-1252 (the
bytes are valid in both, ``crème`` turns into ``crčme``), so Windows-1252 is taken whenever it
is among the plausible ones: it is by far the most common legacy encoding, and a superset of
Latin-1's printable characters. Binary data (a NUL byte) is never guessed into text.
"""

from __future__ import annotations

from vancetope_rag.errors import ExtractionError

#: Legacy encodings considered when a file is not UTF-8 (common ones; exotic code pages
#: would "fit" many short texts and read them as mojibake).
CANDIDATES = (
    "cp1252",
    "cp1250",
    "cp1251",
    "cp1253",
    "cp1254",
    "cp1255",
    "cp1256",
    "cp1257",
    "koi8_r",
    "shift_jis",
    "euc_jp",
    "gb18030",
    "big5",
    "euc_kr",
)
_PREFERRED = "cp1252"


def detect_encoding(data: bytes) -> str | None:
    """The legacy encoding ``data`` most plausibly is in (see the module docstring), or
    ``None`` when none of :data:`CANDIDATES` fits."""
    from charset_normalizer import from_bytes

    matches = from_bytes(data, cp_isolation=list(CANDIDATES))
    names = [m.encoding for m in matches]
    if _PREFERRED in names:
        return _PREFERRED
    best = matches.best()
    return None if best is None else str(best.encoding)


def decode_detected(data: bytes, path: str, failure: ExtractionError) -> tuple[str, str]:
    """``data`` decoded in its detected encoding, and that encoding's name.

    Raises:
        ExtractionError: ``failure`` (the strict decoding's error) when no encoding fits.
    """
    encoding = detect_encoding(data)
    if encoding is None:
        raise failure
    try:
        return data.decode(encoding), encoding
    except (UnicodeDecodeError, LookupError):
        raise failure from None
