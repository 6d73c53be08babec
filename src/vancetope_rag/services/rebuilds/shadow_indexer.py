"""Fills a rebuild's shadow generation from a claimed batch of its queue.

The same steps as :class:`~vancetope_rag.services.indexing.indexer.ProjectRagIndexer` (eligibility,
split, one batched embedding call through the embedding cache, a fenced write per document),
but aimed at the shadow RAG and finished on the migration's queue item instead of the
document: the document's own dirty flag belongs to the live generation, which the indexer
keeps updating meanwhile. The chunks are written under the item's claim token, so a worker
whose lease expired (or whose item an edit re-queued) never supersedes a newer pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.schema import BaseNode

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.rebuilds import ItemState, Rebuild, RebuildItem
from vancetope_rag.domain.records import Document, RagRecord
from vancetope_rag.errors import ProviderUnavailableError, StoreError
from vancetope_rag.metrics import Metrics
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.indexing.batch import BatchResult, fingerprint, retry_delay
from vancetope_rag.services.indexing.sources import (
    SourceText,
    document_parts,
    unreadable_reason,
)
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.settings import SettingsSnapshot
from vancetope_rag.store.port import ControlStore, RebuildStore

log = get_logger(__name__)


@dataclass(eq=False, repr=False, kw_only=True)
class ShadowIndexer:
    """Indexes claimed migration items into the migration's shadow RAG."""

    control: ControlStore
    rebuild_store: RebuildStore
    rags: RagService
    documents: DocumentService
    config: EngineConfig
    metrics: Metrics

    def index_items(
        self,
        migration: Rebuild,
        shadow: RagRecord,
        items: Sequence[RebuildItem],
        worker_id: str,
        snapshot: SettingsSnapshot,
    ) -> BatchResult:
        result = BatchResult()
        if not items:
            return result
        include = bool(snapshot.effective["rag.project.includeSummaries"])
        t, p = migration.tenant_id, migration.project_id
        to_embed: dict[str, list[SourceText]] = {}
        docs: dict[str, Document] = {}
        by_id = {i.document_id: i for i in items}
        for item in items:
            doc = self.control.get_document(t, p, item.document_id)
            if doc is None:  # deleted since it was queued: nothing of it may stay
                self._commit(shadow, item, None, worker_id, [], result)
                continue
            docs[doc.id] = doc
            unreadable = unreadable_reason(doc)
            if unreadable is not None:  # failed here as in the live index, not done
                self._fail_unreadable(item, doc, worker_id, unreadable, result)
                continue
            eligible = self.documents.is_rag_eligible(doc)
            parts = document_parts(doc, include, self.rags.clip)[0] if eligible else []
            if parts:
                to_embed[doc.id] = parts
            else:  # no chunks: skipped when not eligible, done when eligible but empty
                empty = f"{fingerprint(shadow, [])}:0"
                self._commit(shadow, item, doc, worker_id, [], result, empty, not eligible)
        if not to_embed:
            return result
        try:
            grouped, stats = self.rags.embed_sources(shadow, to_embed)
            result.embedded_texts += stats.embedded_texts
            result.cache_hits += stats.cache_hits
        except ProviderUnavailableError:
            # the provider is down (its circuit logged it once): the items go back untouched
            for ref in to_embed:
                self._pause(by_id[ref], worker_id, result)
            return result
        except Exception as batch_exc:  # one poison document must not fail the batch
            log.info("rebuild batch embed failed (%s); embedding one by one", batch_exc)
            grouped = {}
            for ref, parts in to_embed.items():
                try:
                    one, stats = self.rags.embed_sources(shadow, {ref: parts})
                    result.embedded_texts += stats.embedded_texts
                    result.cache_hits += stats.cache_hits
                    grouped.update(one)
                except ProviderUnavailableError:  # went down meanwhile: as above
                    self._pause(by_id[ref], worker_id, result)
                except Exception as exc:
                    self._fail(by_id[ref], docs[ref], worker_id, exc, result)
        for ref, nodes in grouped.items():
            recorded = f"{fingerprint(shadow, to_embed[ref])}:{len(nodes)}"
            self._commit(shadow, by_id[ref], docs[ref], worker_id, nodes, result, recorded)
        return result

    def _commit(
        self,
        shadow: RagRecord,
        item: RebuildItem,
        doc: Document | None,
        worker_id: str,
        nodes: Sequence[BaseNode],
        result: BatchResult,
        indexed_hash: str | None = None,
        skipped: bool = False,
    ) -> None:
        """Fenced: write the shadow's chunks of the document and finish its item (skipped:
        not eligible), only while the item's claim (by token) is still ours; in one
        transaction where the store has them, under the claim token as chunk generation
        everywhere."""
        claim = item.held_by(worker_id)
        m_id, d_id = item.migration_id, item.document_id
        try:
            with self.control.transaction():
                if not self.rebuild_store.holds_item(claim):
                    result.lost_lease += 1
                    return
                if doc is None:
                    self.rags.remove_by_source(shadow, d_id)
                    self.rebuild_store.remove_items(m_id, [d_id])
                    result.removed += 1
                    return
                self.rags.write_source(shadow, d_id, nodes, generation=claim.claim_token)
                finished = self.rebuild_store.finish_item(
                    claim,
                    doc_version=doc.rag_version,
                    indexed_hash=indexed_hash,
                    skipped=skipped,
                )
            if not finished:  # re-queued by an edit, or taken over, meanwhile
                result.lost_lease += 1
                return
        except Exception as exc:
            if doc is not None:
                self._fail(item, doc, worker_id, exc, result)
            return
        self.metrics.indexer_runs.labels(outcome="success").inc()
        if skipped:  # counted as the indexer counts a document it takes out of the index
            result.removed += 1
            return
        result.indexed += 1
        result.chunks += len(nodes)

    def _pause(self, item: RebuildItem, worker_id: str, result: BatchResult) -> None:
        """Give the item back without spending an attempt: its provider is down."""
        result.paused += 1
        self._release(item, worker_id, item.last_error or "", self.config.max_attempts, False)

    def _fail_unreadable(
        self, item: RebuildItem, doc: Document, worker_id: str, error: str, result: BatchResult
    ) -> None:
        """Finish the item as failed at once: its file could not be read, which no attempt
        with the new model cures (the rebuild's failure ratio leaves it out)."""
        result.failed += 1
        result.errors[doc.id] = error
        self._release(item, worker_id, error, 1, True)

    def _release(
        self, item: RebuildItem, worker_id: str, error: str, max_attempts: int, count: bool
    ) -> None:
        """Give the item back at once (failed for good once ``max_attempts`` are spent)."""
        claim = item.held_by(worker_id)
        try:
            self.rebuild_store.release_item(
                claim,
                error=error,
                retry_delay_s=0.0,
                max_attempts=max_attempts,
                count_attempt=count,
            )
        except Exception:  # the lease TTL recovers it
            log.exception("could not release the rebuild claim on %s", item.document_id)

    def _fail(
        self,
        item: RebuildItem,
        doc: Document,
        worker_id: str,
        exc: BaseException,
        result: BatchResult,
    ) -> None:
        error = error_text(exc)
        log.warning("rebuild: indexing %s (%s) failed: %s", doc.path, doc.id, error)
        self.metrics.indexer_runs.labels(outcome="failed").inc()
        result.failed += 1
        result.errors[doc.id] = error
        if isinstance(exc, StoreError):
            # the store's failure, not the document's: no attempt is spent (a rebuild must
            # not fail for an outage); the lease expires and another pass takes the item
            result.store_errors += 1
            result.store_error = error
            return
        claim = item.held_by(worker_id)
        try:
            state = self.rebuild_store.release_item(
                claim,
                error=error,
                retry_delay_s=retry_delay(self.config, item.attempts),
                max_attempts=self.config.max_attempts,
            )
        except Exception:  # the lease TTL recovers it
            log.exception("could not release the rebuild claim on %s", doc.id)
            return
        if state is ItemState.FAILED:
            log.warning("rebuild: %s failed for good with the new model", doc.path)
