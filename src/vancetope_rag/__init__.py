"""vancetope-rag: a self-syncing project RAG and pre-turn context injection on LlamaIndex.

The public API; everything else is internal and may change.
"""

from __future__ import annotations

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.cascade import AutoInject, resolve_auto_inject
from vancetope_rag.domain.context_block import render_context_block
from vancetope_rag.domain.records import (
    DEFAULT_RAG_NAME,
    Document,
    Hit,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
    RagStatus,
)
from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings, LoadedModel
from vancetope_rag.errors import (
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbeddingConfigError,
    EmbeddingDisabledError,
    EmbeddingError,
    ExtractionError,
    InvalidInputError,
    MissingDependencyError,
    PathNotAllowedError,
    RagAlreadyExistsError,
    RagError,
    RagNotFoundError,
    RecipeError,
    ReservedNameError,
    SettingError,
    StoreError,
)
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams, Recipe, load_recipe
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
    "EmbeddingSettings",
    "EngineConfig",
    "ExtractionError",
    "Hit",
    "IndexState",
    "InvalidInputError",
    "LoadedModel",
    "MissingDependencyError",
    "PathNotAllowedError",
    "Project",
    "ProjectStatus",
    "RagAlreadyExistsError",
    "RagApp",
    "RagError",
    "RagNotFoundError",
    "RagParams",
    "RagRecord",
    "RagStatus",
    "RagVectorStore",
    "Recipe",
    "RecipeError",
    "ReservedNameError",
    "SettingError",
    "StoreError",
    "get_plugin_manager",
    "hookimpl",
    "load_recipe",
    "open_store",
    "render_context_block",
    "resolve_auto_inject",
]
