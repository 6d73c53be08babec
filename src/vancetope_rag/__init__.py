"""vancetope-rag: a self-syncing project RAG and pre-turn context injection on LlamaIndex.

The public API, including what plugins build on (``hookimpl``, the provider and extractor
types and helpers; see ``docs/plugin-hooks.md``); everything else is internal and may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # What a type checker sees of the lazy names below: the same names from the same modules
    # (tests/unit/test_public_api.py checks it); ``X as X`` marks each one re-exported.
    from vancetope_rag.app import RagApp as RagApp
    from vancetope_rag.config import EngineConfig as EngineConfig
    from vancetope_rag.domain.block.context_block import (
        render_context_block as render_context_block,
    )
    from vancetope_rag.domain.rebuilds import Migration as Migration
    from vancetope_rag.domain.rebuilds import MigrationState as MigrationState
    from vancetope_rag.domain.rebuilds import Rebuild as Rebuild
    from vancetope_rag.domain.rebuilds import RebuildState as RebuildState
    from vancetope_rag.domain.records import DEFAULT_RAG_NAME as DEFAULT_RAG_NAME
    from vancetope_rag.domain.records import Document as Document
    from vancetope_rag.domain.records import Hit as Hit
    from vancetope_rag.domain.records import IndexState as IndexState
    from vancetope_rag.domain.records import Project as Project
    from vancetope_rag.domain.records import ProjectStatus as ProjectStatus
    from vancetope_rag.domain.records import RagRecord as RagRecord
    from vancetope_rag.domain.records import RagState as RagState
    from vancetope_rag.domain.records import RagStatus as RagStatus
    from vancetope_rag.domain.settings.cascade import AutoInject as AutoInject
    from vancetope_rag.domain.settings.cascade import resolve_auto_inject as resolve_auto_inject
    from vancetope_rag.embeddings import EmbeddingProvider as EmbeddingProvider
    from vancetope_rag.embeddings import EmbeddingRegistry as EmbeddingRegistry
    from vancetope_rag.embeddings import EmbeddingSettings as EmbeddingSettings
    from vancetope_rag.embeddings import LoadedModel as LoadedModel
    from vancetope_rag.errors import ApiConfigError as ApiConfigError
    from vancetope_rag.errors import BridgeDependencyMissingError as BridgeDependencyMissingError
    from vancetope_rag.errors import BridgeError as BridgeError
    from vancetope_rag.errors import BridgeLimitError as BridgeLimitError
    from vancetope_rag.errors import BridgeUnsupportedTypeError as BridgeUnsupportedTypeError
    from vancetope_rag.errors import (
        BridgeVisionNotConfiguredError as BridgeVisionNotConfiguredError,
    )
    from vancetope_rag.errors import BridgeVisionUnavailableError as BridgeVisionUnavailableError
    from vancetope_rag.errors import CopyConflictError as CopyConflictError
    from vancetope_rag.errors import DimensionMismatchError as DimensionMismatchError
    from vancetope_rag.errors import DimensionPausedError as DimensionPausedError
    from vancetope_rag.errors import DocumentNotFoundError as DocumentNotFoundError
    from vancetope_rag.errors import EmbeddingConfigError as EmbeddingConfigError
    from vancetope_rag.errors import EmbeddingDisabledError as EmbeddingDisabledError
    from vancetope_rag.errors import EmbeddingError as EmbeddingError
    from vancetope_rag.errors import EngineClosedError as EngineClosedError
    from vancetope_rag.errors import ExtractionError as ExtractionError
    from vancetope_rag.errors import ExtractionTimeoutError as ExtractionTimeoutError
    from vancetope_rag.errors import (
        ExtractorDependencyMissingError as ExtractorDependencyMissingError,
    )
    from vancetope_rag.errors import (
        ExtractorProgramMissingError as ExtractorProgramMissingError,
    )
    from vancetope_rag.errors import ExtractorUnavailableError as ExtractorUnavailableError
    from vancetope_rag.errors import FileChangedWhileReadError as FileChangedWhileReadError
    from vancetope_rag.errors import FileTooLargeError as FileTooLargeError
    from vancetope_rag.errors import InvalidInputError as InvalidInputError
    from vancetope_rag.errors import MissingDependencyError as MissingDependencyError
    from vancetope_rag.errors import NoRebuildError as NoRebuildError
    from vancetope_rag.errors import NoTextError as NoTextError
    from vancetope_rag.errors import NoTextLayerError as NoTextLayerError
    from vancetope_rag.errors import OnnxExportRefusedError as OnnxExportRefusedError
    from vancetope_rag.errors import PathNotAllowedError as PathNotAllowedError
    from vancetope_rag.errors import ProjectClosedError as ProjectClosedError
    from vancetope_rag.errors import ProjectNotFoundError as ProjectNotFoundError
    from vancetope_rag.errors import ProjectRagDisabledError as ProjectRagDisabledError
    from vancetope_rag.errors import ProviderUnavailableError as ProviderUnavailableError
    from vancetope_rag.errors import RagAlreadyExistsError as RagAlreadyExistsError
    from vancetope_rag.errors import RagError as RagError
    from vancetope_rag.errors import RagNotFoundError as RagNotFoundError
    from vancetope_rag.errors import RebuildRunningError as RebuildRunningError
    from vancetope_rag.errors import RecipeError as RecipeError
    from vancetope_rag.errors import RerankError as RerankError
    from vancetope_rag.errors import ReservedNameError as ReservedNameError
    from vancetope_rag.errors import SettingError as SettingError
    from vancetope_rag.errors import StoreCorruptError as StoreCorruptError
    from vancetope_rag.errors import StoreError as StoreError
    from vancetope_rag.errors import StoreFullError as StoreFullError
    from vancetope_rag.errors import TextTooLongError as TextTooLongError
    from vancetope_rag.errors import ToolArgumentError as ToolArgumentError
    from vancetope_rag.errors import UnsupportedTypeError as UnsupportedTypeError
    from vancetope_rag.extraction.html import html_to_text as html_to_text
    from vancetope_rag.extraction.registry import ExtractedText as ExtractedText
    from vancetope_rag.extraction.registry import Extraction as Extraction
    from vancetope_rag.extraction.registry import ExtractOptions as ExtractOptions
    from vancetope_rag.extraction.registry import Extractor as Extractor
    from vancetope_rag.extraction.registry import (
        ExtractorDependencyMissing as ExtractorDependencyMissing,
    )
    from vancetope_rag.extraction.registry import ExtractorRegistry as ExtractorRegistry
    from vancetope_rag.extraction.registry import OcrConfig as OcrConfig
    from vancetope_rag.extraction.registry import RegisterExtractor as RegisterExtractor
    from vancetope_rag.extraction.registry import Section as Section
    from vancetope_rag.extraction.registry import decode_any as decode_any
    from vancetope_rag.extraction.registry import decode_text as decode_text
    from vancetope_rag.extraction.registry import extract_text as extract_text
    from vancetope_rag.extraction.registry import extraction_error as extraction_error
    from vancetope_rag.hookspecs import hookimpl as hookimpl
    from vancetope_rag.plugins import get_plugin_manager as get_plugin_manager
    from vancetope_rag.recipes import RagParams as RagParams
    from vancetope_rag.recipes import Recipe as Recipe
    from vancetope_rag.recipes import load_recipe as load_recipe
    from vancetope_rag.recipes import parse_recipe as parse_recipe
    from vancetope_rag.rerankers import RerankerRegistry as RerankerRegistry
    from vancetope_rag.rerankers import RerankSettings as RerankSettings
    from vancetope_rag.services.retrieval.retriever import (
        ProjectRagRetriever as ProjectRagRetriever,
    )
    from vancetope_rag.store import open_store as open_store
    from vancetope_rag.store.port.llamaindex_store import RagVectorStore as RagVectorStore

# Names are imported on first use: ``import vancetope_rag.extraction.registry`` (an extraction
# worker process, a plugin) must not pay for LlamaIndex and the app. The one list of the
# public names: ``__all__`` is built from it.
_EXPORTS: dict[str, str] = {
    "RagApp": "vancetope_rag.app",
    "EngineConfig": "vancetope_rag.config",
    "html_to_text": "vancetope_rag.extraction.html",
    "AutoInject": "vancetope_rag.domain.settings.cascade",
    "resolve_auto_inject": "vancetope_rag.domain.settings.cascade",
    "render_context_block": "vancetope_rag.domain.block.context_block",
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
    "ApiConfigError": "vancetope_rag.errors",
    "BridgeDependencyMissingError": "vancetope_rag.errors",
    "BridgeError": "vancetope_rag.errors",
    "BridgeLimitError": "vancetope_rag.errors",
    "BridgeUnsupportedTypeError": "vancetope_rag.errors",
    "BridgeVisionNotConfiguredError": "vancetope_rag.errors",
    "BridgeVisionUnavailableError": "vancetope_rag.errors",
    "CopyConflictError": "vancetope_rag.errors",
    "DimensionMismatchError": "vancetope_rag.errors",
    "DimensionPausedError": "vancetope_rag.errors",
    "DocumentNotFoundError": "vancetope_rag.errors",
    "EmbeddingConfigError": "vancetope_rag.errors",
    "EmbeddingDisabledError": "vancetope_rag.errors",
    "EmbeddingError": "vancetope_rag.errors",
    "ExtractionError": "vancetope_rag.errors",
    "OnnxExportRefusedError": "vancetope_rag.errors",
    "ExtractionTimeoutError": "vancetope_rag.errors",
    "FileChangedWhileReadError": "vancetope_rag.errors",
    "FileTooLargeError": "vancetope_rag.errors",
    "ExtractorDependencyMissingError": "vancetope_rag.errors",
    "ExtractorUnavailableError": "vancetope_rag.errors",
    "ExtractorProgramMissingError": "vancetope_rag.errors",
    "InvalidInputError": "vancetope_rag.errors",
    "MissingDependencyError": "vancetope_rag.errors",
    "NoRebuildError": "vancetope_rag.errors",
    "NoTextError": "vancetope_rag.errors",
    "NoTextLayerError": "vancetope_rag.errors",
    "PathNotAllowedError": "vancetope_rag.errors",
    "EngineClosedError": "vancetope_rag.errors",
    "ProjectClosedError": "vancetope_rag.errors",
    "ProjectNotFoundError": "vancetope_rag.errors",
    "ProjectRagDisabledError": "vancetope_rag.errors",
    "ProviderUnavailableError": "vancetope_rag.errors",
    "RagAlreadyExistsError": "vancetope_rag.errors",
    "RagError": "vancetope_rag.errors",
    "RagNotFoundError": "vancetope_rag.errors",
    "RebuildRunningError": "vancetope_rag.errors",
    "RecipeError": "vancetope_rag.errors",
    "RerankError": "vancetope_rag.errors",
    "ReservedNameError": "vancetope_rag.errors",
    "SettingError": "vancetope_rag.errors",
    "StoreCorruptError": "vancetope_rag.errors",
    "StoreError": "vancetope_rag.errors",
    "StoreFullError": "vancetope_rag.errors",
    "TextTooLongError": "vancetope_rag.errors",
    "ToolArgumentError": "vancetope_rag.errors",
    "UnsupportedTypeError": "vancetope_rag.errors",
    "ExtractOptions": "vancetope_rag.extraction.registry",
    "ExtractedText": "vancetope_rag.extraction.registry",
    "Extraction": "vancetope_rag.extraction.registry",
    "Extractor": "vancetope_rag.extraction.registry",
    "ExtractorDependencyMissing": "vancetope_rag.extraction.registry",
    "ExtractorRegistry": "vancetope_rag.extraction.registry",
    "OcrConfig": "vancetope_rag.extraction.registry",
    "RegisterExtractor": "vancetope_rag.extraction.registry",
    "Section": "vancetope_rag.extraction.registry",
    "decode_any": "vancetope_rag.extraction.registry",
    "decode_text": "vancetope_rag.extraction.registry",
    "extract_text": "vancetope_rag.extraction.registry",
    "extraction_error": "vancetope_rag.extraction.registry",
    "hookimpl": "vancetope_rag.hookspecs",
    "get_plugin_manager": "vancetope_rag.plugins",
    "RagParams": "vancetope_rag.recipes",
    "RerankerRegistry": "vancetope_rag.rerankers",
    "RerankSettings": "vancetope_rag.rerankers",
    "Recipe": "vancetope_rag.recipes",
    "load_recipe": "vancetope_rag.recipes",
    "parse_recipe": "vancetope_rag.recipes",
    "ProjectRagRetriever": "vancetope_rag.services.retrieval.retriever",
    "open_store": "vancetope_rag.store",
    "RagVectorStore": "vancetope_rag.store.port.llamaindex_store",
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


__all__ = tuple(sorted(_EXPORTS))
