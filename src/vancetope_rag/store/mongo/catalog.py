"""The RAG catalog on MongoDB: generations of a name, and the pointer that says which is live.

``rags`` holds one document per generation (live, shadow being filled by a rebuild, retired);
``rag_names`` holds one *pointer* per tenant, project and name: ``{tenantId, projectId, name,
ragId}``, unique on the first three. The pointer is the truth about which generation readers
use, so a rebuild's switch is the one atomic single-document write MongoDB offers without
transactions: ``ragId`` moves from the old generation to the new one. The ``state`` stored on
each ``rags`` document follows afterwards and is read *through* the pointer: a stored ``live``
that the pointer no longer names is retired (a crash between the two writes); a stored
``shadow`` the pointer names is live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError

from vancetope_rag.domain.records import RagRecord, RagState
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.mongo.errors import guard_errors
from vancetope_rag.store.port.shared import rag_exists_error


def _name_key(tenant_id: str, project_id: str, name: str) -> dict[str, Any]:
    return {"tenantId": tenant_id, "projectId": project_id, "name": name}


def as_seen(doc: Mapping[str, Any], live_id: str | None) -> RagRecord:
    """A ``rags`` document with the state its name's pointer gives it."""
    rag = q.rag_from_bson(doc)
    if rag.id == live_id:
        return replace(rag, state=RagState.LIVE, retired_at=None)
    if rag.state is RagState.LIVE:  # the pointer moved on before the state was written
        return replace(rag, state=RagState.RETIRED, retired_at=rag.retired_at or rag.created_at)
    return rag


@guard_errors
class MongoRagCatalog:
    """:class:`~vancetope_rag.store.port.CatalogStore` on ``rags`` and the live pointers of
    ``rag_names``; shared by the control and migration stores, which delegate to it (the
    switch's :meth:`flip` and :meth:`record_states` are its own)."""

    def __init__(self, database: Any, now: Callable[[], datetime]) -> None:
        self.rags = database["rags"]
        self.names = database[ix.RAG_NAMES]
        self._now = now

    # -- reading through the pointer --------------------------------------------------------

    def _pointers(self, tenant_id: str, project_id: str, names: list[str] | None) -> dict[str, str]:
        flt: dict[str, Any] = {"tenantId": tenant_id, "projectId": project_id}
        if names is not None:
            flt["name"] = {"$in": names}
        return {p["name"]: p["ragId"] for p in self.names.find(flt, {"name": 1, "ragId": 1})}

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        pointer = self.names.find_one(_name_key(tenant_id, project_id, name))
        if pointer is None:
            return None
        doc = self.rags.find_one(q.scope_filter(tenant_id, project_id, _id=pointer["ragId"]))
        return as_seen(doc, pointer["ragId"]) if doc else None

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        rag = self.get_any_rag(tenant_id, project_id, rag_id)
        return rag if rag is not None and rag.state is RagState.LIVE else None

    def get_any_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        doc = self.rags.find_one(q.scope_filter(tenant_id, project_id, _id=rag_id))
        if doc is None:
            return None
        live = self._pointers(tenant_id, project_id, [doc["name"]]).get(doc["name"])
        return as_seen(doc, live)

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        pointers = self._pointers(tenant_id, project_id, None)
        docs = self.rags.find(
            q.scope_filter(tenant_id, project_id, _id={"$in": list(pointers.values())})
        )
        found = [as_seen(d, pointers.get(d["name"])) for d in docs]
        return sorted((r for r in found if r.state is RagState.LIVE), key=lambda r: r.name)

    def rag_generations(
        self, tenant_id: str, project_id: str, name: str | None = None
    ) -> list[RagRecord]:
        flt = q.scope_filter(tenant_id, project_id)
        if name is not None:
            flt["name"] = name
        docs = list(self.rags.find(flt).sort([("name", 1), ("generation", 1), ("createdAt", 1)]))
        pointers = self._pointers(tenant_id, project_id, sorted({d["name"] for d in docs}))
        return [as_seen(d, pointers.get(d["name"])) for d in docs]

    def rag_dimensions(self) -> set[int]:
        return {int(d) for d in self.rags.distinct("embeddingDimension") if d}

    # -- writes ----------------------------------------------------------------------------

    def insert_rag(self, rag: RagRecord) -> RagRecord:
        """A new live RAG: its document, then its pointer (a taken name undoes the first)."""
        record = q.rag_to_bson(
            replace(rag, state=RagState.LIVE, retired_at=None), rag.created_at or self._now()
        )
        try:
            self.rags.insert_one(record)
        except DuplicateKeyError as exc:  # that id is taken (by any generation)
            raise rag_exists_error(rag) from exc
        key = _name_key(rag.tenant_id, rag.project_id, rag.name)
        try:
            self.names.insert_one({**key, "ragId": rag.id})
        except DuplicateKeyError as exc:
            taken = self.names.find_one(key)
            dangling = taken is not None and self.rags.find_one({"_id": taken["ragId"]}) is None
            # a pointer whose RAG was deleted behind the store's back (spec §10) is taken over
            if not (
                dangling
                and self.names.update_one(
                    {**key, "ragId": taken["ragId"]}, {"$set": {"ragId": rag.id}}
                ).modified_count
            ):
                self.rags.delete_one({"_id": rag.id})
                raise rag_exists_error(rag) from exc
        return q.rag_from_bson(record)

    def insert_generation(self, rag: RagRecord) -> RagRecord:
        record = q.rag_to_bson(
            replace(rag, state=RagState.SHADOW, retired_at=None), rag.created_at or self._now()
        )
        self.rags.insert_one(record)
        return q.rag_from_bson(record)

    def set_rag_calibration(
        self, tenant_id: str, project_id: str, rag_id: str, calibration: Calibration
    ) -> bool:
        result = self.rags.update_one(
            q.scope_filter(tenant_id, project_id, _id=rag_id),
            {"$set": {"calibration": q.calibration_to_bson(calibration)}},
        )
        return bool(result.matched_count)

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        """Pointer first (unreachable at once), then the document."""
        self.names.delete_one({"tenantId": tenant_id, "projectId": project_id, "ragId": rag_id})
        result = self.rags.delete_one(q.scope_filter(tenant_id, project_id, _id=rag_id))
        return bool(result.deleted_count)

    def flip(self, tenant_id: str, project_id: str, name: str, from_id: str, to_id: str) -> bool:
        """Point ``name`` at ``to_id`` if it points at ``from_id`` (the switch); True also
        when it points at ``to_id`` already (a repeated switch)."""
        key = _name_key(tenant_id, project_id, name)
        moved = self.names.update_one({**key, "ragId": from_id}, {"$set": {"ragId": to_id}})
        if moved.matched_count:
            return True
        pointer = self.names.find_one(key)
        return pointer is not None and pointer["ragId"] == to_id

    def record_states(self, tenant_id: str, project_id: str, live_id: str, retired_id: str) -> None:
        """Write the states the pointer already implies (informational, see the module)."""
        self.rags.update_one(
            q.scope_filter(tenant_id, project_id, _id=live_id),
            {"$set": {"state": RagState.LIVE.value, "retiredAt": None}},
        )
        self.rags.update_one(
            q.scope_filter(tenant_id, project_id, _id=retired_id, state={"$ne": "retired"}),
            {"$set": {"state": RagState.RETIRED.value, "retiredAt": q.to_bson_time(self._now())}},
        )


def upgrade_catalog(database: Any) -> None:
    """Schema 2 → 3: drop the unique name index of ``rags`` (a name now has generations)
    and give every RAG a live pointer. Idempotent; runs on open before the indexes."""
    rags = database["rags"]
    if ix.LEGACY_RAG_NAME_INDEX in rags.index_information():
        rags.drop_index(ix.LEGACY_RAG_NAME_INDEX)
    names = database[ix.RAG_NAMES]
    names.create_index(
        [(k, 1) for k in ("tenantId", "projectId", "name")],
        name="tenant_project_name_uniq",
        unique=True,
    )
    for doc in rags.find({"state": {"$in": [None, RagState.LIVE.value]}}):
        key = _name_key(doc["tenantId"], doc["projectId"], doc["name"])
        ix.upsert_racing(
            lambda key=key, doc=doc: names.update_one(  # type: ignore[misc]
                key, {"$setOnInsert": {"ragId": doc["_id"]}}, upsert=True
            )
        )
