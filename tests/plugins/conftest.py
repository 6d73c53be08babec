"""Fixtures shared by the provider tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def torch_embed() -> Any:
    """The real embedded model on torch, loaded once per session (conftest keeps the
    provider on torch)."""
    from vancetope_rag.default_plugins.embedded import EmbeddedProvider
    from vancetope_rag.default_plugins.embedded.onnx_backend import BackendOptions
    from vancetope_rag.embeddings import EmbeddingSettings

    provider = EmbeddedProvider(options=BackendOptions(backend="torch"))
    return provider.load(EmbeddingSettings(provider="embedded"), "all-MiniLM-L6-v2").embed_model
