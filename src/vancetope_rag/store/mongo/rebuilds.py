"""RAG generations and rebuild migrations on MongoDB (:class:`RebuildStore`), no transactions.

* **One active migration per RAG name**: ``migrations`` documents carry ``active: true`` while
  running or switching, under a partial unique index; a second start is a duplicate key.
* **State changes are conditional single-document writes** (``state`` in the expected ones),
  so a cancel and a switch cannot both win: the switch first moves ``running → switching``,
  which a cancel (``running`` only) can no longer take.
* **The switch** is then the pointer flip of :mod:`.mongo.catalog` (the one write readers
  see), followed by bookkeeping a crash may interrupt: the next tick finds the migration
  ``switching`` and runs :meth:`MongoRebuildStore.switch_live` again, which is idempotent.
* **The queue** is claimed like documents: ``find_one_and_update`` per item, a fencing token
  from the store's one sequence, leases on the store's (or the server's) clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError

from vancetope_rag.domain.rebuilds import (
    ItemClaim,
    ItemState,
    Migration,
    MigrationItem,
    MigrationState,
)
from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import rebuilds as mm
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.mongo.catalog import MongoRagCatalog
from vancetope_rag.store.mongo.errors import guard_errors
from vancetope_rag.store.port.catalog import GenerationsOfCatalog
from vancetope_rag.store.port.shared import capped_error, rebuild_fields, rebuild_running_error
from vancetope_rag.store.port.types import DocumentHead

lit = q.lit


@guard_errors
class MongoRebuildStore(GenerationsOfCatalog):
    """:class:`~vancetope_rag.store.port.RebuildStore` on a pymongo ``Database``.

    Args:
        database: the database, reads on the primary.
        catalog: the RAG catalog (shared with the control store).
        time_source: what "now" is in filters and updates (server or injected clock).
        now: the store's clock as a datetime.
    """

    def __init__(
        self,
        database: Any,
        catalog: MongoRagCatalog,
        *,
        time_source: Callable[[], q.TimeSource],
        now: Callable[[], datetime],
    ) -> None:
        self.catalog: MongoRagCatalog = catalog
        self.migrations = database[ix.MIGRATIONS]
        self.items = database[ix.MIGRATION_ITEMS]
        self.documents = database["documents"]
        self.counters = database["counters"]
        self._time = time_source
        self._now = now

    # -- generations (insert_generation, get_any_rag, rag_generations: the catalog's) -------

    def switch_live(self, migration: Migration) -> bool:
        m = migration
        t, p = m.tenant_id, m.project_id
        active = (MigrationState.RUNNING, MigrationState.SWITCHING)
        if not self.end_rebuild(m, state=MigrationState.SWITCHING, expected=active):
            current = self.get_rebuild(t, p, m.id)
            return current is not None and current.state is MigrationState.COMPLETED
        gone = self.catalog.get_any_rag(t, p, m.to_rag_id) is None
        if gone or not self.catalog.flip(t, p, m.rag_name, m.from_rag_id, m.to_rag_id):
            reason = "the live RAG or its new generation was removed during the rebuild"
            self.end_rebuild(
                m, state=MigrationState.FAILED, expected=[MigrationState.SWITCHING], reason=reason
            )
            return False
        # readers use the new generation from the flip on; the rest is bookkeeping
        self.catalog.record_states(t, p, m.to_rag_id, m.from_rag_id)
        self.end_rebuild(m, state=MigrationState.COMPLETED, expected=[MigrationState.SWITCHING])
        return True

    # -- migrations ------------------------------------------------------------------------

    def start_rebuild(self, migration: Migration) -> Migration:
        m = migration
        doc = {mm.bson_name(column): v for column, v in rebuild_fields(m).items()}
        doc |= {"createdAt": q.to_bson_time(self._now()), "finishedAt": None, "active": True}
        try:
            self.migrations.insert_one(doc)
        except DuplicateKeyError as exc:
            raise rebuild_running_error(m.tenant_id, m.project_id, m.rag_name) from exc
        return mm.migration_from_bson(doc)

    def get_rebuild(self, tenant_id: str, project_id: str, migration_id: str) -> Migration | None:
        found = self.migrations.find_one(q.scope_filter(tenant_id, project_id, _id=migration_id))
        return mm.migration_from_bson(found) if found else None

    def active_rebuilds(self, tenant_id: str, project_id: str) -> list[Migration]:
        cursor = self.migrations.find(q.scope_filter(tenant_id, project_id, active=True))
        return [mm.migration_from_bson(d) for d in cursor.sort([("createdAt", 1)])]

    def latest_rebuild(self, tenant_id: str, project_id: str, rag_name: str) -> Migration | None:
        found = self.migrations.find_one(
            q.scope_filter(tenant_id, project_id, ragName=rag_name),
            sort=[("createdAt", -1), ("_id", -1)],
        )
        return mm.migration_from_bson(found) if found else None

    def end_rebuild(
        self,
        migration: Migration,
        *,
        state: MigrationState,
        expected: Sequence[MigrationState],
        reason: str | None = None,
    ) -> bool:
        update: dict[str, Any] = {"$set": {"state": state.value}}
        if reason is not None:
            update["$set"]["reason"] = reason
        if not state.active:
            update["$set"]["finishedAt"] = q.to_bson_time(self._now())
            update["$unset"] = {"active": ""}  # frees the name for the next rebuild
        m = migration
        flt = q.scope_filter(
            m.tenant_id, m.project_id, _id=m.id, state={"$in": [s.value for s in expected]}
        )
        return bool(self.migrations.update_one(flt, update).matched_count)

    # -- the queue -------------------------------------------------------------------------

    def _upsert_items(
        self, migration_id: str, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> int:
        ids = list(dict.fromkeys(document_ids))
        if not ids:
            return 0
        flt = {"migrationId": migration_id, "documentId": {"$in": ids}}
        existing = {d["documentId"] for d in self.items.find(flt, {"documentId": 1})}
        if existing:
            self.items.update_many(
                {**flt, "documentId": {"$in": sorted(existing)}}, {"$set": mm.REQUEUE}
            )
        new = [
            {
                "_id": uuid.uuid4().hex,
                "migrationId": migration_id,
                "documentId": doc_id,
                "tenantId": tenant_id,
                "projectId": project_id,
                **mm.REQUEUE,
                "docVersion": None,
                "indexedHash": None,
                "completedAt": None,
            }
            for doc_id in ids
            if doc_id not in existing
        ]
        if new:
            try:
                self.items.insert_many(new, ordered=False)
            except BulkWriteError as exc:  # queued by a concurrent call meanwhile: fine
                if not ix.all_duplicate_keys(ix.write_errors(exc)):
                    raise
        return len(ids)

    def queue_items(self, migration: Migration, document_ids: Sequence[str]) -> int:
        return self._upsert_items(
            migration.id, migration.tenant_id, migration.project_id, document_ids
        )

    def requeue_documents(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> int:
        if not document_ids:
            return 0
        return sum(
            self._upsert_items(m.id, tenant_id, project_id, document_ids)
            for m in self.active_rebuilds(tenant_id, project_id)
        )

    def remove_items(self, migration_id: str, document_ids: Sequence[str]) -> int:
        flt = {"migrationId": migration_id, "documentId": {"$in": list(document_ids)}}
        return int(self.items.delete_many(flt).deleted_count)

    def claim_items(
        self, migration: Migration, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[MigrationItem]:
        time = self._time()
        m = migration
        flt = mm.item_claim_filter(m.tenant_id, m.project_id, m.id, claim_ttl_s, time)
        if batch_size < 1 or self.items.find_one(flt, {"_id": 1}) is None:
            return []  # an idle tick draws no token
        token = ix.next_sequence(self.counters)
        update = [
            {
                "$set": {
                    "state": lit(ItemState.PROCESSING.value),
                    "claimedBy": lit(worker_id),
                    "claimedAt": time.now(),
                    "claimToken": lit(token),
                }
            }
        ]
        found = ix.claim_each(self.items, flt, update, mm.ITEM_CLAIM_SORT, batch_size)
        return [mm.item_from_bson(d) for d in found]

    def holds_item(self, claim: ItemClaim) -> bool:
        return self.items.find_one(mm.held_filter(claim), {"_id": 1}) is not None

    def finish_item(
        self,
        claim: ItemClaim,
        *,
        doc_version: int,
        indexed_hash: str | None,
        skipped: bool = False,
    ) -> bool:
        done = {
            "state": lit((ItemState.SKIPPED if skipped else ItemState.DONE).value),
            "claimedBy": lit(None),
            "claimedAt": lit(None),
            "claimToken": lit(None),
            "lastError": lit(None),
            "nextAttemptAt": lit(None),
            "docVersion": lit(doc_version),
            "indexedHash": lit(indexed_hash),
            "completedAt": self._time().now(),
        }
        return bool(self.items.update_one(mm.held_filter(claim), [{"$set": done}]).matched_count)

    def release_item(
        self,
        claim: ItemClaim,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> ItemState:
        time = self._time()
        gave_up = {"$gte": ["$attempts", max_attempts]}
        n = 1 if count_attempt else 0
        pipeline = [
            {"$set": {"attempts": {"$add": [{"$ifNull": ["$attempts", 0]}, n]}}},
            {
                "$set": {
                    "claimedBy": lit(None),
                    "claimedAt": lit(None),
                    "claimToken": lit(None),
                    "lastError": lit(capped_error(error)),
                    "state": {
                        "$cond": [
                            gave_up,
                            lit(ItemState.FAILED.value),
                            lit(ItemState.PENDING.value),
                        ]
                    },
                    "nextAttemptAt": {"$cond": [gave_up, lit(None), time.later(retry_delay_s)]},
                    "completedAt": {"$cond": [gave_up, time.now(), lit(None)]},
                }
            },
        ]
        found = self.items.find_one_and_update(
            mm.held_filter(claim),
            pipeline,
            projection={"state": 1},
            return_document=ReturnDocument.AFTER,
        )
        return ItemState(found["state"]) if found else ItemState.PENDING

    def list_items(self, migration_id: str) -> list[MigrationItem]:
        cursor = self.items.find({"migrationId": migration_id}).sort([("documentId", 1)])
        return [mm.item_from_bson(d) for d in cursor]

    def item_counts(self, migration_id: str) -> dict[str, int]:
        counts = {s.value: 0 for s in ItemState}
        for row in self.items.aggregate(
            [
                {"$match": {"migrationId": migration_id}},
                {"$group": {"_id": "$state", "n": {"$sum": 1}}},
            ]
        ):
            counts[row["_id"]] = int(row["n"])
        return counts

    def item_activity(self, migration_id: str, since: datetime) -> tuple[int, datetime | None]:
        flt = {"migrationId": migration_id, "completedAt": {"$gte": q.to_bson_time(since)}}
        return self._activity(self.items, flt, "completedAt")

    @staticmethod
    def _activity(collection: Any, flt: dict[str, Any], field: str) -> tuple[int, datetime | None]:
        n = int(collection.count_documents(flt))
        first = collection.find_one(flt, {field: 1}, sort=[(field, 1)]) if n else None
        return n, q.from_bson_time(first[field]) if first else None

    # -- reads for reconciliation and progress -----------------------------------------------

    def document_heads(self, tenant_id: str, project_id: str) -> list[DocumentHead]:
        fields = {
            "path": 1,
            "mimeType": 1,
            "ragEnabled": 1,
            "ragVersion": 1,
            "indexState": 1,
            "indexedAt": 1,
        }
        cursor = self.documents.find(q.scope_filter(tenant_id, project_id), fields)
        return [
            DocumentHead(
                id=d["_id"],
                path=d["path"],
                mime_type=d["mimeType"],
                rag_enabled=d.get("ragEnabled"),
                rag_version=int(d.get("ragVersion", 0)),
                index_state=IndexState(d.get("indexState", IndexState.NONE.value)),
                indexed_at=q.from_bson_time(d.get("indexedAt")),
            )
            for d in cursor.sort([("_id", 1)])
        ]

    def indexing_activity(
        self, tenant_id: str, project_id: str, since: datetime
    ) -> tuple[int, datetime | None]:
        flt = q.scope_filter(tenant_id, project_id, indexedAt={"$gte": q.to_bson_time(since)})
        return self._activity(self.documents, flt, "indexedAt")

    def adopt_indexed_hashes(
        self, tenant_id: str, project_id: str, hashes: Mapping[str, tuple[int, str | None]]
    ) -> int:
        total = 0
        for doc_id, (version, digest) in hashes.items():
            flt = q.scope_filter(tenant_id, project_id, _id=doc_id, ragVersion=version)
            total += self.documents.update_one(
                flt, {"$set": {"ragIndexedHash": digest}}
            ).modified_count
        return total
