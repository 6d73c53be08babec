"""Control store on MongoDB: projects, documents, RAG catalog, settings and embedding cache.

A thin I/O class: filters and update pipelines come from :mod:`.mongo.builders.updates`.

Multi-worker safety comes from single-document atomicity. A claim is a series of
``find_one_and_update`` calls, each leasing one document atomically; the lease condition is
evaluated by the server against the store's clock (``$$NOW`` with ``server_clock``). Every
write that finishes or gives back a claim carries ``ragClaimedBy = worker`` in its filter, so a
worker whose lease was taken over changes nothing.

Fencing without transactions: each claim batch draws a token from the ``counters``
collection's ``generation`` sequence (shared with chunk generations, so a token is greater
than every generation written before the claim). The indexer writes the document's chunks
under its token as their generation, and ``mark_rag_clean`` with the token matches only while
that very claim holds the document. A worker that stalls past its lease can neither supersede
a newer claim's chunks nor finish it; mongomock has no sessions, so a transaction could not
be tested here anyway. :meth:`MongoControlStore.transaction` is therefore a no-op.

Every read here goes to the primary (the opener passes a database pinned to it): a claim or
a ``holds_claim`` answered by a lagging secondary could hand one document to two workers.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError

from vancetope_rag.domain.records import (
    AttentionItem,
    Document,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
)
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.mongo.catalog import MongoRagCatalog
from vancetope_rag.store.mongo.errors import check_bson_size, guard_errors
from vancetope_rag.store.mongo.heartbeats import MongoHeartbeats
from vancetope_rag.store.port.catalog import GenerationsOfCatalog
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.shared import (
    DocumentChanges,
    content_hash,
    document_not_found_error,
    document_taken_error,
    path_exists_error,
    path_taken_error,
    settings_by_scope,
    state_counts,
    unique_batches,
    vector_from_bytes,
    vector_to_bytes,
)
from vancetope_rag.store.port.types import Clock, DocumentChange, ImportHead, NewDocument


@guard_errors
class MongoControlStore(GenerationsOfCatalog, MongoHeartbeats):
    """:class:`~vancetope_rag.store.port.ControlStore` on a pymongo ``Database``.

    Args:
        database: the database (pymongo, or mongomock in tests).
        uri: the store URI as shown to users (credentials already redacted).
        clock: the injected clock, used when ``server_clock`` is False.
        server_clock: measure leases with the server's ``$$NOW`` (production) instead of
            ``clock`` (tests; mongomock has no ``$$NOW``).
    """

    def __init__(
        self, database: Any, *, uri: str, clock: Clock = time.time, server_clock: bool = True
    ) -> None:
        self.db = database
        self.uri = uri
        self.server_clock = server_clock
        self._clock = clock
        self.projects = database["projects"]
        self.documents = database["documents"]
        self.rags = database["rags"]
        self.settings = database["settings"]
        self.embedding_cache = database["embedding_cache"]
        self.counters = database["counters"]
        self.catalog: MongoRagCatalog = MongoRagCatalog(database, self.now)

    # -- time --------------------------------------------------------------------------

    def now(self) -> datetime:
        if self.server_clock:
            local_time = self.db.command("hello")["localTime"]
            now = q.from_bson_time(local_time)
            assert now is not None
            return now
        return q.ms_instant(self._clock())

    def _time(self) -> q.TimeSource:
        return q.ServerTime() if self.server_clock else q.ClockTime(q.ms_instant(self._clock()))

    def time_source(self) -> q.TimeSource:
        """What "now" is in filters and update pipelines (shared with the migration store)."""
        return self._time()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """No-op (see the module docstring for where atomicity comes from)."""
        yield

    def close(self) -> None:
        """Nothing to release here; :class:`~.mongo.MongoStore` owns the client."""

    # -- projects ----------------------------------------------------------------------

    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project:
        found = ix.upsert_racing(
            lambda: self.projects.find_one_and_update(
                q.scope_filter(tenant_id, project_id),
                q.project_upsert(status, home_node, self._time()),
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        )
        return q.project_from_bson(found)

    def get_project(self, tenant_id: str, project_id: str) -> Project | None:
        found = self.projects.find_one(q.scope_filter(tenant_id, project_id))
        return q.project_from_bson(found) if found else None

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]:
        flt: dict[str, Any] = {}
        if status is not None:
            flt["status"] = status.value
        if tenant_id is not None:
            flt["tenantId"] = tenant_id
        cursor = self.projects.find(flt).sort([("tenantId", 1), ("projectId", 1)])
        return [q.project_from_bson(d) for d in cursor]

    def projects_for_node(self, node_id: str) -> list[Project]:
        cursor = self.projects.find(
            {
                "status": ProjectStatus.RUNNING.value,
                "$or": [{"homeNode": node_id}, {"homeNode": None}],
            }
        ).sort([("tenantId", 1), ("projectId", 1)])
        return [q.project_from_bson(d) for d in cursor]

    # -- documents ---------------------------------------------------------------------

    def insert_document(self, doc: NewDocument) -> Document:
        update = q.new_document_update(doc, content_hash(doc.content), self._time())
        check_bson_size(
            update[0], f"document {doc.path!r}", tenant_id=doc.tenant_id, project_id=doc.project_id
        )
        try:
            created = self.documents.find_one_and_update(
                {"_id": uuid.uuid4().hex},
                update,
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError as exc:
            raise path_exists_error(doc) from exc
        return q.document_from_bson(created)

    def restore_document(self, doc: Document) -> Document:
        record = q.document_to_bson(doc, self.now())
        check_bson_size(
            record, f"document {doc.path!r}", tenant_id=doc.tenant_id, project_id=doc.project_id
        )
        try:
            self.documents.insert_one(record)
        except DuplicateKeyError as exc:  # the id or the unique (scope, path) is taken
            raise document_taken_error(doc) from exc
        return q.document_from_bson(record)

    def update_document(
        self, tenant_id: str, project_id: str, document_id: str, change: DocumentChange
    ) -> Document:
        changes = DocumentChanges.of(change)
        update = q.document_update(changes, time=self._time())
        # the changed fields alone must fit; a sum over the limit the server refuses itself
        check_bson_size(update[0], f"document {document_id!r}", document_id=document_id)
        try:
            updated = self.documents.find_one_and_update(
                q.scope_filter(tenant_id, project_id, _id=document_id),
                update,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError as exc:
            raise path_taken_error(change.path, document_id) from exc
        if updated is None:
            raise document_not_found_error(tenant_id, project_id, document_id)
        return q.document_from_bson(updated)

    def get_document(self, tenant_id: str, project_id: str, document_id: str) -> Document | None:
        found = self.documents.find_one(q.scope_filter(tenant_id, project_id, _id=document_id))
        return q.document_from_bson(found) if found else None

    def get_document_by_path(self, tenant_id: str, project_id: str, path: str) -> Document | None:
        found = self.documents.find_one(q.scope_filter(tenant_id, project_id, path=path))
        return q.document_from_bson(found) if found else None

    @staticmethod
    def _under(tenant_id: str, project_id: str, path_prefix: str | None) -> dict[str, Any]:
        flt = q.scope_filter(tenant_id, project_id)
        if path_prefix:
            # anchored and escaped: the prefix is literal text, and the unique path index
            # serves an anchored regex as a range scan
            flt["path"] = {"$regex": "^" + re.escape(path_prefix)}
        return flt

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]:
        cursor = self.documents.find(self._under(tenant_id, project_id, path_prefix))
        return [q.document_from_bson(d) for d in cursor.sort([("path", 1)])]

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        fields = {"path": 1, "importOrigin": 1, "contentHash": 1, "extraction": 1}
        cursor = self.documents.find(self._under(tenant_id, project_id, path_prefix), fields)
        return [q.import_head_from_bson(d) for d in cursor.sort([("path", 1)])]

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        flt = q.read_failures_filter(tenant_id, project_id)
        fields = {"path": 1, "importOrigin": 1, "contentHash": 1, "extraction": 1}
        cursor = self.documents.find(flt, fields)
        return [q.import_head_from_bson(d) for d in cursor.sort([("path", 1)])]

    def needs_attention(
        self, tenant_id: str, project_id: str, *, limit: int
    ) -> tuple[int, list[AttentionItem]]:
        flt = q.needs_attention_filter(tenant_id, project_id)
        count = int(self.documents.count_documents(flt))
        cursor = self.documents.find(flt, {"path": 1, "extractionError": 1})
        found = cursor.sort([("path", 1)]).limit(limit)
        return count, [AttentionItem(d["_id"], d["path"], d["extractionError"]) for d in found]

    def document_paths(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        for part in unique_batches(document_ids, 500):
            flt = q.scope_filter(tenant_id, project_id, _id={"$in": part})
            for d in self.documents.find(flt, {"path": 1}):
                found[str(d["_id"])] = str(d["path"])
        return found

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool:
        result = self.documents.delete_one(q.scope_filter(tenant_id, project_id, _id=document_id))
        return bool(result.deleted_count)

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        if not document_ids:
            return 0
        result = self.documents.update_many(
            q.scope_filter(tenant_id, project_id, _id={"$in": list(dict.fromkeys(document_ids))}),
            [q.dirty_stage()],
        )
        return int(result.matched_count)

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        # One time source for the whole batch: with a clock, every lease of the batch starts
        # at the same instant, as in one SQL statement.
        time_source = self._time()
        flt = q.claim_filter(tenant_id, project_id, claim_ttl_s, time_source)
        # an idle tick (the common case) reads only: no token is drawn for nothing
        if batch_size < 1 or self.documents.find_one(flt, {"_id": 1}, sort=q.CLAIM_SORT) is None:
            return []
        update = q.claim_update(worker_id, ix.next_sequence(self.counters), time_source)
        found = ix.claim_each(self.documents, flt, update, q.CLAIM_SORT, batch_size)
        return [q.document_from_bson(d) for d in found]

    def holds_claim(self, claim: Claim) -> bool:
        return self.documents.find_one(q.claim_holder(claim), {"_id": 1}) is not None

    def mark_rag_clean(self, mark: CleanMark) -> bool:
        held = q.claim_holder(mark, mark.claim_token)
        result = self.documents.update_one(held, q.mark_clean_update(mark, self._time()))
        return bool(result.matched_count)

    def release_rag_claim(self, release: Release) -> IndexState:
        found = self.documents.find_one_and_update(
            q.claim_holder(release),
            q.release_update(release, self._time()),
            projection={"indexState": 1},
            return_document=ReturnDocument.AFTER,
        )
        return IndexState(found["indexState"]) if found else IndexState.PENDING

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.documents.aggregate(
            [
                {"$match": q.scope_filter(tenant_id, project_id)},
                {"$group": {"_id": "$indexState", "n": {"$sum": 1}}},
            ]
        )
        return state_counts((row["_id"], row["n"]) for row in rows)

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        flt = q.scope_filter(tenant_id, project_id, truncated=True)
        return int(self.documents.count_documents(flt))

    # -- RAG catalog (read through the name pointers: see .catalog) -------------------------

    def insert_rag(self, rag: RagRecord) -> RagRecord:
        return self.catalog.insert_rag(rag)

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        return self.catalog.get_rag(tenant_id, project_id, rag_id)

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        return self.catalog.find_rag(tenant_id, project_id, name)

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        return self.catalog.list_rags(tenant_id, project_id)

    def rag_dimensions(self) -> set[int]:
        return self.catalog.rag_dimensions()

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        return self.catalog.delete_rag(tenant_id, project_id, rag_id)

    def set_rag_calibration(
        self, tenant_id: str, project_id: str, rag_id: str, calibration: Calibration
    ) -> bool:
        return self.catalog.set_rag_calibration(tenant_id, project_id, rag_id, calibration)

    # -- settings (projectId null = tenant-wide) ---------------------------------------

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]:
        cursor = self.settings.find(
            {"tenantId": tenant_id, "projectId": project_id}, {"key": 1, "value": 1}
        )
        return {d["key"]: d["value"] for d in cursor}

    def get_scope_settings(
        self, tenant_id: str, project_id: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        cursor = self.settings.find(
            {"tenantId": tenant_id, "projectId": {"$in": [None, project_id]}},
            {"projectId": 1, "key": 1, "value": 1},
        )
        return settings_by_scope((d.get("projectId"), d["key"], d["value"]) for d in cursor)

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        flt = {"tenantId": tenant_id, "projectId": project_id, "key": key}
        if value is None:
            self.settings.delete_one(flt)
            return
        try:
            self.settings.update_one(flt, {"$set": {"value": value}}, upsert=True)
        except DuplicateKeyError:  # a concurrent first write won: overwrite it
            self.settings.update_one(flt, {"$set": {"value": value}})

    def settings_scopes(self) -> list[tuple[str, str | None]]:
        rows = self.settings.aggregate([{"$group": {"_id": {"t": "$tenantId", "p": "$projectId"}}}])
        scopes = {(str(r["_id"]["t"]), r["_id"].get("p")) for r in rows}
        return sorted(scopes, key=lambda s: (s[0], s[1] is not None, s[1] or ""))

    # -- embedding cache ---------------------------------------------------------------

    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for part in unique_batches(text_hashes, 1000):
            for d in self.embedding_cache.find(
                {"modelKey": model_key, "textHash": {"$in": part}},
                {"_id": 0, "textHash": 1, "vector": 1},
            ):
                found[d["textHash"]] = vector_from_bytes(d["vector"])
        return found

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        if not items:
            return
        docs = [
            {"modelKey": model_key, "textHash": h, "vector": vector_to_bytes(v)}
            for h, v in items.items()
        ]
        try:
            self.embedding_cache.insert_many(docs, ordered=False)
        except BulkWriteError as exc:  # entries already cached (first writer wins) are fine
            if not ix.all_duplicate_keys(ix.write_errors(exc)):
                raise

    def scan_cached_embeddings(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str, list[float]]]:
        if limit < 1:
            return []
        flt: dict[str, Any] = {}
        if after is not None:
            model_key, text_hash = after
            flt = {
                "$or": [
                    {"modelKey": {"$gt": model_key}},
                    {"modelKey": model_key, "textHash": {"$gt": text_hash}},
                ]
            }
        cursor = (
            self.embedding_cache.find(flt, {"_id": 0, "modelKey": 1, "textHash": 1, "vector": 1})
            .sort([("modelKey", 1), ("textHash", 1)])
            .limit(limit)
        )
        return [(d["modelKey"], d["textHash"], vector_from_bytes(d["vector"])) for d in cursor]
