"""``coverage`` is a fast scan for what ``words_of`` gives: the same shares for any text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vancetope_rag.domain.retrieval.terms import coverage, turn_words, words_of

#: Pieces that stress the scan: word joiners, combining marks, digits, scripts written
#: without spaces, the endings the stemmer takes off, and characters whose case or form folds.
_PIECES = [
    *(" ", "\n", "_", "-", ".", "'", "\x00", "\u0301", "\u0308", "\u093e", "\u0e31"),
    *("é", "ß", "İ", "ﬁ", "Σ", "ς", "①", "²", "½", "٣", "東京", "の", "天気", "ｶﾀ"),
    *("p53", "HTTP", "503", "y", "ies", "es", "s", "ing", "ed", "stud", "study"),
    *("studies", "studied", "case", "cases", "bleed", "bleeds", "a", "the", "is"),
]
_PIECE = st.one_of(st.sampled_from(_PIECES), st.text(max_size=3))
_TURN = st.lists(_PIECE, min_size=1, max_size=10).map("".join)


@settings(max_examples=1500, deadline=None)
@given(turn=_TURN, data=st.data())
def test_coverage_equals_the_share_of_the_turn_words_in_words_of(
    turn: str, data: st.DataObject
) -> None:
    words = turn_words(turn)
    # texts made of the turn's own pieces, its words and their starts, and anything else
    own = [turn[i:j] for i in range(len(turn)) for j in range(i + 1, min(len(turn), i + 8) + 1)]
    known = [" ", *own, *sorted(words), *(w[:-1] for w in words)]
    pieces = st.one_of(_PIECE, st.sampled_from(known))
    texts = data.draw(st.lists(st.lists(pieces, max_size=10).map("".join), max_size=4))
    expected = [len(words & words_of(t)) / len(words) if words else 0.0 for t in texts]
    assert coverage(words, texts) == expected
