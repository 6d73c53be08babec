"""vancetope-rag: a self-syncing project RAG and pre-turn context injection on LlamaIndex.

The public API, including what plugins build on (``hookimpl``, the provider and extractor
types and helpers; see ``docs/plugin-hooks.md``); everything else is internal and may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.default_plugins.extractors import html_to_text
    from vancetope_rag.domain.cascade import AutoInject, resolve_auto_inject
    from vancetope_rag.domain.context_block import render_context_block
    from vancetope_rag.domain.rebuilds import Migration, MigrationState, Rebuild, RebuildState
    from vancetope_rag.domain.records import (
        DEFAULT_RAG_NAME,
        Document,
        Hit,
        IndexState,
        Project,
        ProjectStatus,
        RagRecord,
        RagState,
        RagStatus,
    )
    from vancetope_rag.embeddings import (
        EmbeddingProvider,
        EmbeddingRegistry,
        EmbeddingSettings,
        LoadedModel,
    )
    from vancetope_rag.errors import (
        DimensionMismatchError,
        DocumentNotFoundError,
        EmbeddingConfigError,
        EmbeddingDisabledError,
        EmbeddingError,
        ExtractionError,
        InvalidInputError,
        MissingDependencyError,
        NoRebuildError,
        PathNotAllowedError,
        RagAlreadyExistsError,
        RagError,
        RagNotFoundError,
        RebuildRunningError,
        RecipeError,
        ReservedNameError,
        SettingError,
        StoreError,
    )
    from vancetope_rag.extraction.registry import (
        ExtractedText,
        Extraction,
        ExtractionTimeoutError,
        ExtractOptions,
        Extractor,
        ExtractorDependencyMissing,
        ExtractorRegistry,
        NoTextLayerError,
        OcrConfig,
        RegisterExtractor,
        Section,
        UnsupportedTypeError,
        decode_text,
        extract_text,
        extraction_error,
    )
    from vancetope_rag.hookspecs import hookimpl
    from vancetope_rag.plugins import get_plugin_manager
    from vancetope_rag.recipes import RagParams, Recipe, load_recipe, parse_recipe
    from vancetope_rag.services.retrieval.retriever import ProjectRagRetriever
    from vancetope_rag.store import open_store
    from vancetope_rag.store.llamaindex_store import RagVectorStore

# Names are imported on first use: ``import vancetope_rag.extraction.registry`` (an extraction
# worker process, a plugin) must not pay for LlamaIndex and the app.
_EXPORTS: dict[str, str] = {
    "RagApp": "vancetope_rag.app",
    "EngineConfig": "vancetope_rag.config",
    "html_to_text": "vancetope_rag.default_plugins.extractors",
    "AutoInject": "vancetope_rag.domain.cascade",
    "resolve_auto_inject": "vancetope_rag.domain.cascade",
    "render_context_block": "vancetope_rag.domain.context_block",
    "Migration": "vancetope_rag.domain.rebuilds",
    "MigrationState": "vancetope_rag.domain.rebuilds",
    "Rebuild": "vancetope_rag.domain.rebuilds",
    "RebuildState": "vancetope_rag.domain.rebuilds",
    "DEFAULT_RAG_NAME": "vancetope_rag.domain.records",
    "Document": "vancetope_rag.domain.records",
    "Hit": "vancetope_rag.domain.records",
    "IndexState": "vancetope_rag.domain.records",
    "Project": "vancetope_rag.domain.records",
    "ProjectStatus": "vancetope_rag.domain.records",
    "RagRecord": "vancetope_rag.domain.records",
    "RagState": "vancetope_rag.domain.records",
    "RagStatus": "vancetope_rag.domain.records",
    "EmbeddingProvider": "vancetope_rag.embeddings",
    "EmbeddingRegistry": "vancetope_rag.embeddings",
    "EmbeddingSettings": "vancetope_rag.embeddings",
    "LoadedModel": "vancetope_rag.embeddings",
    "DimensionMismatchError": "vancetope_rag.errors",
    "DocumentNotFoundError": "vancetope_rag.errors",
    "EmbeddingConfigError": "vancetope_rag.errors",
    "EmbeddingDisabledError": "vancetope_rag.errors",
    "EmbeddingError": "vancetope_rag.errors",
    "ExtractionError": "vancetope_rag.errors",
    "InvalidInputError": "vancetope_rag.errors",
    "MissingDependencyError": "vancetope_rag.errors",
    "NoRebuildError": "vancetope_rag.errors",
    "PathNotAllowedError": "vancetope_rag.errors",
    "RagAlreadyExistsError": "vancetope_rag.errors",
    "RagError": "vancetope_rag.errors",
    "RagNotFoundError": "vancetope_rag.errors",
    "RebuildRunningError": "vancetope_rag.errors",
    "RecipeError": "vancetope_rag.errors",
    "ReservedNameError": "vancetope_rag.errors",
    "SettingError": "vancetope_rag.errors",
    "StoreError": "vancetope_rag.errors",
    "ExtractedText": "vancetope_rag.extraction.registry",
    "Extraction": "vancetope_rag.extraction.registry",
    "ExtractionTimeoutError": "vancetope_rag.extraction.registry",
    "ExtractOptions": "vancetope_rag.extraction.registry",
    "NoTextLayerError": "vancetope_rag.extraction.registry",
    "OcrConfig": "vancetope_rag.extraction.registry",
    "Section": "vancetope_rag.extraction.registry",
    "Extractor": "vancetope_rag.extraction.registry",
    "ExtractorDependencyMissing": "vancetope_rag.extraction.registry",
    "ExtractorRegistry": "vancetope_rag.extraction.registry",
    "RegisterExtractor": "vancetope_rag.extraction.registry",
    "UnsupportedTypeError": "vancetope_rag.extraction.registry",
    "decode_text": "vancetope_rag.extraction.registry",
    "extract_text": "vancetope_rag.extraction.registry",
    "extraction_error": "vancetope_rag.extraction.registry",
    "hookimpl": "vancetope_rag.hookspecs",
    "get_plugin_manager": "vancetope_rag.plugins",
    "RagParams": "vancetope_rag.recipes",
    "Recipe": "vancetope_rag.recipes",
    "load_recipe": "vancetope_rag.recipes",
    "parse_recipe": "vancetope_rag.recipes",
    "ProjectRagRetriever": "vancetope_rag.services.retrieval.retriever",
    "open_store": "vancetope_rag.store",
    "RagVectorStore": "vancetope_rag.store.llamaindex_store",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'vancetope_rag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DEFAULT_RAG_NAME",
    "AutoInject",
    "DimensionMismatchError",
    "Document",
    "DocumentNotFoundError",
    "EmbeddingConfigError",
    "EmbeddingDisabledError",
    "EmbeddingError",
    "EmbeddingProvider",
    "EmbeddingRegistry",
    "EmbeddingSettings",
    "EngineConfig",
    "ExtractOptions",
    "ExtractedText",
    "Extraction",
    "ExtractionError",
    "ExtractionTimeoutError",
    "Extractor",
    "ExtractorDependencyMissing",
    "ExtractorRegistry",
    "Hit",
    "IndexState",
    "InvalidInputError",
    "LoadedModel",
    "Migration",
    "MigrationState",
    "MissingDependencyError",
    "NoRebuildError",
    "NoTextLayerError",
    "OcrConfig",
    "PathNotAllowedError",
    "Project",
    "ProjectRagRetriever",
    "ProjectStatus",
    "RagAlreadyExistsError",
    "RagApp",
    "RagError",
    "RagNotFoundError",
    "RagParams",
    "RagRecord",
    "RagState",
    "RagStatus",
    "RagVectorStore",
    "Rebuild",
    "RebuildRunningError",
    "RebuildState",
    "Recipe",
    "RecipeError",
    "RegisterExtractor",
    "ReservedNameError",
    "Section",
    "SettingError",
    "StoreError",
    "UnsupportedTypeError",
    "decode_text",
    "extract_text",
    "extraction_error",
    "get_plugin_manager",
    "hookimpl",
    "html_to_text",
    "load_recipe",
    "open_store",
    "parse_recipe",
    "render_context_block",
    "resolve_auto_inject",
]
