"""The relevance cut's word rules: how much of the turn's wording each hit carries."""

from __future__ import annotations

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.relevance import (
    WORDED_FUSED_SHARE,
    WORDS_SHARE,
    cut_by_relevance,
)
from vancetope_rag.domain.retrieval.terms import (
    MAX_QUERY_TERMS,
    coverage,
    light_stem,
    turn_words,
)

QUESTION = "Do statins increase blood cholesterol levels?"


def _hit(i: int, score: float, text: str, fused: float | None = None, lexical: int = 5) -> Hit:
    return Hit(
        score=score,
        text=text,
        source_ref=f"d{i}",
        chunk_id=f"c{i}",
        fused_score=fused,
        dense_rank=i + 1 if fused is not None else None,
        lexical_rank=lexical if fused is not None else None,
    )


def test_light_stem_drops_plurals_and_verb_endings_only() -> None:
    assert light_stem("studies") == "study"
    assert light_stem("cases") == "case"
    assert light_stem("cells") == "cell"
    assert light_stem("binding") == "bind"
    assert light_stem("increased") == "increas"
    assert light_stem("increases") == "increase"  # Harman's S stemmer: -es -> -e
    for kept in ("virus", "class", "gas", "red", "sing"):
        assert light_stem(kept) == kept
    # a full Porter stemmer would make these one word
    assert light_stem("general") != light_stem("generate")


def test_turn_words_fold_and_drop_stopwords() -> None:
    assert turn_words("Do Statins increase the Blood cholesterol?") == {
        "statin",
        "increase",
        "blood",
        "cholesterol",
    }
    assert turn_words("Café naïve") == {"cafe", "naive"}
    assert turn_words("what is it") == frozenset()  # function words only: none to judge by
    assert turn_words("?!") == frozenset()


def test_coverage_is_the_share_of_the_turn_words_a_text_carries() -> None:
    words = turn_words(QUESTION)  # statin, increase, blood, cholesterol, level
    assert coverage(words, ["Statin therapy lowers LDL cholesterol.", "Nothing related."]) == [
        0.4,
        0.0,
    ]
    assert coverage(frozenset(), ["anything"]) == [0.0]


def test_a_near_neighbour_that_shares_few_of_the_turn_words_goes() -> None:
    hits = [
        _hit(0, 0.80, "Statins increase blood cholesterol levels in some patients."),
        _hit(1, 0.78, "Blood cholesterol levels rise with age and statins lower them."),
        _hit(2, 0.76, "Exercise improves cardiovascular fitness in older adults."),
    ]
    # without the turn's text only the gap judges: all three stay
    assert cut_by_relevance(hits, 0.15).kept == tuple(hits)
    result = cut_by_relevance(hits, 0.15, query=QUESTION)
    assert result.kept == (hits[0], hits[1])
    assert [(d.hit, d.reason) for d in result.dropped] == [
        (
            hits[2],
            f"words 0.00 of the turn's < {WORDS_SHARE:.2f} of the best-worded hit's 1.00",
        )
    ]
    assert "best-worded hit's share of the turn's words" in result.cut.keeps


def test_a_hit_closer_to_the_turn_words_than_the_first_stays_beyond_the_gap() -> None:
    """SciFact's "Statins increase blood cholesterol": the relevant abstract is second in
    the fused order, 0.16 of cosine below an off-topic first hit that carries fewer of the
    words."""
    first = _hit(0, 0.80, "Pleiotropic effects of statins on cholesterol.", fused=0.0328)
    worded = _hit(1, 0.64, "Statins, blood cholesterol levels: an increase?", fused=0.0280)
    weak = _hit(2, 0.63, "Statins and blood cholesterol levels.", fused=0.0200)
    result = cut_by_relevance([first, worded, weak], 0.15, query=QUESTION)
    assert 0.0280 / 0.0328 >= WORDED_FUSED_SHARE > 0.0200 / 0.0328
    assert result.kept == (first, worded)
    assert [d.hit for d in result.dropped] == [weak]
    assert result.dropped[0].reason.startswith("gap 0.170 > 0.150")
    # dense mode has no fused score to tell the two apart: the gap alone
    dense = [_hit(i, h.score, h.text) for i, h in enumerate((first, worded, weak))]
    assert cut_by_relevance(dense, 0.15, query=QUESTION).kept == (dense[0],)


def test_the_word_rules_step_aside_when_no_hit_carries_the_turn_words() -> None:
    """A question in another language than its documents (a multilingual model finds
    them by meaning): no hit shares a word, so words cannot tell the hits apart."""
    hits = [
        _hit(0, 0.80, "Statins lower blood cholesterol."),
        _hit(1, 0.75, "Cholesterol-lowering drugs and the heart."),
    ]
    result = cut_by_relevance(hits, 0.15, query="Senken Statine das Cholesterin im Blut?")
    assert result.kept == tuple(hits)
    assert "words" not in result.cut.keeps


def test_a_page_pasted_as_a_question_is_judged_by_its_opening_words() -> None:
    pasted = " ".join(f"term{i} and term{i}" for i in range(1000))
    words = turn_words(pasted)
    assert words == {f"term{i}" for i in range(MAX_QUERY_TERMS)}
    assert turn_words("alpha beta gamma", most=2) == {"alpha", "beta"}


def test_a_turn_of_function_words_only_is_judged_by_the_gap_alone() -> None:
    """A follow-up such as "Why?" or "what is it?" has no word of its own: an excerpt that
    happens to hold "why" or "is" says no more about the subject than one that does not."""
    hits = [
        _hit(0, 0.80, "Why the cache exists: speed."),
        _hit(1, 0.78, "The cache keeps pages warm."),
        _hit(2, 0.77, "What it is: a store in front of the database."),
    ]
    for question in ("Why?", "what is it?", "And then?\nHow?"):
        result = cut_by_relevance(hits, 0.15, query=question)
        assert result.kept == tuple(hits), question
        assert "words" not in result.cut.keeps


def test_a_turn_in_a_script_written_without_spaces_is_judged_by_the_gap_alone() -> None:
    """``\\w+`` reads a run of Japanese or Chinese as one word: the turn 東京 would find
    itself in 東京、大阪 but not in 東京の天気は晴れ, and drop that excerpt as carrying none
    of its words. Words the cut cannot tell apart do not judge a turn."""
    hits = [_hit(0, 0.80, "東京、大阪"), _hit(1, 0.78, "東京の天気は晴れ。")]
    for question in ("東京", "東京の天気は？", "Redisの設定方法", "สวัสดีครับ"):
        assert turn_words(question) == frozenset(), question
        result = cut_by_relevance(hits, 0.15, query=question)
        assert result.kept == tuple(hits), question
        assert "words" not in result.cut.keeps


def test_a_word_set_in_text_without_spaces_still_counts() -> None:
    """Japanese writes a Latin name against its particles (Redisの設定): the excerpt carries
    the turn's "redis" as much as one that spaces it."""
    hits = [
        _hit(0, 0.80, "Redis keeps its settings in redis.conf."),
        _hit(1, 0.78, "Redisの設定ファイル"),
        _hit(2, 0.77, "Memcached settings"),
    ]
    assert coverage(turn_words("Redis settings"), [h.text for h in hits]) == [1.0, 0.5, 0.5]
    assert cut_by_relevance(hits, 0.15, query="Redis settings").kept == tuple(hits)
