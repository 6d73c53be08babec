"""The words of a turn and of an excerpt, as the relevance cut compares them.

The cut asks of each hit how much of the turn's own wording it carries (:func:`coverage`):
the share of the turn's distinct content words found in the excerpt. A neighbour in cosine
that shares few of those words is the usual off-topic excerpt of a block; an excerpt that
carries more of them than the turn's first hit is often the one the question is about (on
SciFact's claims, docs/benchmarks.md, "What the block holds"). It is agreement on words, in
no store's scale: the BM25 scores of SQLite, PostgreSQL and Atlas differ, the words do not.

Words are compared after folding (accents, compatibility forms), lower-casing and a light
stemmer (:func:`light_stem`): Harman's "S" stemmer for plurals, then ``-ing`` and ``-ed``.
A full Porter stemmer conflates too much for this (``general`` and ``generate`` both become
``gener``) and cost the cut precision on SciFact. English function words
(:data:`STOPWORDS`) do not count: a turn made only of them ("Why?", "what is it?") has no
word to judge its hits by, and the cut judges it by the gap alone. Pure, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

__all__ = [
    "MAX_QUERY_TERMS",
    "STOPWORDS",
    "coverage",
    "fold",
    "light_stem",
    "turn_words",
    "words_of",
]

#: English function words: dropped from lexical queries (never all of a query's words: a query
#: made only of stopwords keeps them) and from the words a turn is judged by (always). Their
#: IDF is near zero, and their posting lists are the longest.
_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because
    been before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how i
    if in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

#: A query keeps at most this many distinct terms, in the lexical search and in the cut alike:
#: a pasted page must not become a query of thousands of OR-ed terms (the FTS5 path's cost
#: grows with every posting list it merges), nor cost the cut more than a long question.
MAX_QUERY_TERMS = 64

#: Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, Japanese kana,
#: Han ideographs): ``\w+`` reads a whole run of them as one word, so 東京 would be found in
#: 東京、大阪 and not in 東京の天気. They hold no word the cut can compare: they end a word
#: (``Redisの設定`` carries ``redis``), and a turn written in them is not judged by its words.
_NO_SPACE = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3005-\u3007\u3021-\u3029\u3031-\u3035"
    "\u303b\u303c\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003ffff"
)
_WORD = re.compile(rf"[^\W{_NO_SPACE}]+")
_WORD_TAIL = re.compile(rf"[^\W{_NO_SPACE}]*")
_UNREADABLE = re.compile(rf"[{_NO_SPACE}]")


def fold(text: str) -> str:
    """The text with accents removed (``café`` → ``cafe``, as SQLite's ``remove_diacritics 2``),
    compatibility forms unified, NUL characters as spaces."""
    decomposed = unicodedata.normalize("NFKD", text.replace("\x00", " "))
    return _NON_ASCII.sub(_without_marks, decomposed)  # ASCII has no combining mark


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _without_marks(run: re.Match[str]) -> str:
    return "".join(c for c in run.group() if not unicodedata.combining(c))


def light_stem(word: str) -> str:
    """A lower-case word without its plural (Harman's S stemmer: ``studies`` → ``study``,
    ``cases`` → ``case``, ``cells`` → ``cell``; ``virus``, ``class`` stay) and then without
    ``-ing`` or ``-ed`` when three letters remain (``binding`` → ``bind``)."""
    if len(word) > 3:
        if word.endswith("ies") and not word.endswith(("eies", "aies")):
            word = word[:-3] + "y"
        elif word.endswith("s") and not word.endswith(("us", "ss")):
            word = word[:-1]  # -es → -e and -s → '' both drop the s
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


#: The stems of words already seen: a turn's excerpts repeat most of their words.
_stem = lru_cache(maxsize=65536)(light_stem)


def _folded(text: str) -> str:
    """``text`` lower-cased and folded (an ASCII text needs no folding)."""
    return text.lower() if text.isascii() else fold(text).lower()


def words_of(text: str) -> set[str]:
    """The distinct words of ``text`` (folded, lower-cased, stemmed), stopwords included."""
    return {_stem(w) for w in set(_WORD.findall(_folded(text)))}


def turn_words(text: str, most: int = MAX_QUERY_TERMS) -> frozenset[str]:
    """The words a turn is judged by: its first ``most`` distinct words without
    :data:`STOPWORDS` (empty for a turn without any other word). A page pasted as a question
    is judged by its opening words, as the lexical search queries them.

    Unlike a lexical query, a turn of function words only does not fall back to them: which
    excerpt happens to hold "why" or "is" says nothing of what it is about, and a follow-up
    such as "Why?" would keep only that one. A turn with text in a script written without
    spaces (:data:`_NO_SPACE`) has no words either: judged by the few it spaces (a Latin
    name), its excerpts would be cut far harder than a turn whose every word counts.
    """
    folded = _folded(text)
    if not text.isascii() and _UNREADABLE.search(folded):
        return frozenset()
    found = _WORD.findall(folded)
    words: dict[str, None] = {}  # distinct, in order of appearance
    for word in (w for w in found if w not in STOPWORDS):
        words.setdefault(_stem(word))
        if len(words) == most:
            break
    return frozenset(words)


def coverage(turn: frozenset[str], texts: Sequence[str]) -> list[float]:
    """For each of ``texts``, the share of the ``turn``'s words (:func:`turn_words`) it
    contains (0 to 1; all 0 for a turn without words).

    Only the words that could stem to one of the turn's are stemmed: a word whose stem is
    ``s`` starts with ``s`` (with ``s``'s final ``y`` dropped: ``studies`` → ``study``), so a
    search for each of those starts (``str.find``, in C) finds them. The result is what
    ``len(turn & words_of(text)) / len(turn)`` gives, at a small part of its cost: the cut
    runs on every turn.
    """
    if not turn:
        return [0.0] * len(texts)
    starts = {w[:-1] if w.endswith("y") and len(w) > 1 else w for w in turn}
    shares = []
    for text in texts:
        folded = _folded(text)
        found: set[str] = set()
        for start in starts:
            at = folded.find(start)
            while at != -1:
                before = folded[at - 1] if at else " "
                if not _is_word_char(before):  # a word starts here
                    end = _WORD_TAIL.match(folded, at + len(start)).end()  # type: ignore[union-attr]
                    stem = _stem(folded[at:end])
                    if stem in turn:
                        found.add(stem)
                at = folded.find(start, at + 1)
        shares.append(len(found) / len(turn))
    return shares


def _is_word_char(char: str) -> bool:
    """Whether ``char`` continues a word (:data:`_WORD`): a letter, digit or underscore outside
    the scripts written without spaces."""
    if char.isascii():
        return char.isalnum() or char == "_"
    return (char.isalnum() or char == "_") and not _UNREADABLE.match(char)
