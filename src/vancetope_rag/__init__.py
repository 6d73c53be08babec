"""vancetope-rag: a self-syncing project RAG and pre-turn context injection on LlamaIndex.

The public API, including what plugins build on (``hookimpl``, the provider and extractor
types and helpers; see ``docs/plugin-hooks.md``); everything else is internal and may change.
"""

from __future__ import annotations

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.default_plugins.extractors import html_to_text
from vancetope_rag.domain.cascade import AutoInject, resolve_auto_inject
from vancetope_rag.domain.context_block import render_context_block
from vancetope_rag.domain.migration import Migration, MigrationState
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
from vancetope_rag.extract import (
    ExtractedText,
    Extractor,
    ExtractorDependencyMissing,
    ExtractorRegistry,
    RegisterExtractor,
    UnsupportedTypeError,
    decode_text,
    extract_text,
    extraction_error,
)
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams, Recipe, load_recipe, parse_recipe
from vancetope_rag.services.project_retriever import ProjectRagRetriever
from vancetope_rag.store import open_store
from vancetope_rag.store.llamaindex_store import RagVectorStore

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
    "ExtractedText",
    "ExtractionError",
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
    "RebuildRunningError",
    "Recipe",
    "RecipeError",
    "RegisterExtractor",
    "ReservedNameError",
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
