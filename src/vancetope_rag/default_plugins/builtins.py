"""Built-in embedding providers and extractors, contributed through the extension hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vancetope_rag.embeddings import builtin_providers
from vancetope_rag.extract import DEFAULT_EXTRACTORS
from vancetope_rag.hookspecs import hookimpl


@hookimpl
def register_embedding_providers(register: Callable[[Any], None]) -> None:
    for provider in builtin_providers():
        register(provider)


@hookimpl
def register_extractors(register: Callable[..., None]) -> None:
    for mime_types, extractor, extensions in DEFAULT_EXTRACTORS:
        register(mime_types, extractor, extensions=extensions)
