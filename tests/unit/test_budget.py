"""The <rag-context> token budget (domain/block/budget.py): never over it, lowest-ranked excerpts
dropped whole first, a lone excerpt cut at a sentence boundary."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vancetope_rag.domain.block.budget import ELLIPSIS, fit_to_budget
from vancetope_rag.domain.block.context_block import render_context_block
from vancetope_rag.domain.records import Hit
from vancetope_rag.services.tokens import count_tokens


def _hits(texts: list[str]) -> list[Hit]:
    return [
        Hit(score=0.9 - i / 100, text=t, source_ref=f"d{i}", path=f"documents/d{i}.md")
        for i, t in enumerate(texts)
    ]


def _fit(hits: list[Hit], budget: int) -> tuple[str | None, list[Hit]]:
    return fit_to_budget(hits, render_context_block, count_tokens, budget)


SENTENCES = "Zebras graze at dawn. Their stripes confuse flies! Do lions mind? " * 8


def test_a_block_within_the_budget_is_unchanged() -> None:
    hits = _hits(["Short excerpt one.", "Short excerpt two."])
    block, shown = _fit(hits, 1500)
    assert block == render_context_block(hits) and shown == hits


def test_lowest_ranked_excerpts_are_dropped_whole_first() -> None:
    hits = _hits([f"Excerpt {i}. " + "words " * 60 for i in range(5)])
    full = count_tokens(render_context_block(hits) or "")
    block, shown = _fit(hits, full - 10)
    assert block is not None and count_tokens(block) <= full - 10
    assert shown == hits[:4]  # only the last one went, and whole
    assert all(h.text.strip() in block for h in shown)
    two = count_tokens(render_context_block(hits[:2]) or "")
    assert _fit(hits, two)[1] == hits[:2]


def test_a_lone_excerpt_over_the_budget_is_cut_at_a_sentence() -> None:
    hits = _hits([SENTENCES, "second"])
    block, shown = _fit(hits, 80)
    assert block is not None and count_tokens(block) <= 80
    assert len(shown) == 1 and shown[0].text.endswith(ELLIPSIS)
    cut = shown[0].text.removesuffix(ELLIPSIS)
    assert SENTENCES.startswith(cut) and cut[-1] in ".!?"
    # one endless sentence: cut between words
    block, shown = _fit(_hits(["word " * 2000]), 80)
    assert block is not None and shown[0].text.startswith("word word") and count_tokens(block) <= 80
    # not even the template fits: no block
    assert _fit(hits, 10) == (None, [])


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(min_size=0, max_size=600), min_size=1, max_size=6),
    budget=st.integers(min_value=1, max_value=600),
)
def test_never_over_the_budget(texts: list[str], budget: int) -> None:
    hits = _hits(texts)
    block, shown = _fit(hits, budget)
    if block is None:
        assert shown == []
        return
    assert count_tokens(block) <= budget
    # whole excerpts are a prefix of the ranking; only a lone first excerpt is ever cut
    if len(shown) > 1 or not shown[0].text.endswith(ELLIPSIS):
        assert shown == hits[: len(shown)]
