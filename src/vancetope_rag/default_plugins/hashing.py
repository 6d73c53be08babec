"""The ``hashing`` provider: lexical feature hashing — keyless, instant, not semantic.

For smoke tests and CI: models are named ``hashing-<dim>`` (8 to 4096 dimensions).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding

from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings, LoadedModel
from vancetope_rag.errors import EmbeddingConfigError
from vancetope_rag.hookspecs import hookimpl

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedding(BaseEmbedding):
    """Feature-hashing bag of words (unit vectors). Lexical only; keyless and instant."""

    dimension: int = 256

    @classmethod
    def class_name(cls) -> str:
        return "HashingEmbedding"

    def _vector(self, text: str) -> list[float]:
        v = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v[h % self.dimension] += 1.0 if (h >> 32) & 1 else -1.0
        n = float(np.linalg.norm(v))
        if n == 0.0:
            v[0] = 1.0
            n = 1.0
        out: list[float] = (v / n).tolist()
        return out

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._vector(text)


class HashingProvider:
    """Provider ``hashing``: :class:`HashingEmbedding` with the dimension its model names."""

    name = "hashing"

    def default_model(self) -> str:
        return "hashing-256"

    def check_model(self, model: str) -> int:
        """The dimension ``hashing-<dim>`` names; refuses any other name."""
        m = re.fullmatch(r"hashing-(\d+)", model)
        if not m or not 8 <= int(m.group(1)) <= 4096:
            raise EmbeddingConfigError(
                f"unknown hashing model {model!r}; use hashing-<dim>, e.g. hashing-256"
            )
        return int(m.group(1))

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        dim = self.check_model(model)
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=HashingEmbedding(dimension=dim, embed_batch_size=256),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


# tryfirst: a third-party plugin registering the same name replaces the built-in.
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(HashingProvider())
