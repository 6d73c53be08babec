"""RagService: RAG catalog, ingestion through a LlamaIndex IngestionPipeline, and queries."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from llama_index.core import Document as LIDocument
from llama_index.core.base.embeddings.base import Embedding
from llama_index.core.schema import BaseNode, MetadataMode

from vancetope_rag.domain.heartbeats import OpenCircuit
from vancetope_rag.domain.records import ChunkKind, Hit, RagRecord, is_reserved_name
from vancetope_rag.domain.retrieval.calibration import MinScore, resolve_min_score
from vancetope_rag.domain.retrieval.metadata_filters import HitPredicate
from vancetope_rag.domain.retrieval.ranking import (
    FusionParams,
    RetrievalMode,
    check_query_args,
    parse_retrieval_mode,
    select_hits,
)
from vancetope_rag.domain.texts import TextLimit, check_label, check_metadata, check_text
from vancetope_rag.embeddings import (
    CachedEmbedding,
    EmbeddingRegistry,
    EmbeddingSettings,
    LoadedModel,
    check_dimension,
)
from vancetope_rag.errors import (
    DimensionMismatchError,
    InvalidInputError,
    RagError,
    RagNotFoundError,
    ReservedNameError,
)
from vancetope_rag.metrics import Metrics
from vancetope_rag.model_profiles import (
    ModelProfile,
    describe_profile,
    profile_from_json,
    same_embedding,
)
from vancetope_rag.rerankers import RerankerRegistry
from vancetope_rag.running import SEARCHES
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.indexing.chunking import chunking_for, ingestion_pipeline
from vancetope_rag.services.indexing.sources import (
    DEFAULT_MAX_TEXT_CHARS,
    IngestStats,
    SourceText,
    manual_parts,
    manual_source_ref,
)
from vancetope_rag.services.providers import CircuitState, Endpoint, Pacer, ProviderCircuits
from vancetope_rag.services.retrieval.rerank import RerankStage
from vancetope_rag.services.retrieval.search import Retriever, citable_hits
from vancetope_rag.services.settings import SettingsService, SettingsSnapshot, embeddings_disabled
from vancetope_rag.store.port import ChunkStore, ControlStore
from vancetope_rag.store.port.llamaindex_store import KIND_KEY, PATH_KEY, SOURCE_KEY, RagVectorStore
from vancetope_rag.store.port.types import ChunkFilter, RagScope

log = get_logger(__name__)

# fullmatch, not `$`: `$` also matches before a trailing newline ("notes\n" was accepted).
_NAME = re.compile(r"\w[\w .-]{0,99}")


class RagService:
    """Create/list/delete RAGs, add and remove text, query — all scoped by tenant + project."""

    def __init__(
        self,
        *,
        control: ControlStore,
        chunks: ChunkStore,
        registry: EmbeddingRegistry,
        settings: SettingsService,
        default_chunk_size: int | None = None,
        default_chunk_overlap: int | None = None,
        fusion: FusionParams | None = None,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        metrics: Metrics | None = None,
        circuits: ProviderCircuits | None = None,
        pacer: Pacer | None = None,
        reranking: RerankStage | None = None,
    ) -> None:
        self.control = control
        #: Open circuits of remote providers (outages) and their pacing, in this process.
        self.circuits = circuits or ProviderCircuits()
        self.pacer = pacer or Pacer()
        self.metrics = metrics or Metrics()
        #: The rerank stage of queries (off while ``ai.rerank.provider`` is ``none``).
        self.reranking = reranking or RerankStage(RerankerRegistry(), metrics=self.metrics)
        self.limit = TextLimit(max_text_chars)
        self.chunks = chunks
        self.registry = registry
        self.settings = settings
        self.default_chunk_size = default_chunk_size
        self.default_chunk_overlap = default_chunk_overlap
        self.retriever = Retriever(chunks, fusion or FusionParams())

    # -- the text limit ----------------------------------------------------------------

    def check_text_size(self, text: str, what: str = "text") -> str:
        """``text`` when within the engine's limit (:meth:`TextLimit.check`)."""
        return self.limit.check(text, what)

    def clip(self, text: str) -> tuple[str, bool]:
        """A document's text cut at the engine's limit (:meth:`TextLimit.clip`)."""
        return self.limit.clip(text)

    # -- embedding ---------------------------------------------------------------------

    def is_embedding_enabled(self, tenant_id: str, project_id: str) -> bool:
        """The kill switch for this project (:meth:`SettingsSnapshot.embeddings_enabled`)."""
        return self.settings.snapshot(tenant_id, project_id).embeddings_enabled()

    def model_for(self, rag: RagRecord, snapshot: SettingsSnapshot | None = None) -> LoadedModel:
        """The RAG's pinned model; refuses once the tenant switched embeddings off. The
        pinned dimension is handed to the provider: a pinned RAG is never probed again."""
        loaded = self.registry.load(self._pinned(rag, snapshot), rag.embedding_model)
        check_dimension(loaded, rag.embedding_dimension, rag.name)
        return loaded

    def _pinned(self, rag: RagRecord, snapshot: SettingsSnapshot | None) -> EmbeddingSettings:
        if snapshot is None:  # callers holding a settings snapshot pass it: one read per turn
            snapshot = self.settings.snapshot(rag.tenant_id, rag.project_id)
        if not snapshot.embeddings_enabled():
            raise embeddings_disabled(
                rag.tenant_id,
                rag.project_id,
                f"RAG {rag.name!r} cannot be written or queried until a provider is set again",
                rag_name=rag.name,
            )
        current = snapshot.embedding_for(rag.embedding_provider)
        return EmbeddingSettings(
            provider=rag.embedding_provider,
            model=rag.embedding_model,
            api_key=current.api_key,
            base_url=current.base_url,
            dimension=rag.embedding_dimension,
            pinned_profile=profile_from_json(rag.embedding_profile),
        )

    def chunk_counting(self, rag: RagRecord) -> str | None:
        """What counts the RAG's chunks against its model's window, from its pinned profile
        (a provider's ``token_counting(profile)``); None when the provider does not say."""
        try:
            provider = self.registry.provider(rag.embedding_provider)
        except RagError:
            return None
        describe = getattr(provider, "token_counting", None)
        if not callable(describe):
            return None
        return str(describe(profile_from_json(rag.embedding_profile)))

    def profile_note(self, rag: RagRecord, snapshot: SettingsSnapshot | None = None) -> str | None:
        """Why a rebuild would change how the RAG embeds: it was created before model profiles,
        or the window or prefixes the settings give its model now differ from the pinned ones
        (read from the provider's table, without a call). None when nothing would change."""
        snapshot = snapshot or self.settings.snapshot(rag.tenant_id, rag.project_id)
        try:
            provider = self.registry.provider(rag.embedding_provider)
        except RagError:
            return None
        shipped = getattr(provider, "profile", None)
        if not callable(shipped):
            return None  # a provider without profiles: nothing to adopt
        current = snapshot.embedding_for(rag.embedding_provider)
        if current.model and current.model != rag.embedding_model:
            return None  # the configured model differs: status shows that rebuild already
        now: ModelProfile = shipped(
            dataclasses.replace(current, pinned_profile=None), rag.embedding_model
        )
        if rag.embedding_profile is None:
            return (
                f"created before model profiles (no prefixes, the old window); rebuild "
                f"(vancetope-rag reindex --rebuild) to adopt {rag.embedding_model}'s profile "
                f"({describe_profile(now)})"
            )
        pinned = profile_from_json(rag.embedding_profile)
        if same_embedding(pinned, now):
            return None
        return (
            f"the settings give {rag.embedding_model} {describe_profile(now)}, the RAG pinned "
            f"{describe_profile(pinned)}; rebuild (vancetope-rag reindex --rebuild) to adopt it"
        )

    def circuit_state(
        self,
        rag: RagRecord,
        snapshot: SettingsSnapshot | None = None,
        elsewhere: Iterable[OpenCircuit] = (),
    ) -> CircuitState | None:
        """The open circuit in the way of the RAG's embedding calls: this process's, else
        one of ``elsewhere`` (the live workers' heartbeats); None when none is open (or the
        settings do not let the RAG be embedded at all)."""
        try:
            pinned = self._pinned(rag, snapshot)
        except RagError:
            return None
        endpoint, model = Endpoint.of(pinned), rag.embedding_model
        mine = self.circuits.state(endpoint, model, rag.embedding_dimension)
        if mine is not None:
            return mine
        for c in elsewhere:
            if (
                endpoint.same(c)
                and c.model in (None, model)
                and c.dimension in (None, rag.embedding_dimension)
            ):
                return CircuitState.of_record(endpoint, c, self.circuits.wall())
        return None

    def _remote_call(
        self, rag: RagRecord, loaded: LoadedModel, snapshot: SettingsSnapshot
    ) -> Callable[[list[str]], list[Embedding]] | None:
        """How texts reach a remote model: split into the requests the model sends anyway
        (its ``embed_batch_size``), each one paced and behind the endpoint's circuit. None
        for an in-process model: the model's own batch call, as fast as it computes."""
        if not loaded.remote:
            return None
        endpoint = Endpoint.of(self._pinned(rag, snapshot))
        rpm, tpm = _rates(snapshot)
        per_request = max(1, int(getattr(loaded.embed_model, "embed_batch_size", 0) or 1))

        def call(texts: list[str]) -> list[Embedding]:
            vectors: list[Embedding] = []
            for start in range(0, len(texts), per_request):
                part = texts[start : start + per_request]
                # the answer's dimension is checked inside the guard: a model swapped behind
                # the name pauses the RAG's indexing, it is no document's failure
                with self.circuits.guard(endpoint, loaded.model, rag.embedding_dimension):
                    tokens = sum(len(loaded.tokenizer(t)) for t in part) if tpm else 0
                    self.pacer.acquire(endpoint, rpm=rpm, tpm=tpm, tokens=tokens)
                    got = loaded.embed_model.get_text_embedding_batch(part)
                    for vector in got:
                        self._check_vector(rag, loaded, vector)
                vectors.extend(got)
            return vectors

        return call

    # -- catalog -----------------------------------------------------------------------

    def pinned_model(
        self,
        snapshot: SettingsSnapshot,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
    ) -> dict[str, Any]:
        """The :class:`RagRecord` fields a new RAG or generation pins: the configured model,
        its profile and its chunking (the caller's, else the engine's, else the model's)."""
        loaded = self.registry.load(snapshot.embedding())
        size, overlap = chunking_for(
            loaded,
            chunk_size,
            chunk_overlap,
            default_size=self.default_chunk_size,
            default_overlap=self.default_chunk_overlap,
        )
        return {
            "embedding_provider": loaded.provider,
            "embedding_model": loaded.model,
            "embedding_dimension": loaded.dimension,
            "chunk_size": size,
            "chunk_overlap": overlap,
            "embedding_profile": loaded.pinned_profile(),
        }

    def create(
        self,
        tenant_id: str,
        project_id: str,
        name: str,
        *,
        title: str | None = None,
        description: str | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        system: bool = False,
        snapshot: SettingsSnapshot | None = None,
    ) -> RagRecord:
        """Create a RAG pinned to the project's current embedding model."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidInputError(
                f"invalid RAG name {name!r}: use 1-100 letters, digits, spaces, '_', '-' or '.'",
                rag_name=str(name),
            )
        if is_reserved_name(name) and not system:
            raise ReservedNameError(
                f"RAG names starting with '_' are reserved for the system ({name!r}); "
                "choose a name without the leading underscore",
                rag_name=name,
            )
        for label, value, longest in (("title", title, 200), ("description", description, 2000)):
            if value is not None:
                check_label(value, label, longest)
        snapshot = snapshot or self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            raise embeddings_disabled(
                tenant_id,
                project_id,
                f"RAG {name!r} cannot be created until a provider is set "
                "(ai.embedding.provider embedded, openai, gemini or a plugin's)",
                rag_name=name,
            )
        record = RagRecord(
            id=uuid.uuid4().hex,
            tenant_id=tenant_id,
            project_id=project_id,
            name=name,
            title=title,
            description=description,
            **self.pinned_model(snapshot, chunk_size, chunk_overlap),
        )
        # the chunk collection and search indexes of a new dimension are made now (no wait):
        # the indexer holds this RAG's documents until they are READY
        self.chunks.prepare_dimension(record.embedding_dimension)
        return self.control.insert_rag(record)

    def get(self, tenant_id: str, project_id: str, ref: str) -> RagRecord:
        """A RAG by id or name, inside the tenant's project only."""
        if not isinstance(ref, str) or not ref.strip():
            raise InvalidInputError("give a RAG id or name")
        rag = self.control.get_rag(tenant_id, project_id, ref) or self.control.find_rag(
            tenant_id, project_id, ref
        )
        if rag is None:
            raise RagNotFoundError(
                f"no RAG {ref!r} in project {project_id!r}; list them with rag_list",
                tenant_id=tenant_id,
                project_id=project_id,
                rag_name=ref,
            )
        return rag

    def find(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        """A RAG by name, or None (:meth:`get` raises instead)."""
        return self.control.find_rag(tenant_id, project_id, name)

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        return self.control.list_rags(tenant_id, project_id)

    def delete(self, tenant_id: str, project_id: str, ref: str, *, system: bool = False) -> int:
        """Delete a RAG and its chunks; returns the number of chunks removed."""
        rag = self.get(tenant_id, project_id, ref)
        if rag.name.startswith("_") and not system:
            raise ReservedNameError(
                f"RAG {rag.name!r} is system-owned and cannot be deleted by users; "
                "use reindex --rebuild to recreate it",
                rag_name=rag.name,
            )
        removed = self.chunks.drop_rag(RagScope.of(rag))
        self.control.delete_rag(tenant_id, project_id, rag.id)
        return removed

    def chunk_count(self, rag: RagRecord) -> int:
        return self.chunks.count_chunks(RagScope.of(rag))

    def index_ready(self, rag: RagRecord) -> bool:
        """Are the store's search indexes for this RAG's dimension built (READY)?"""
        return self.chunks.dimension_ready(rag.embedding_dimension)

    def sweep_chunks(self) -> int:
        """Remove chunk generations that newer, now searchable ones replaced (see
        ``ChunkStore.sweep``); the indexer runs it each tick, never a query."""
        return self.chunks.sweep()

    def source_chunk_count(self, rag: RagRecord, source_ref: str) -> int:
        return self.chunks.count_chunks(RagScope.of(rag), filters={"sourceRef": source_ref})

    def vector_store(self, rag: RagRecord) -> RagVectorStore:
        return RagVectorStore(self.chunks, RagScope.of(rag), fusion=self.retriever.fusion)

    # -- ingestion ---------------------------------------------------------------------

    def split_sources(
        self, rag: RagRecord, sources: Mapping[str, Sequence[SourceText]]
    ) -> dict[str, list[str]]:
        """The chunk texts :meth:`embed_sources` would embed, without embedding anything."""
        loaded = self.model_for(rag)
        grouped: dict[str, list[str]] = {ref: [] for ref in sources}
        docs = self._documents(sources)
        if docs:
            for node in ingestion_pipeline(rag, loaded, None).run(documents=docs):
                text = node.get_content(metadata_mode=MetadataMode.NONE)
                grouped[str(node.metadata[SOURCE_KEY])].append(text)
        return grouped

    @staticmethod
    def _documents(sources: Mapping[str, Sequence[SourceText]]) -> list[LIDocument]:
        docs: list[LIDocument] = []
        for source_ref, parts in sources.items():
            for part in parts:
                meta = {
                    **dict(part.metadata),
                    KIND_KEY: part.kind,
                    PATH_KEY: part.path,
                    SOURCE_KEY: source_ref,
                }
                doc = LIDocument(text=check_text(part.text), metadata=meta)
                doc.excluded_embed_metadata_keys = list(meta)
                doc.excluded_llm_metadata_keys = list(meta)
                docs.append(doc)
        return docs

    def embed_sources(
        self, rag: RagRecord, sources: Mapping[str, Sequence[SourceText]]
    ) -> tuple[dict[str, list[BaseNode]], IngestStats]:
        """Split and embed texts of many sources in one pipeline run (one batched model call
        for everything the cache does not hold). Returns nodes grouped by source ref."""
        snapshot = self.settings.snapshot(rag.tenant_id, rag.project_id)
        loaded = self.model_for(rag, snapshot)
        provider = loaded.provider
        embed = CachedEmbedding(
            loaded.embed_model,
            self.control,
            loaded.cache_key,
            on_call=lambda s, ok: self.metrics.embedding_call(provider, "text", s, ok),
            call=self._remote_call(rag, loaded, snapshot),
        )
        docs = self._documents(sources)
        grouped: dict[str, list[BaseNode]] = {ref: [] for ref in sources}
        if docs:
            nodes = ingestion_pipeline(rag, loaded, embed).run(documents=docs)
            for node in nodes:
                grouped[str(node.metadata[SOURCE_KEY])].append(node)
        stats = IngestStats(
            chunks=sum(len(v) for v in grouped.values()),
            embedded_texts=embed.embedded_texts,
            cache_hits=embed.cache_hits,
        )
        self.metrics.embedding_cache.labels(result="hit").inc(stats.cache_hits)
        self.metrics.embedding_cache.labels(result="miss").inc(stats.embedded_texts)
        return grouped, stats

    def write_source(
        self,
        rag: RagRecord,
        source_ref: str,
        nodes: Sequence[BaseNode],
        *,
        generation: int | None = None,
    ) -> None:
        """Replace every chunk of ``source_ref`` with ``nodes`` (never zero chunks visible);
        ``generation`` is the indexer's claim token: an older one than the source's last
        write is dropped, so a worker that lost its lease never supersedes a newer pass."""
        self.vector_store(rag).replace_source(source_ref, nodes, chunk_version=generation)

    def add_text(
        self,
        rag: RagRecord,
        source_ref: str | None,
        text: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        kind: str = ChunkKind.CONTENT.value,
        path: str | None = None,
    ) -> IngestStats:
        """Chunk, embed and add a text to the RAG (existing chunks of the source stay).

        A manual write: in ``_documents`` the chunk keeps no path (:func:`.sources.manual_parts`)
        and is stored under :func:`.sources.manual_source_ref`, never a document's source.
        """
        text = self.check_text_size(check_text(text))
        ref = uuid.uuid4().hex if source_ref is None else check_label(source_ref, "sourceRef", 1024)
        if not ref.strip():
            ref = uuid.uuid4().hex
        ref = manual_source_ref(rag, ref)
        meta: dict[str, Any] = check_metadata(metadata)
        path = path if path is not None else meta.pop("path", None)
        kind = str(meta.pop("kind", kind))
        parts = manual_parts(rag, [SourceText(text=text, kind=kind, path=path, metadata=meta)])
        grouped, stats = self.embed_sources(rag, {ref: parts})
        self.vector_store(rag).add(grouped[ref])
        return stats

    def replace_source(
        self, rag: RagRecord, source_ref: str, parts: Sequence[SourceText]
    ) -> IngestStats:
        """Index ``parts`` as the complete new content of ``source_ref`` (a manual write; in
        ``_documents`` of :func:`.sources.manual_source_ref`, never a document's source)."""
        return self.replace_sources(rag, {source_ref: parts})

    def replace_sources(
        self, rag: RagRecord, sources: Mapping[str, Sequence[SourceText]]
    ) -> IngestStats:
        """Manual writes of many sources: one embedding run, then each source replaced.
        Texts (a document's, a file's) are indexed up to the limit; ``truncated`` counts the
        sources cut there. In ``_documents`` each is stored under its manual source ref
        (:func:`.sources.manual_source_ref`): only the indexer writes a document's chunks."""
        manual: dict[str, list[SourceText]] = {}
        truncated = 0
        for ref, parts in sources.items():
            key = manual_source_ref(rag, check_label(ref, "sourceRef", 1024))
            clipped = [(p, *self.clip(p.text)) for p in manual_parts(rag, parts)]
            manual[key] = [dataclasses.replace(p, text=text) for p, text, _ in clipped]
            truncated += any(cut for _, _, cut in clipped)
        grouped, stats = self.embed_sources(rag, manual) if manual else ({}, IngestStats())
        for ref, nodes in grouped.items():
            self.write_source(rag, ref, nodes)
        return dataclasses.replace(stats, truncated=truncated)

    def remove_by_source(self, rag: RagRecord, source_ref: str) -> int:
        return self.chunks.remove_by_source(RagScope.of(rag), source_ref)

    # -- query -------------------------------------------------------------------------

    def query(
        self,
        rag: RagRecord,
        text: str,
        *,
        top_k: int = 5,
        min_score: MinScore | None = None,
        max_per_doc: int | None = None,
        filters: ChunkFilter | None = None,
        snapshot: SettingsSnapshot | None = None,
        mode: RetrievalMode | str | None = None,
        keep: HitPredicate | None = None,
        rerank: bool = True,
    ) -> list[Hit]:
        """Embed ``text`` with the RAG's pinned model and return the best hits, ``dense`` or
        ``hybrid`` (``mode`` None: the project's ``rag.retrieval.mode``); ``min_score`` gates
        every hit's own cosine in both modes (``auto``: the RAG's calibrated threshold, see
        :mod:`~vancetope_rag.domain.retrieval.calibration`; ``snapshot``: the project's settings,
        when the caller already read them; ``filters``: what the store applies, ``keep``: the
        post-filter, see :func:`~vancetope_rag.domain.retrieval.ranking.collect_hits`).
        ``_documents`` hits come as they may be cited now
        (:func:`~vancetope_rag.services.retrieval.search.citable_hits`).

        With a reranker set (``ai.rerank.provider``) and ``rerank`` true, the hits are the
        reranker's best (:mod:`~vancetope_rag.services.retrieval.rerank`): ``min_score``
        still gates the candidates' cosine, ``max_per_doc`` and ``top_k`` apply to the
        reranker's order, and each hit carries its ``rerank_score``."""
        text = self.check_text_size(check_text(text, "query"), "query")
        check_query_args(top_k, min_score, max_per_doc)  # before paying for an embedding
        threshold = resolve_min_score(min_score, rag.calibration)
        snapshot = snapshot or self.settings.snapshot(rag.tenant_id, rag.project_id)
        if mode is None:
            mode = snapshot.effective["rag.retrieval.mode"]
        resolved = parse_retrieval_mode(mode)
        reranker = self.reranking.settings(snapshot, rerank)
        started = time.perf_counter()
        with SEARCHES.held():  # side by side with others, the embedding takes one thread
            vector = self._embed_query(rag, text, snapshot)
            hits = self.retriever.search(
                RagScope.of(rag),
                vector,
                text=text if resolved is RetrievalMode.HYBRID else None,
                # with a reranker: its candidates, the cap applied to its order below
                top_k=top_k if reranker is None else self.reranking.pool_size(top_k, snapshot),
                min_score=threshold,
                max_per_doc=max_per_doc if reranker is None else None,
                filters=filters,
                keep=keep,
            )
            found = citable_hits(self.control, rag, hits)
        if reranker is not None:
            # -- the rerank stage (a relevance cut of the candidates goes after it) --------
            ranked = self.reranking.rerank(text, found, reranker).hits
            found = select_hits(ranked, top_k, None, max_per_doc)
        seconds = time.perf_counter() - started
        self.metrics.retrieval_seconds.labels(mode=resolved.value).observe(seconds)
        return found

    def _embed_query(
        self,
        rag: RagRecord,
        text: str,
        snapshot: SettingsSnapshot | None,
        *,
        block: bool = False,
    ) -> list[float]:
        """The query's vector, the model call counted in the embedding metrics. A remote
        provider whose circuit is open refuses at once (a turn never waits out timeouts),
        and a query is counted in the provider's pace without waiting for it (``block``:
        background work waits for the pace, as indexing does)."""
        snapshot = snapshot or self.settings.snapshot(rag.tenant_id, rag.project_id)
        loaded = self.model_for(rag, snapshot)
        if not loaded.remote:
            return self._query_vector(loaded, text)
        endpoint = Endpoint.of(self._pinned(rag, snapshot))
        rpm, tpm = _rates(snapshot)
        with self.circuits.guard(endpoint, loaded.model, rag.embedding_dimension):
            tokens = len(loaded.tokenizer(text)) if tpm else 0
            self.pacer.acquire(endpoint, rpm=rpm, tpm=tpm, tokens=tokens, block=block)
            vector = self._query_vector(loaded, text)
            self._check_vector(rag, loaded, vector)
        return vector

    def embed_background_queries(self, rag: RagRecord, texts: Sequence[str]) -> list[list[float]]:
        """Query vectors for work outside a turn (the calibration's probe turns): paced like
        indexing and behind the provider's circuit, never a burst against a rate limit."""
        snapshot = self.settings.snapshot(rag.tenant_id, rag.project_id)
        return [self._embed_query(rag, t, snapshot, block=True) for t in texts]

    def _query_vector(self, loaded: LoadedModel, text: str) -> list[float]:
        started, ok = time.perf_counter(), False
        try:
            vector = loaded.embed_model.get_query_embedding(text)
            ok = True
        finally:
            seconds = time.perf_counter() - started
            self.metrics.embedding_call(loaded.provider, "query", seconds, ok)
        return vector

    def _check_vector(self, rag: RagRecord, loaded: LoadedModel, vector: Sequence[float]) -> None:
        """The pinned dimension is not probed again: a model that changed behind the same
        name is caught by its first answer instead (and its old probe forgotten, so that the
        rebuild it asks for pins the new dimension)."""
        if len(vector) == rag.embedding_dimension:
            return
        self.registry.forget_probes(loaded.provider, loaded.model)
        raise DimensionMismatchError(
            f"RAG {rag.name!r} is pinned to {rag.embedding_dimension}-dim vectors but "
            f"{loaded.provider}:{loaded.model} now answers with {len(vector)}-dim ones; "
            "rebuild the RAG (vancetope-rag reindex --rebuild) to move it to the new model",
            rag_name=rag.name,
        )

    async def aquery(self, rag: RagRecord, text: str, **kwargs: Any) -> list[Hit]:
        """:meth:`query` in a worker thread (with its own store connection)."""
        return await asyncio.to_thread(self.query, rag, text, **kwargs)

    def query_vector(
        self,
        rag: RagRecord,
        vector: Sequence[float],
        *,
        top_k: int = 5,
        min_score: float | None = None,
        max_per_doc: int | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The best hits for an already embedded query, by cosine similarity
        (``_documents`` hits as they may be cited now, as in :meth:`query`)."""
        hits = self.retriever.search(
            RagScope.of(rag),
            vector,
            top_k=top_k,
            min_score=min_score,
            max_per_doc=max_per_doc,
            filters=filters,
        )
        return citable_hits(self.control, rag, hits)


def _rates(snapshot: SettingsSnapshot) -> tuple[int | None, int | None]:
    """(requests, tokens) per minute allowed for the project's remote provider."""
    eff = snapshot.effective
    return eff["ai.embedding.requestsPerMinute"], eff["ai.embedding.tokensPerMinute"]
