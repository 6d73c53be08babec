"""Keep content from faking the ``<rag-context>`` tags or a ``[S#]`` citation label, lookalike
characters included. Pure text rules, no I/O.

Matching runs on a folded copy of the text: each character is NFKD-normalised (fullwidth
``＜`` becomes ``<``), Unicode dashes and hyphens become ``-`` (the soft hyphen U+00AD too,
though it is a format character: ``</rag``, soft hyphen, ``context>`` reads as the tag), other
format characters (Unicode category Cf: zero-width characters, bidi marks) and combining marks
are dropped, Cyrillic and Greek letters that look like Latin ones become the Latin letter, angle
brackets and quotes (``〈 〉 ‹ › ⟨ ⟩``...) become ``<``/``>``, and HTML character references
(``&lt;``, ``&#60;``, ``&#x3c;``...) count as the character they stand for. Every folded
character remembers the span of the original it came from, so a match is escaped in the
*original* text: the rest stays exactly as written.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections.abc import Callable

__all__ = ["MAX_LABEL_CHARS", "clean_label", "neutralise_tags"]

#: Longest label part (path, sourceRef, section) shown in the block.
MAX_LABEL_CHARS = 200

_CONFUSABLE = {
    # Cyrillic
    "а": "a",
    "в": "b",
    "г": "r",
    "е": "e",
    "ё": "e",
    "к": "k",
    "м": "m",
    "н": "h",
    "о": "o",
    "п": "n",
    "р": "p",
    "с": "c",
    "т": "t",
    "у": "y",
    "х": "x",
    "ѕ": "s",
    "і": "i",
    "ј": "j",
    "ԁ": "d",
    "ԛ": "q",
    "ԝ": "w",
    "һ": "h",
    "ɡ": "g",
    # Greek
    "α": "a",
    "β": "b",
    "γ": "y",
    "ε": "e",
    "η": "n",
    "ι": "i",
    "κ": "k",
    "ν": "v",
    "ο": "o",
    "ρ": "p",
    "τ": "t",
    "υ": "u",
    "χ": "x",
    "ϲ": "c",
    "ϳ": "j",
}
_BRACKETS = dict.fromkeys("‹〈⟨〈❬❮❰˂ᐸ«≺⧼", "<") | dict.fromkeys("›〉⟩〉❭❯❱˃ᐳ»≻⧽", ">")
_SLASHES = dict.fromkeys("⁄∕⧸／", "/")
#: Dashes outside category Pd; the soft hyphen is one though its category is Cf.
_OTHER_DASHES = "\u00ad\u2212\u2043\u02d7\u2796\u2e3a\u2e3b"
_ENTITY = re.compile(r"&(?:#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,8}|[a-zA-Z]{2,8});?")

_BREAKS = frozenset(["Cc", "Zl", "Zp", "Zs"])
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: ``rag-context`` with one dash or more: ``</rag\u00ad-context>`` folds to ``rag--context``.
_TAG = re.compile(r"<(?=\s*/?\s*rag-+context\b)")
_LABEL = re.compile(r"\[(?=\s*s\s*\d)")
_PLAIN_TAG = re.compile(r"<(?=\s*/?\s*rag-+context\b)", re.IGNORECASE)


@functools.lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    if char.isascii():
        return char.lower()
    out = []
    for part in unicodedata.normalize("NFKD", char):
        category = unicodedata.category(part)
        if category == "Pd" or part in _OTHER_DASHES:
            part = "-"  # before Cf characters are dropped: the soft hyphen is a Cf dash
        elif category in ("Cf", "Mn", "Me"):
            continue
        part = part.lower()
        out.append(_CONFUSABLE.get(part) or _BRACKETS.get(part) or _SLASHES.get(part) or part)
    return "".join(out)


def _fold_at(text: str, i: int) -> tuple[str, int]:
    """The folded character at ``i`` (or the one-character HTML entity starting there), and
    where the next one starts."""
    if text[i] == "&":
        entity = _ENTITY.match(text, i)
        if entity is not None:
            decoded = html.unescape(entity.group(0))
            if len(decoded) == 1:
                return _fold_char(decoded), entity.end()
    return _fold_char(text[i]), i + 1


def _folded(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The folded copy of ``text`` and, for each of its characters, the original's span."""
    chars: list[str] = []
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        folded, end = _fold_at(text, i)
        for char in folded:
            chars.append(char)
            spans.append((i, end))
        i = end
    return "".join(chars), spans


#: Runs of ASCII characters other than ``&`` (an entity's start): they fold to their lower case.
_ASCII_RUN = re.compile(r"[\x00-\x25\x27-\x7f]+")


def _folded_text(text: str) -> str:
    """``_folded(text)[0]``, without the spans: a turn renders thousands of characters and
    almost never finds a match, so the per-character spans are built only when one is found
    (ASCII runs are lower-cased whole; every other character folds as in :func:`_folded`)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        run = _ASCII_RUN.match(text, i)
        if run is not None:
            out.append(run.group(0).lower())
            i = run.end()
            continue
        folded, i = _fold_at(text, i)
        out.append(folded)
    return "".join(out)


def _escape_matches(text: str, pattern: re.Pattern[str], escape: Callable[[str], str]) -> str:
    if pattern.search(_folded_text(text)) is None:
        return text  # the common case: nothing to escape, no spans needed
    folded, spans = _folded(text)
    starts = {spans[m.start()] for m in pattern.finditer(folded)}
    if not starts:
        return text
    out: list[str] = []
    last = 0
    for start, end in sorted(starts):
        out.append(text[last:start])
        out.append(escape(text[start:end]))
        last = end
    out.append(text[last:])
    return "".join(out)


def _escape_bracket(original: str) -> str:
    # an entity is escaped once more (&lt; -> &amp;lt;); a lookalike < becomes &lt;
    return "&amp;" + original[1:] if original.startswith("&") else "&lt;"


def neutralise_tags(text: str) -> str:
    """Defuse ``<rag-context>``/``</rag-context>`` tags and their lookalikes so content cannot
    end the block early.

    Only the tag's opening bracket changes: ``<`` (or a lookalike of it) becomes ``&lt;``, an
    HTML entity standing for it gets its ``&`` escaped (``&amp;lt;``). The model still sees
    what the document says; the rest of the text is left exactly as written.

    Args:
        text: Excerpt text or a source label.

    Returns:
        The text with every ``rag-context`` tag defused.
    """
    if text.isascii() and "&" not in text:
        return _PLAIN_TAG.sub("&lt;", text)
    return _escape_matches(text, _TAG, _escape_bracket)


#: ASCII control characters (Unicode category Cc): blanks on a label line.
_ASCII_BREAKS = {c: " " for c in [*range(0x20), 0x7F]}
#: ``[`` before ``s``/``S`` and a digit: the ASCII form of :data:`_LABEL` on unfolded text.
_ASCII_LABEL = re.compile(r"\[(?=\s*[sS]\s*\d)")


@functools.lru_cache(maxsize=4096)
def clean_label(text: str, max_chars: int = MAX_LABEL_CHARS) -> str:
    """A label part (path, sourceRef, section) fit to show on a label line: on one line
    (line breaks and control characters become blanks), capped at ``max_chars`` with an
    ellipsis, ``rag-context`` tags defused and every ``[S<digit>`` (lookalikes included)
    escaped as ``\\[S``, so that it cannot pass for a citation label."""
    # Cached: a turn shows each path and source ref several times (every hit, every source,
    # every render of the budget's search), and the same documents come back turn after turn.
    if text.isascii():  # ASCII: no bidi controls; its Cc and Zs characters become blanks
        line = " ".join(text.translate(_ASCII_BREAKS).split())
    else:
        line = " ".join(
            "".join(
                " " if unicodedata.category(c) in _BREAKS else c for c in text if c not in _BIDI
            ).split()
        )
    if len(line) > max_chars:
        line = line[: max_chars - 1] + "…"
    line = neutralise_tags(line)
    if line.isascii() and "&" not in line:  # folding is lower-casing: no entity, no lookalike
        return _ASCII_LABEL.sub(r"\\[", line)
    return _escape_matches(line, _LABEL, lambda original: "\\" + original)
