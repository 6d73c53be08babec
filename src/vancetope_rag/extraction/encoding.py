"""Which encoding a text file is in: UTF-8 (or a BOM's UTF-16/32) first, else detected.

Files from older editors and other platforms are often Windows-1252 / Latin-1, Windows-1251,
Shift JIS…: refusing them as "not UTF-8" left them out of the index. When strict UTF-8 fails,
``charset-normalizer`` proposes the encodings the bytes decode cleanly and plausibly in, among
the common legacy ones. On short Western text it ranks Windows-1250 above Windows-1252 (the
bytes are valid in both, ``crème`` turns into ``crčme``), so Windows-1252 is taken whenever it
is among the plausible ones: it is by far the most common legacy encoding, and a superset of
Latin-1's printable characters. Binary data (a NUL byte) is never guessed into text.

An HTML or XML file may say its encoding (``<meta charset>``, ``<?xml encoding?>``): that is
taken before guessing, as browsers do, with the labels they read as Windows-1252 (``latin1``,
``iso-8859-1``, ``us-ascii``) read so too. Bytes that are valid UTF-8 stay UTF-8 whatever a
declaration says: a page saved as UTF-8 by an editor that kept an old ``<meta>`` is common,
valid UTF-8 by chance in a legacy encoding is not.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

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
#: Codecs whose labels browsers decode as Windows-1252 (WHATWG Encoding: Latin-1 and ASCII
#: are its aliases).
_READ_AS_CP1252 = frozenset(["iso8859-1", "ascii"])
#: Where a page declares its encoding: an XML declaration, ``<meta charset=…>`` or the
#: ``content`` of ``<meta http-equiv="Content-Type">``, in the first KiB (the HTML prescan's).
_DECLARED = re.compile(
    rb"<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._:-]+)"
    rb"|<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)",
    re.IGNORECASE,
)
_PRESCAN_BYTES = 1024


def declared_encoding(data: bytes) -> str | None:
    """The encoding an HTML or XML file declares near its start, as a Python codec name, or
    ``None`` when it declares none Python knows."""
    found = _DECLARED.search(data[:_PRESCAN_BYTES])
    if found is None:
        return None
    label = (found.group(1) or found.group(2)).decode("ascii").lower()
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    if name.startswith(("utf-16", "utf-32")):
        return None  # bytes that reached this prescan as ASCII are not UTF-16 (HTML says so)
    return _PREFERRED if name in _READ_AS_CP1252 else name


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


def decode_detected(
    data: bytes, path: str, failure: ExtractionError, *, declared: str | None = None
) -> tuple[str, str]:
    """``data`` decoded in ``declared`` when it fits, else in its detected encoding, and that
    encoding's name (Python's: ``cp1252``, ``koi8-r``, ``shift_jis``…).

    Raises:
        ExtractionError: ``failure`` (the strict decoding's error) when no encoding fits.
    """
    for encoding in _candidates(data, declared):
        try:
            return data.decode(encoding), codecs.lookup(encoding).name  # one name per codec
        except (UnicodeDecodeError, LookupError):
            continue
    raise failure


def _candidates(data: bytes, declared: str | None) -> Iterator[str]:
    """``declared``, then the detected encoding (detected only when the declared one fails)."""
    if declared is not None:
        yield declared
    detected = detect_encoding(data)
    if detected is not None:
        yield detected
