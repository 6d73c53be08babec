"""``vancetope-rag-embedded`` for ``llm embed``: the vectors our ``embedded`` provider makes.

The model is loaded on the first embedding, never at import: llm imports every plugin on
every command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from llm.models import EmbeddingModel

MODEL_ID = "vancetope-rag-embedded"


class EmbeddedModel(EmbeddingModel):
    """all-MiniLM-L6-v2 as vancetope-rag embeds document chunks with it (384 dimensions)."""

    model_id = MODEL_ID
    batch_size = 32

    def __init__(self) -> None:
        self._model: Any = None

    def _embed_model(self) -> Any:
        if self._model is None:
            from vancetope_rag import EmbeddingRegistry, EmbeddingSettings, get_plugin_manager

            registry = EmbeddingRegistry()
            get_plugin_manager().hook.register_embedding_providers(register=registry.register)
            self._model = registry.load(EmbeddingSettings(provider="embedded")).embed_model
        return self._model

    def embed_batch(
        self, items: Iterable[str | bytes], *, key: str | None = None
    ) -> Iterator[list[float]]:
        # keyless: `key` is accepted for llm's call and unused
        texts = [i.decode("utf-8") if isinstance(i, bytes) else i for i in items]
        yield from self._embed_model().get_text_embedding_batch(texts)
