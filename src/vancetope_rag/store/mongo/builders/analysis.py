"""The MongoDB store's text analysis: the Atlas analyzer it defines, and its twin in Python.

Hybrid retrieval was tuned on the SQLite store, whose FTS5 tokenizer (``porter unicode61
remove_diacritics 2 tokenchars '_'``) splits on anything but letters, digits and ``_``,
folds accents and applies the original Porter stemmer, with no stopword filter. The Atlas
text index gets the analyzer :data:`ANALYZER_NAME` (:func:`analyzer_definition`) doing the
same: ``regexSplit`` on ``[^\\p{L}\\p{M}\\p{N}_]+``, ``lowercase``, ``icuFolding``, then
``snowballStemming`` with Snowball's ``porter`` (the algorithm of Porter's 1980 paper).
Combining marks (``\\p{M}``) belong to a token: text in decomposed form (NFD, as macOS
names files: ``nai`` + U+0308 + ``ve``) makes the token its composed form makes, since
``icuFolding`` composes and strips the marks; a split on them cut ``naïve`` into ``nai`` and
``ve`` on Atlas, while SQLite found it. ``icuFolding`` also case-folds (``ß`` → ``ss``,
``ς`` → ``σ``) and unifies compatibility forms (``ﬁ`` → ``fi``); the twin case-folds too.

:func:`analyze` is that analyzer in Python. The client reduces a query with it by the SQLite
store's term rule (:func:`~vancetope_rag.store.port.shared.query_terms`: distinct terms by token,
stopwords dropped while others remain, at most 64) and sends Atlas only the kept spans
(:func:`query_text`); MongoDB without Atlas Search ranks with the same tokens
(:mod:`.mongo.bm25`).

Where the two stores' stemmers depart (Porter's reference code, which FTS5 follows, leaves
words of one or two letters alone and reads ``-bli`` as ``-ble``; Snowball's ``porter``
follows the paper: ``is`` → ``i``, ``plausibly`` → ``plausibli``), and where ICU folds what
``remove_diacritics`` keeps (``ё`` → ``е``, compatibility forms), the stores' terms differ;
``tests/contract/test_mongo_analysis.py`` pins exactly these departures.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import regex
from nltk.stem.porter import PorterStemmer

from vancetope_rag.domain.retrieval.terms import fold
from vancetope_rag.store.inprocess.bm25 import QueryTerm, query_terms

__all__ = [
    "ANALYZER_NAME",
    "TOKEN_SPLIT",
    "analyze",
    "analyzer_definition",
    "query_text",
    "text_terms",
    "tokenize",
]

#: The name of the custom analyzer the text index defines (ours: ``init`` rewrites it).
ANALYZER_NAME = "vancetope_text"
#: What separates tokens (Java regex, as Atlas's ``regexSplit`` reads it).
TOKEN_SPLIT = r"[^\p{L}\p{M}\p{N}_]+"
#: The same tokens in Python (``regex``, which nltk requires, reads Unicode categories).
_TOKEN = regex.compile(r"[\p{L}\p{M}\p{N}_]+")

# Snowball's ``porter`` is the paper's algorithm, which NLTK's ORIGINAL_ALGORITHM mode follows.
_STEMMER = PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM)


def analyzer_definition() -> dict[str, Any]:
    """The custom analyzer of the text index (an entry of its ``analyzers``)."""
    return {
        "name": ANALYZER_NAME,
        "charFilters": [],
        "tokenizer": {"type": "regexSplit", "pattern": TOKEN_SPLIT},
        "tokenFilters": [
            {"type": "lowercase"},
            {"type": "icuFolding"},
            {"type": "snowballStemming", "stemmerName": "porter"},
        ],
    }


@lru_cache(maxsize=65536)
def _token(word: str) -> str:
    return str(_STEMMER.stem(fold(word.casefold()).casefold(), to_lowercase=False))


def tokenize(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, token)`` per token, offsets in UTF-8 bytes of ``text``
    (:data:`~vancetope_rag.store.port.shared.Tokenize`), tokens as the analyzer makes them."""
    found: list[tuple[int, int, str]] = []
    at, offset = 0, 0
    for m in _TOKEN.finditer(text):
        offset += len(text[at : m.start()].encode("utf-8", errors="replace"))
        end = offset + len(m.group().encode("utf-8", errors="replace"))
        found.append((offset, end, _token(m.group())))
        at, offset = m.end(), end
    return found


def analyze(text: object) -> list[str]:
    """The tokens Atlas indexes for a chunk text (none for a non-string)."""
    return [_token(w) for w in _TOKEN.findall(text)] if isinstance(text, str) else []


def text_terms(text: str) -> list[QueryTerm]:
    """A query's terms by the SQLite store's rule (see the module docstring)."""
    return query_terms(text, tokenize)


def query_text(terms: list[QueryTerm]) -> str:
    """What the ``$search`` ``text`` operator receives: the kept spans, space-separated."""
    return " ".join(t.span for t in terms)
