"""ProjectRagIndexer (spec §4.3): brings a claimed batch's chunks in line with its documents.

The scheduler that claims the batches is :mod:`.scheduler`. The indexer
works on a claimed batch at once: it splits every document, embeds all chunks the cache does
not hold in one batched model call, then writes each document's chunks and marks it clean in
one store transaction that first checks the worker still holds the lease (a worker whose lease
expired never overwrites a newer pass). If the batched call fails, each document is embedded
alone so one poison document cannot hold back the rest. What a pass did
(:class:`~.batch.BatchResult`) and the chunk fingerprint live in :mod:`.batch`, shared with
a rebuild's shadow indexer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from llama_index.core.schema import BaseNode

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import Document, IndexState, RagRecord
from vancetope_rag.errors import ProviderUnavailableError, RagError, StoreError
from vancetope_rag.metrics import Metrics
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.indexing.batch import BatchResult, fingerprint, retry_delay
from vancetope_rag.services.indexing.claims import ClaimReleaser
from vancetope_rag.services.indexing.sources import (
    IngestStats,
    SourceText,
    document_parts,
    unreadable_reason,
)
from vancetope_rag.services.projects import ProjectRagService
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store.port import ControlStore
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.types import RagScope

log = get_logger(__name__)


class _CleanMarkFailed(Exception):
    """Leaves a store transaction so that the store rolls back a write whose claim was lost."""


@dataclass(eq=False, repr=False, kw_only=True)
class ProjectRagIndexer:
    """Brings the ``_documents`` chunks of claimed documents in line with their content."""

    control: ControlStore
    rags: RagService
    documents: DocumentService
    project_rags: ProjectRagService
    settings: SettingsService
    releaser: ClaimReleaser
    config: EngineConfig
    metrics: Metrics

    def retry_delay(self, attempts: int) -> float:
        """Exponential backoff with jitter, capped."""
        return retry_delay(self.config, attempts)

    def reindex_document(self, doc: Document, worker_id: str) -> BatchResult:
        """Spec §4.3 for one claimed document."""
        return self.index_batch(doc.tenant_id, doc.project_id, [doc], worker_id)

    def _parts(self, doc: Document, include_summaries: bool) -> tuple[list[SourceText], bool]:
        """What to index of a document (:func:`.sources.document_parts`): the document is
        the host's and is kept whole, only its index stops at the text limit."""
        return document_parts(doc, include_summaries, self.rags.clip)

    def index_batch(
        self, tenant_id: str, project_id: str, docs: Sequence[Document], worker_id: str
    ) -> BatchResult:
        """Index a claimed batch. Never raises: whatever fails (the store included) fails
        the documents not done yet, and their claims are given back (or kept for retry)."""
        result = BatchResult()
        try:
            self._index_batch(tenant_id, project_id, docs, worker_id, result)
        except Exception as exc:
            if not isinstance(exc, RagError):
                log.exception("indexing a batch of %s/%s failed", tenant_id, project_id)
            for doc in docs:
                if doc.id not in result.handled:
                    self._fail(doc, worker_id, exc, result)
        return result

    def _index_batch(
        self,
        tenant_id: str,
        project_id: str,
        docs: Sequence[Document],
        worker_id: str,
        result: BatchResult,
    ) -> None:
        if not docs:
            return
        # Kill switch flipped between claim and now: give the claims back without counting a
        # failure or warning (provider ``none`` is a decision, not an error; spec §6.1).
        snapshot = self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            for doc in docs:
                self._release_quietly(doc, worker_id, result)
            return
        try:
            rag = self.project_rags.ensure_default_rag(
                tenant_id, project_id, strict=True, snapshot=snapshot
            )
        except Exception as exc:  # provider misconfigured: every document fails alike
            for doc in docs:
                self._fail(doc, worker_id, exc, result)
            return
        if rag is None:  # embeddings switched off between claim and now
            for doc in docs:
                self._release_quietly(doc, worker_id, result)
            return
        include = bool(snapshot.effective["rag.project.includeSummaries"])
        sources: dict[str, list[SourceText]] = {}
        by_id: dict[str, Document] = {}
        clipped: set[str] = set()
        for doc in docs:
            by_id[doc.id] = doc
            unreadable = unreadable_reason(doc)
            if unreadable is not None:
                # Its file could not be read (a reindex queued it): it stays failed, with
                # the reason, until an import can read the file.
                self._fail_unreadable(doc, worker_id, unreadable, result)
            elif self.documents.is_rag_eligible(doc):
                sources[doc.id], cut = self._parts(doc, include)
                if cut:
                    clipped.add(doc.id)
            else:
                self._commit(rag, doc, worker_id, [], IndexState.NONE, result)
        to_embed: dict[str, list[SourceText]] = {}
        prints = {ref: fingerprint(rag, parts) for ref, parts in sources.items()}
        intact = self._chunks_intact(rag, [by_id[ref] for ref in sources if sources[ref]], prints)
        for ref, parts in sources.items():
            doc = by_id[ref]
            fp = prints[ref]
            if not parts:  # eligible but empty: no chunks, nothing to embed
                self._commit(rag, doc, worker_id, [], IndexState.INDEXED, result, f"{fp}:0")
            elif ref in intact:
                # The chunks were built from exactly this (a no-op reindex): mark it clean.
                self._commit(
                    rag,
                    doc,
                    worker_id,
                    None,
                    IndexState.INDEXED,
                    result,
                    doc.rag_indexed_hash,
                    truncated=ref in clipped,
                )
                result.unchanged += 1
            else:
                to_embed[ref] = parts
        if not to_embed:
            return
        try:
            grouped, stats = self.rags.embed_sources(rag, to_embed)
            self._count(stats, result)
        except ProviderUnavailableError:  # the provider's outage, not the documents'
            for ref in to_embed:
                self._pause(by_id[ref], worker_id, result)
            return
        except Exception as batch_exc:
            log.info("batch embed failed (%s); embedding documents one by one", batch_exc)
            grouped = {}
            down = False
            for ref, parts in to_embed.items():
                if down:
                    self._pause(by_id[ref], worker_id, result)
                    continue
                try:
                    one, stats = self.rags.embed_sources(rag, {ref: parts})
                    self._count(stats, result)
                    grouped.update(one)
                except ProviderUnavailableError:  # went down meanwhile
                    down = True
                    self._pause(by_id[ref], worker_id, result)
                except Exception as exc:
                    self._fail(by_id[ref], worker_id, exc, result)
        for ref, nodes in grouped.items():
            recorded = f"{fingerprint(rag, to_embed[ref])}:{len(nodes)}"
            self._commit(
                rag,
                by_id[ref],
                worker_id,
                nodes,
                IndexState.INDEXED,
                result,
                recorded,
                truncated=ref in clipped,
            )
        return

    def _chunks_intact(
        self, rag: RagRecord, docs: Sequence[Document], prints: Mapping[str, str]
    ) -> set[str]:
        """The documents whose chunks were built from exactly these inputs (``prints``: the
        fingerprint of each one's inputs) and of whose source nobody has added, removed or
        replaced chunks since; one count query for the batch. Manual writes are stored under
        their own ``manual:`` source refs now (:func:`.sources.manual_source_ref`), but a
        store may hold chunks an older version let a tool write under a document's id: every
        chunk the indexer writes carries the document's path and a manual write into
        ``_documents`` never does, so a source with a chunk of another path is rewritten,
        not kept."""
        expected: dict[str, int] = {}
        for doc in docs:
            recorded, _, count = (doc.rag_indexed_hash or "").partition(":")
            if recorded == prints[doc.id] and count.isdigit():
                expected[doc.id] = int(count)
        if not expected:
            return set()
        paths = {doc.id: doc.path for doc in docs if doc.id in expected}
        counts = self.rags.chunks.source_counts(RagScope.of(rag), paths)
        return {ref for ref, n in expected.items() if counts[ref] == (n, n)}

    @staticmethod
    def _count(stats: IngestStats, result: BatchResult) -> None:
        result.embedded_texts += stats.embedded_texts
        result.cache_hits += stats.cache_hits

    def _commit(
        self,
        rag: RagRecord,
        doc: Document,
        worker_id: str,
        nodes: Sequence[BaseNode] | None,
        state: IndexState,
        result: BatchResult,
        indexed_hash: str | None = None,
        *,
        truncated: bool = False,
    ) -> None:
        """Fenced write: replace chunks + mark clean, only while the lease is still ours.
        ``nodes`` None: the chunks are already right, only mark clean; empty: remove them.

        Where the store has no transactions (MongoDB), the claim token fences instead: the
        chunks are written as generation ``rag_claim_token`` (a newer claim's write is never
        superseded by this one) and the clean mark only lands while that claim holds.
        ``truncated``: a text was indexed only up to the limit."""
        mark = CleanMark.of(doc, worker_id, state, indexed_hash, truncated=truncated)

        def mark_clean() -> bool:
            return self.control.mark_rag_clean(mark)

        try:
            if nodes is None:
                # The chunks are right: the clean mark alone, which the claim fences by itself
                # (a no-op reindex costs a document one statement, not a transaction of three).
                marked = mark_clean()
            else:
                marked = self._write_fenced(rag, doc, worker_id, nodes, mark_clean)
            if not marked:  # the lease went to another claim
                result.lost_lease += 1
                result.handled.add(doc.id)
                return
        except Exception as exc:
            self._fail(doc, worker_id, exc, result)
            return
        result.handled.add(doc.id)
        self.metrics.indexer_runs.labels(outcome="success").inc()
        if state is IndexState.NONE:
            result.removed += 1
            counted = "removed"
        else:
            result.indexed += 1
            result.chunks += len(nodes or ())
            counted = "unchanged" if nodes is None else "written"
            self.metrics.indexed_chunks.inc(len(nodes or ()))
        self.metrics.indexed_documents.labels(result=counted).inc()

    def _write_fenced(
        self,
        rag: RagRecord,
        doc: Document,
        worker_id: str,
        nodes: Sequence[BaseNode],
        mark_clean: Callable[[], bool],
    ) -> bool:
        """Replace the document's chunks and mark it clean, in one transaction while this
        worker's claim holds; False when the lease went to another claim (nothing of the
        write is left: a store with transactions rolls it back, the chunk version written
        under the claim token is discarded where none does)."""
        token, claim = doc.rag_claim_token, Claim(doc.tenant_id, doc.project_id, doc.id, worker_id)
        try:
            with self.control.transaction():
                if not self.control.holds_claim(claim):
                    return False
                self.rags.write_source(rag, doc.id, nodes, generation=token)
                if not mark_clean():
                    raise _CleanMarkFailed  # a store with transactions rolls back
                return True
        except _CleanMarkFailed:
            if token is not None:  # undo what no rollback undid
                self.rags.chunks.discard_chunk_version(RagScope.of(rag), doc.id, token)
            return False

    def _fail(self, doc: Document, worker_id: str, exc: BaseException, result: BatchResult) -> None:
        """Count a failed document and give its claim back. A failure of the store is not the
        document's: it costs no attempt, and the next pass retries it after the interval."""
        error = error_text(exc)
        store = isinstance(exc, StoreError)
        log.warning("indexing %s (%s) failed: %s", doc.path, doc.id, error)
        self.metrics.indexer_runs.labels(outcome="failed").inc()
        self.metrics.indexed_documents.labels(result="failed").inc()
        result.failed += 1
        result.errors[doc.id] = error
        if store:
            result.store_errors += 1
            result.store_error = error
        self._give_back(
            doc,
            worker_id,
            result,
            error,
            max_attempts=self.config.max_attempts,
            count_attempt=not store,
            retry_delay_s=None if store else self.retry_delay(doc.index_attempts),
        )

    def _pause(self, doc: Document, worker_id: str, result: BatchResult) -> None:
        """Give the claim back untouched while the provider is down (or refuses the
        settings): no attempt spent, the last error kept. No retry time either: the
        scheduler claims nothing of the project until the circuit is due to be tried, and
        settings that change the endpoint (a corrected key) resume it at once. The circuit
        logs the outage, once."""
        result.paused += 1
        error = doc.index_last_error or ""
        max_attempts = self.config.max_attempts
        self._give_back(
            doc,
            worker_id,
            result,
            error,
            max_attempts=max_attempts,
            count_attempt=False,
            retry_delay_s=0.0,
        )

    def _fail_unreadable(
        self, doc: Document, worker_id: str, error: str, result: BatchResult
    ) -> None:
        """Give the claim back as failed for good (no retry can read the file)."""
        self.metrics.indexed_documents.labels(result="failed").inc()
        result.failed += 1
        result.errors[doc.id] = error
        self._give_back(doc, worker_id, result, error, max_attempts=1)

    def _release_quietly(self, doc: Document, worker_id: str, result: BatchResult) -> None:
        self._give_back(
            doc,
            worker_id,
            result,
            "embeddings switched off",
            max_attempts=1_000_000,
            count_attempt=False,
        )

    def _give_back(
        self,
        doc: Document,
        worker_id: str,
        result: BatchResult,
        error: str,
        *,
        max_attempts: int,
        count_attempt: bool = True,
        retry_delay_s: float | None = None,
    ) -> None:
        """Give the claim back; ``retry_delay_s`` None: claimable again after the interval."""
        result.handled.add(doc.id)
        self.releaser.release(
            Release.of(
                doc,
                worker_id,
                error=error,
                retry_delay_s=(
                    self.config.indexer_interval_s if retry_delay_s is None else retry_delay_s
                ),
                max_attempts=max_attempts,
                count_attempt=count_attempt,
            )
        )
