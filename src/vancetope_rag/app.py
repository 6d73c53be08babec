"""The composition root: configuration → store → embeddings → services → scheduler.

CLI, REST API and the pluggy plugin all start here; nothing else opens a store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pluggy
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms import LLM

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.block.context_block import check_template_cost, compile_template
from vancetope_rag.domain.records import Document, IndexStatus
from vancetope_rag.domain.texts import check_id
from vancetope_rag.embeddings import EmbeddingRegistry
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.extraction.records import RetryPolicy
from vancetope_rag.extraction.registry import ExtractorRegistry
from vancetope_rag.extraction.vision import VisionDefaults
from vancetope_rag.integrations.llamaindex.rerank import VancetopeRerank
from vancetope_rag.metrics import Metrics
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams
from vancetope_rag.rerankers import RerankerRegistry
from vancetope_rag.secrets import register_secret
from vancetope_rag.services.autoinject import RagAutoInjectService
from vancetope_rag.services.bridge import BridgeCache, BridgeService
from vancetope_rag.services.calibration import Calibrator
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.extraction import ExtractionService, vision_circuits
from vancetope_rag.services.importer import DocumentImporter
from vancetope_rag.services.indexing.claims import ClaimReleaser
from vancetope_rag.services.indexing.indexer import ProjectRagIndexer
from vancetope_rag.services.indexing.progress import node_work_state
from vancetope_rag.services.indexing.scheduler import ProjectRagIndexScheduler
from vancetope_rag.services.projects import ProjectLifecycle, ProjectRagService
from vancetope_rag.services.providers import ProviderCircuits
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.rebuilds.service import RebuildService
from vancetope_rag.services.rebuilds.shadow_indexer import ShadowIndexer
from vancetope_rag.services.retrieval.rerank import RerankStage, reranker_circuits
from vancetope_rag.services.retrieval.retriever import (
    ProjectRagRetriever,
    RecipeLike,
    chat_engine,
    check_retriever_options,
    query_engine,
    split_options,
)
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.services.store_copy import CopySelection, StoreCopier
from vancetope_rag.services.turn_executor import TurnExecutor
from vancetope_rag.store import Store, open_store, redact_store_uri, same_store, store_file
from vancetope_rag.store.inprocess.scan_kernels import KernelChoice
from vancetope_rag.store.port.types import Clock


def _is_path_component(value: object) -> bool:
    return (
        isinstance(value, str)
        and value not in ("", ".", "..")
        and not any(c in value for c in "/\\\x00")
    )


@dataclass
class RagApp:
    """Every service of one process, wired once."""

    config: EngineConfig
    store: Store
    embeddings: EmbeddingRegistry
    extractors: ExtractorRegistry
    extraction: ExtractionService
    metrics: Metrics
    settings: SettingsService
    rags: RagService
    documents: DocumentService
    importer: DocumentImporter
    project_rags: ProjectRagService
    rebuilds: RebuildService
    lifecycle: ProjectLifecycle
    indexer: ProjectRagIndexer
    scheduler: ProjectRagIndexScheduler
    autoinject: RagAutoInjectService
    calibrator: Calibrator
    bridge: BridgeService
    plugins: pluggy.PluginManager
    context_template: str | None = field(default=None)
    #: The threads of async turns (:meth:`apre_turn`), not the event loop's default executor.
    turns: TurnExecutor = field(default_factory=lambda: TurnExecutor(8))

    @classmethod
    def open(
        cls,
        config: EngineConfig | None = None,
        *,
        store: Store | None = None,
        plugins: pluggy.PluginManager | None = None,
        embeddings: EmbeddingRegistry | None = None,
        extractors: ExtractorRegistry | None = None,
        context_template: str | None = None,
        clock: Clock = time.time,
        worker_id: str | None = None,
        rerankers: RerankerRegistry | None = None,
    ) -> RagApp:
        """Wire every service. Registries and the context template come from the plugins
        unless given explicitly (a reranker of one's own, e.g. a LlamaIndex postprocessor
        wrapped in :class:`~vancetope_rag.integrations.llamaindex.rerank.
        PostprocessorReranker`, can also be registered later: ``app.rerankers.register``)."""
        config = config or EngineConfig()
        pm = plugins or get_plugin_manager(allowed=config.allowed_plugins())
        if embeddings is None:
            embeddings = EmbeddingRegistry()
            pm.hook.register_embedding_providers(register=embeddings.register)
            embeddings.configure(config.provider_options())
        if rerankers is None:
            rerankers = RerankerRegistry()
            pm.hook.register_rerankers(register=rerankers.register)
        if extractors is None:
            extractors = ExtractorRegistry()
            pm.hook.register_extractors(register=extractors.register)
        if context_template is None:
            context_template = pm.hook.context_template()
        if context_template is not None:
            # Refused here, not rendered as no block in every turn.
            compile_template(context_template)
            check_template_cost(context_template)
        if config.torch_threads is not None:
            _set_torch_threads(config.torch_threads)
        store = store or open_store(
            config.store,
            clock=clock,
            busy_timeout_s=config.store_busy_timeout_s,
            uri_defaults=config.store_uri_defaults(),
            mongo_options=config.mongo_options(),
            claim_ttl_s=config.claim_ttl_s,
            kernel_cache_dir=kernel_cache_dir(config),
        )
        metrics = Metrics(state_ttl_s=config.metrics_state_ttl_s)
        control, chunks = store.control, store.chunks
        settings = SettingsService(
            control=control,
            providers=embeddings,
            rerankers=rerankers,
            legacy_model=config.rag_embedding_model,
        )
        rags = RagService(
            control=control,
            chunks=chunks,
            registry=embeddings,
            settings=settings,
            default_chunk_size=config.chunk_size,
            default_chunk_overlap=config.chunk_overlap,
            fusion=config.fusion(),
            max_text_chars=config.max_text_chars,
            metrics=metrics,
            circuits=ProviderCircuits(
                retry_s=config.provider_retry_s, retry_max_s=config.provider_retry_max_s
            ),
            reranking=RerankStage(
                rerankers,
                circuits=reranker_circuits(config.provider_retry_s, config.provider_retry_max_s),
                metrics=metrics,
            ),
        )
        calibrator = Calibrator(control=control, chunks=chunks, rags=rags)
        metrics.watch_work(lambda: node_work_state(control, store.rebuilds, config.node_id, chunks))
        metrics.watch_circuits(rags.circuits.open_counts)
        metrics.watch_runtime(embeddings.runtime, lambda: vector_kernels(store))
        documents = DocumentService(control=control, chunks=chunks, rebuild_store=store.rebuilds)
        extraction = ExtractionService(
            registry=extractors,
            settings=settings,
            vision_defaults=VisionDefaults(
                fallback=config.doc_vision_fallback_enabled, model=config.doc_vision_model
            ),
            circuits=vision_circuits(config.provider_retry_s, config.provider_retry_max_s),
        )
        importer = DocumentImporter(
            documents=documents,
            extractors=extractors,
            extraction=extraction,
            max_text_chars=config.max_text_chars,
            retries=RetryPolicy(
                base_s=config.extract_retry_s,
                max_s=config.extract_retry_max_s,
                max_attempts=config.extract_retry_max_attempts,
            ),
            clock=clock,
        )
        shadows = ShadowIndexer(
            control=control,
            rebuild_store=store.rebuilds,
            rags=rags,
            documents=documents,
            config=config,
            metrics=metrics,
        )
        rebuilds = RebuildService(
            control=control,
            rebuild_store=store.rebuilds,
            chunks=chunks,
            rags=rags,
            documents=documents,
            settings=settings,
            shadows=shadows,
            config=config,
            metrics=metrics,
            calibrator=calibrator,
        )
        project_rags = ProjectRagService(
            control=control,
            chunks=chunks,
            embeddings=embeddings,
            rags=rags,
            documents=documents,
            settings=settings,
            rebuilds=rebuilds,
        )
        lifecycle = ProjectLifecycle(control=control, project_rags=project_rags)
        releaser = ClaimReleaser(control=control)
        indexer = ProjectRagIndexer(
            control=control,
            rags=rags,
            documents=documents,
            project_rags=project_rags,
            settings=settings,
            releaser=releaser,
            config=config,
            metrics=metrics,
        )
        scheduler = ProjectRagIndexScheduler(
            control=control,
            rags=rags,
            indexer=indexer,
            releaser=releaser,
            project_rags=project_rags,
            rebuilds=rebuilds,
            settings=settings,
            config=config,
            metrics=metrics,
            worker_id=worker_id,
            calibrator=calibrator,
            importer=importer,
        )
        # a document queued here wakes this process's indexer (another process's: see
        # Store.watch_queued, wired in ProjectRagIndexScheduler.start)
        documents.on_queued = lambda _tenant, _project: scheduler.wake()
        scheduler.watch = store.watch_queued
        autoinject = RagAutoInjectService(
            rags=rags,
            settings=settings,
            config=config,
            metrics=metrics,
            default_template=context_template,
        )
        bridge = BridgeService(
            extraction=extraction,
            settings=settings,
            documents=documents,
            circuits=rags.circuits,
            cache=BridgeCache(bridge_cache_dir(config)),
            environment=config.bridge_environment(),
            max_text_chars=config.max_text_chars,
            runtime_paths=runtime_state_paths(config),
        )
        return cls(
            config=config,
            store=store,
            embeddings=embeddings,
            extractors=extractors,
            extraction=extraction,
            metrics=metrics,
            settings=settings,
            rags=rags,
            documents=documents,
            importer=importer,
            project_rags=project_rags,
            rebuilds=rebuilds,
            lifecycle=lifecycle,
            indexer=indexer,
            scheduler=scheduler,
            autoinject=autoinject,
            calibrator=calibrator,
            bridge=bridge,
            plugins=pm,
            context_template=context_template,
            turns=TurnExecutor(config.turn_workers),
        )

    @property
    def rerankers(self) -> RerankerRegistry:
        """The rerankers ``ai.rerank.provider`` chooses from (``register`` adds one)."""
        return self.rags.reranking.registry

    def rerank_postprocessor(
        self, tenant_id: str, project_id: str, *, top_n: int | None = None
    ) -> VancetopeRerank:
        """The project's reranker (``ai.rerank.*``, read at every call) as a LlamaIndex node
        postprocessor, for a query engine of one's own."""
        self.check_ids(tenant_id, project_id)
        return VancetopeRerank(
            self.rags.reranking,
            lambda: self.settings.snapshot(tenant_id, project_id).rerank(),
            top_n=top_n,
        )

    # -- the host contract, as plain methods -------------------------------------------
    # Every method checks the ids first (one rule, :func:`check_id`): a bad id is an
    # InvalidInputError before any hook or store sees it.

    @staticmethod
    def check_ids(tenant_id: object, project_id: object) -> None:
        """Refuse ids that cannot name a tenant or a project (see :func:`check_id`)."""
        check_id(tenant_id, "tenant id")
        check_id(project_id, "project id")

    def bring(self, tenant_id: str, project_id: str, *, home_node: str | None = None) -> None:
        self.check_ids(tenant_id, project_id)
        if home_node is not None:
            check_id(home_node, "home node")
        self.plugins.hook.project_bring(
            app=self, tenant_id=tenant_id, project_id=project_id, home_node=home_node
        )

    def suspend(self, tenant_id: str, project_id: str) -> None:
        self.check_ids(tenant_id, project_id)
        self.plugins.hook.project_suspend(app=self, tenant_id=tenant_id, project_id=project_id)

    def close_project(self, tenant_id: str, project_id: str) -> None:
        self.check_ids(tenant_id, project_id)
        self.plugins.hook.project_close(app=self, tenant_id=tenant_id, project_id=project_id)

    def document_saved(
        self,
        tenant_id: str,
        project_id: str,
        path: str,
        content: str,
        *,
        mime_type: str | None = None,
        rag_enabled: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Document | None:
        """The host saved a document (``document_saved`` hook): stored, and queued for the
        indexer when it is eligible and changed.

        Args:
            rag_enabled: ``"auto" | "on" | "off"``; None keeps the document's override.
            metadata: The host's own metadata (at most 32 string keys, scalar values, 4,096
                characters of JSON; None keeps the stored one, ``{}`` removes it). Copied into
                every chunk: LlamaIndex metadata filters on :meth:`as_retriever` select by it.

        Raises:
            InvalidInputError: A bad id, path, override or metadata; nothing is written.
        """
        self.check_ids(tenant_id, project_id)
        doc: Document | None = self.plugins.hook.document_saved(
            app=self,
            tenant_id=tenant_id,
            project_id=project_id,
            path=path,
            content=content,
            mime_type=mime_type,
            rag_enabled=rag_enabled,
            metadata=metadata,
        )
        return doc

    def summary_saved(
        self, tenant_id: str, project_id: str, path: str, summary: str | None
    ) -> Document | None:
        """The host's summary driver wrote the summary of the document at ``path`` (None
        removes it; ``summary_saved`` hook). A changed summary queues the document: its
        summary chunk is written by the next indexer pass (``rag.project.includeSummaries``).

        Raises:
            DocumentNotFoundError: No document has that path (save the document first).
            InvalidInputError: A bad id or path, or a summary that is not text or None.
        """
        self.check_ids(tenant_id, project_id)
        doc: Document | None = self.plugins.hook.summary_saved(
            app=self, tenant_id=tenant_id, project_id=project_id, path=path, summary=summary
        )
        return doc

    def document_deleted(self, tenant_id: str, project_id: str, path: str) -> None:
        self.check_ids(tenant_id, project_id)
        self.plugins.hook.document_deleted(
            app=self, tenant_id=tenant_id, project_id=project_id, path=path
        )

    def pre_turn(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        recipe: RagParams | None = None,
        tools: Sequence[Any] | None = None,
    ) -> list[str]:
        """System messages every plugin wants added to this turn, in plugin order
        (``tools``: the tools the turn's model was given, when the host knows them)."""
        self.check_ids(tenant_id, project_id)
        if isinstance(user_messages, str | bytes) or not isinstance(user_messages, Sequence):
            raise InvalidInputError("user_messages must be a list of the turn's user texts")
        if recipe is not None and not isinstance(recipe, RagParams):
            raise InvalidInputError("recipe must be RagParams (see vancetope_rag.recipes)")
        results = self.plugins.hook.pre_turn(
            app=self,
            tenant_id=tenant_id,
            project_id=project_id,
            user_messages=list(user_messages),
            recipe=recipe,
            tools=None if tools is None else list(tools),
        )
        # pluggy calls the last registered plugin first; give messages in registration order.
        return [m for result in reversed(results) if result for m in result]

    async def apre_turn(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        recipe: RagParams | None = None,
        tools: Sequence[Any] | None = None,
    ) -> list[str]:
        """:meth:`pre_turn` without blocking the event loop: the hooks (the query embedding,
        the store) run in one of the app's turn threads (``turn_workers``; not the loop's
        default executor), with the caller's context (instrumentation spans).

        Raises:
            EngineClosedError: The app was closed.
        """
        return await self.turns.run(
            self.pre_turn, tenant_id, project_id, user_messages, recipe, tools
        )

    # -- LlamaIndex: the project's RAG in the user's own engines -------------------------

    def as_retriever(
        self,
        tenant_id: str,
        project_id: str,
        recipe: RecipeLike | None = None,
        **overrides: Any,
    ) -> ProjectRagRetriever:
        """A LlamaIndex retriever over the project's ``_documents`` RAG: the same retrieval
        AutoInject does (see :class:`ProjectRagRetriever` for ``overrides``: ``rag``,
        ``top_k``, ``min_score``, ``max_per_doc``, ``mode``, ``path_prefix``, ``kinds``,
        ``filters``, ``relevance_cut``).

        Raises:
            InvalidInputError: A bad id, recipe or override (e.g. ``top_k=0``).
        """
        options = check_retriever_options(overrides)
        return ProjectRagRetriever(
            rags=self.rags,
            config=self.config,
            tenant_id=tenant_id,
            project_id=project_id,
            recipe=recipe,
            **options,
        )

    def as_query_engine(
        self,
        tenant_id: str,
        project_id: str,
        *,
        llm: LLM | None = None,
        recipe: RecipeLike | None = None,
        **kwargs: Any,
    ) -> BaseQueryEngine:
        """LlamaIndex's ``RetrieverQueryEngine`` over :meth:`as_retriever`; its
        ``source_nodes`` cite the project's documents (``ref_doc_id``, ``metadata["path"]``).
        ``kwargs``: retriever overrides and the engine's own options (``response_mode``…);
        ``llm`` None means LlamaIndex's ``Settings.llm``."""
        options, engine = split_options(kwargs)
        return query_engine(
            self.as_retriever(tenant_id, project_id, recipe, **options), llm, **engine
        )

    def as_chat_engine(
        self,
        tenant_id: str,
        project_id: str,
        *,
        llm: LLM | None = None,
        recipe: RecipeLike | None = None,
        chat_mode: str = "condense_plus_context",
        **kwargs: Any,
    ) -> BaseChatEngine:
        """LlamaIndex's ``CondensePlusContextChatEngine`` (``chat_mode="context"``:
        ``ContextChatEngine``) over :meth:`as_retriever`; ``kwargs`` as for
        :meth:`as_query_engine`."""
        options, engine = split_options(kwargs)
        retriever = self.as_retriever(tenant_id, project_id, recipe, **options)
        return chat_engine(retriever, llm, chat_mode, **engine)

    def workspace_root(self, tenant_id: str, project_id: str) -> Path | None:
        """The project's workspace folder, when the engine configures one and it exists."""
        if not self.config.workspaces_dir:
            return None
        # Ids become path components: one like '..' or 'a/b' would move the jail's root.
        if not all(_is_path_component(i) for i in (tenant_id, project_id)):
            return None
        root = Path(self.config.workspaces_dir) / tenant_id / project_id
        return root if root.is_dir() else None

    def tools(self, tenant_id: str, project_id: str) -> list[Any]:
        """Agent tools bound to this tenant and project (the ``rag_*`` tools and plugins')."""
        self.check_ids(tenant_id, project_id)
        tools: list[Any] = []
        register: Callable[[Any], None] = tools.append
        self.plugins.hook.register_tools(
            register=register, app=self, tenant_id=tenant_id, project_id=project_id
        )
        return tools

    def init_store(
        self,
        *,
        dimensions: Iterable[int] = (),
        wait: bool = False,
        timeout_s: float = 600.0,
        prune: bool = False,
    ) -> list[IndexStatus]:
        """Prepare the store for production: collections, regular and search indexes for every
        embedding dimension of the RAG catalog (plus ``dimensions``, e.g. the model a first
        deployment will use), migrating an older layout. With ``wait``, return only once every
        search index is READY (Atlas builds them in the background).

        Run it on every deployment (idempotent); the embedded SQLite store needs no extra
        step, but accepts it. Queries never create or wait for indexes. With ``prune``
        (MongoDB Atlas), the search indexes of dimensions no RAG uses are dropped (status
        ``DROPPED``): each counts against a Free or Flex cluster's few.

        Raises:
            StoreError: the server refused (tier limit, missing privilege) or, with ``wait``,
                an index failed or was not READY within ``timeout_s``.
        """
        return self.store.initialize(
            dimensions=dimensions, wait=wait, timeout_s=timeout_s, prune=prune
        )

    def close(self) -> None:
        self.turns.shutdown()  # running turns finish before the store closes under them
        self.scheduler.stop()
        self.store.close()

    def __enter__(self) -> RagApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def open_store_copy(
    source_uri: str,
    target_uri: str,
    *,
    selection: CopySelection | None = None,
    batch_size: int = 100,
    progress: Callable[[str], None] | None = None,
    busy_timeout_s: float = 30.0,
    dry_run: bool = False,
) -> Iterator[StoreCopier]:
    """Open the two stores of a copy (``vancetope-rag copy``) and the copier between them;
    both are closed on leaving. With ``dry_run`` the target is not opened (opening a SQLite
    file that does not exist would create it).

    Refused before anything is opened: two URIs naming the same store, and a SQLite source
    whose file does not exist (opening it would create an empty store to copy from).
    Passwords in the URIs are registered as secrets, so no message shows them.
    """
    for uri in (source_uri, target_uri):
        register_secret(urlparse(uri).password)
    if same_store(source_uri, target_uri):
        raise InvalidInputError(
            f"--from and --to name the same store ({redact_store_uri(source_uri)}); "
            "copy into another one"
        )
    path = store_file(source_uri)
    if path is not None and not path.is_file():
        raise StoreError(
            f"cannot copy from {redact_store_uri(source_uri)}: there is no store file at "
            f"{str(path)!r}"
        )
    source = open_store(source_uri, busy_timeout_s=busy_timeout_s)
    try:
        target = None if dry_run else open_store(target_uri, busy_timeout_s=busy_timeout_s)
        try:
            yield StoreCopier(
                source, target, selection=selection, batch_size=batch_size, progress=progress
            )
        finally:
            if target is not None:
                target.close()
    finally:
        source.close()


_USER_CACHE = Path("~/.cache/vancetope-rag")


def bridge_cache_dir(config: EngineConfig) -> Path:
    """Where files_visualize caches its readings: the configured folder, else beside a
    SQLite store file, else the user's cache."""
    if config.bridge_cache_dir:
        return Path(config.bridge_cache_dir)
    path = store_file(config.store)
    if path is not None and not path.name.startswith(":"):  # not ':memory:'
        return path.with_name(path.name + ".bridge")
    return (_USER_CACHE / "bridge").expanduser()


def kernel_cache_dir(config: EngineConfig) -> Path:
    """Where the vector cache stores its kernel choice per machine."""
    return Path(config.kernel_cache_dir or (_USER_CACHE / "kernels").expanduser())


def vector_kernels(store: Store, prepare_dim: int | None = None) -> list[KernelChoice]:
    """The vector pass's kernel choices serving this process, else those stored for this
    machine; with ``prepare_dim``, the choice for that dimension, measured now if none is
    stored ([]: the store keeps no in-process vector cache)."""
    from vancetope_rag.store.inprocess.vector_cache import VectorCache

    cache = getattr(store.chunks, "cache", None)
    if not isinstance(cache, VectorCache):
        return []
    if prepare_dim is not None:
        return [cache.kernels.measure_now(prepare_dim)]
    return cache.kernel_choices()


def runtime_state_paths(config: EngineConfig) -> list[str]:
    """The engine's own files and folders, which files_visualize never reads even when a
    workspace holds them: the store file and its journals, the caches."""
    paths = [str(bridge_cache_dir(config))]
    path = store_file(config.store)
    if path is not None:
        paths += [str(path) + suffix for suffix in ("", "-wal", "-shm", "-journal")]
    embedded = config.embedded_cache_dir or str((_USER_CACHE / "embedded").expanduser())
    paths += [p for p in (embedded, config.embedded_cache_readonly_dir) if p]
    paths.append(str(kernel_cache_dir(config)))
    return paths


def _set_torch_threads(threads: int) -> None:
    try:
        import torch
    except ImportError:  # no in-process model: nothing to tune
        return
    torch.set_num_threads(threads)
