"""The composition root: configuration → store → embeddings → services → scheduler.

CLI, REST API and the pluggy plugin all start here; nothing else opens a store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vancetope_rag.config import EngineConfig
from vancetope_rag.embeddings import EmbeddingRegistry, default_registry
from vancetope_rag.extract import ExtractorRegistry
from vancetope_rag.extract import default_registry as default_extractors
from vancetope_rag.metrics import Metrics
from vancetope_rag.services.autoinject import RagAutoInjectService
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.indexer import ProjectRagIndexer, ProjectRagIndexScheduler
from vancetope_rag.services.projects import ProjectLifecycle, ProjectRagService
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store import Store, open_store
from vancetope_rag.store.sqlite_db import Clock


@dataclass
class RagApp:
    """Every service of one process, wired once."""

    config: EngineConfig
    store: Store
    embeddings: EmbeddingRegistry
    extractors: ExtractorRegistry
    metrics: Metrics
    settings: SettingsService
    rags: RagService
    documents: DocumentService
    project_rags: ProjectRagService
    lifecycle: ProjectLifecycle
    indexer: ProjectRagIndexer
    scheduler: ProjectRagIndexScheduler
    autoinject: RagAutoInjectService
    context_template: str | None = field(default=None)

    @classmethod
    def open(
        cls,
        config: EngineConfig | None = None,
        *,
        store: Store | None = None,
        embeddings: EmbeddingRegistry | None = None,
        extractors: ExtractorRegistry | None = None,
        context_template: str | None = None,
        clock: Clock = time.time,
        worker_id: str | None = None,
    ) -> RagApp:
        config = config or EngineConfig()
        store = store or open_store(config.store, clock=clock)
        embeddings = embeddings or default_registry()
        extractors = extractors or default_extractors()
        metrics = Metrics()
        control, chunks = store.control, store.chunks
        settings = SettingsService(control)
        rags = RagService(
            control,
            chunks,
            embeddings,
            settings,
            default_chunk_size=config.chunk_size,
            default_chunk_overlap=config.chunk_overlap,
        )
        documents = DocumentService(control, chunks)
        project_rags = ProjectRagService(control, rags, documents)
        lifecycle = ProjectLifecycle(control, project_rags)
        indexer = ProjectRagIndexer(
            control, rags, documents, project_rags, settings, config, metrics
        )
        scheduler = ProjectRagIndexScheduler(
            control, indexer, rags, settings, config, metrics, worker_id=worker_id
        )
        autoinject = RagAutoInjectService(
            rags, project_rags, settings, config, metrics, default_template=context_template
        )
        return cls(
            config=config,
            store=store,
            embeddings=embeddings,
            extractors=extractors,
            metrics=metrics,
            settings=settings,
            rags=rags,
            documents=documents,
            project_rags=project_rags,
            lifecycle=lifecycle,
            indexer=indexer,
            scheduler=scheduler,
            autoinject=autoinject,
            context_template=context_template,
        )

    def close(self) -> None:
        self.scheduler.stop()
        self.store.close()

    def __enter__(self) -> RagApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
