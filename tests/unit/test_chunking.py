"""The bounded splitting pieces of services/chunking.py: segments, word groups, fixed widths."""

from __future__ import annotations

import pytest

from vancetope_rag.services.indexing.chunking import (
    bounded_splitter,
    segment_text,
    split_fixed_width,
    split_word_groups,
)

PROSE = "First paragraph here.\n\nSecond one, longer, with words.\nA new line. " * 40


@pytest.mark.parametrize(
    "text",
    [
        "",
        "short",
        PROSE,
        "x" * 5000,
        "word " * 3000,
        "a" * 2500 + " tail " + "b" * 10 + "\n\n" + "c" * 999,
        "日本語のテキスト" * 700,
    ],
    ids=["empty", "short", "prose", "run", "words", "mixed", "cjk"],
)
def test_segments_join_back_to_the_text_and_respect_both_bounds(text: str) -> None:
    pieces = segment_text(text, max_chars=1200, max_run=300)
    assert "".join(pieces) == text
    assert all(0 < len(p) <= 1200 for p in pieces)
    for piece in pieces:
        assert all(len(run) <= 300 for run in piece.split())


def test_segments_end_at_a_paragraph_break_when_there_is_one() -> None:
    pieces = segment_text(PROSE, max_chars=500)
    assert len(pieces) > 1
    assert all(p.endswith("\n\n") for p in pieces[:-1])


def test_a_long_run_is_cut_into_fixed_pieces_and_its_neighbours_kept() -> None:
    pieces = segment_text("intro " + "x" * 2500 + " outro", max_chars=10_000, max_run=1000)
    assert pieces == ["intro ", "x" * 1000, "x" * 1000, "x" * 500, " outro"]


def test_word_groups_and_fixed_widths() -> None:
    group = split_word_groups(3)
    assert group("a b") == ["a b"]  # too few words: left for the word-by-word split
    assert group("a b c d e f g") == ["a b c", " d e f", " g"]
    fixed = split_fixed_width(4)
    assert fixed("abc") == ["a", "b", "c"]
    assert fixed("abcdefghij") == ["abcd", "efgh", "ij"]


def test_the_bounded_splitter_keeps_chunks_within_size() -> None:
    splitter = bounded_splitter(32, 4, str.split)
    text = " ".join(f"w{i}" for i in range(1000))  # no punctuation at all
    chunks = splitter.split_text(text)
    assert all(len(c.split()) <= 32 for c in chunks)
    assert " ".join(chunks).split()[0] == "w0" and chunks[-1].split()[-1] == "w999"
    chars = bounded_splitter(16, 0, list).split_text("y" * 200)  # one character per token
    assert all(len(c) <= 16 for c in chars) and "".join(chars) == "y" * 200
