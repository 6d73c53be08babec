"""Every store keeps the metadata a host saved with a document: written with it, replaced by
an update, untouched by one that does not name it, kept by a restore, and read as ``{}`` from
a document written before it existed (each store's schema upgrade)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import apsw
import pytest

import postgres_support
from vancetope_rag.store import open_store
from vancetope_rag.store.port import ControlStore, Store
from vancetope_rag.store.port.types import DocumentChange, NewDocument

T, P = "tenant-m", "proj-m"
#: Keys BSON field names could not hold ('.', a leading '$'), other scripts, every scalar.
META = {"team": "support", "año": 2024, "score.v2": 0.5, "$live": True, "owner": None}


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


def new(path: str = "documents/a.md", **kwargs: object) -> NewDocument:
    return dataclasses.replace(NewDocument(T, P, path, "text/markdown", "text"), **kwargs)


def test_metadata_round_trips(control: ControlStore) -> None:
    created = control.insert_document(new(metadata=META))
    assert created.metadata == META
    assert control.get_document(T, P, created.id).metadata == META  # type: ignore[union-attr]
    by_path = control.get_document_by_path(T, P, created.path)
    assert by_path is not None and by_path.metadata == META
    assert [d.metadata for d in control.list_documents(T, P)] == [META]
    assert control.insert_document(new("documents/b.md")).metadata == {}


def test_an_update_replaces_it_and_only_when_named(control: ControlStore) -> None:
    doc = control.insert_document(new(metadata=META))
    kept = control.update_document(T, P, doc.id, DocumentChange(content="other text"))
    assert kept.metadata == META and kept.content == "other text"
    replaced = control.update_document(T, P, doc.id, DocumentChange(metadata={"team": "sales"}))
    assert replaced.metadata == {"team": "sales"}
    cleared = control.update_document(T, P, doc.id, DocumentChange(metadata={}))
    assert control.get_document(T, P, doc.id).metadata == {} == cleared.metadata  # type: ignore[union-attr]


def test_a_claimed_document_carries_it(control: ControlStore) -> None:
    control.insert_document(new(metadata=META, rag_dirty=True))
    [claimed] = control.claim_for_rag_index(T, P, "w1", 5, 60.0)
    assert claimed.metadata == META


def test_a_restore_keeps_it(control: ControlStore) -> None:
    doc = control.insert_document(new(metadata=META))
    control.delete_document(T, P, doc.id)
    assert control.restore_document(doc).metadata == META
    assert control.get_document(T, P, doc.id) == doc


# -- documents written before the schema upgrade ----------------------------------------------


def test_a_sqlite_store_of_schema_7_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "v7.db"
    store = open_store(f"sqlite:///{path}")
    doc = store.control.insert_document(new())
    store.close()
    conn = apsw.Connection(str(path))  # back to what schema version 7 wrote
    conn.execute(  # and of the steps after it (import origins, calibration, heartbeats)
        "DROP INDEX documents_attention_idx; ALTER TABLE documents DROP COLUMN import_origin; "
        "ALTER TABLE documents DROP COLUMN extraction_error; "
        "ALTER TABLE documents DROP COLUMN metadata; ALTER TABLE rags DROP COLUMN calibration; "
        "ALTER TABLE rags DROP COLUMN embedding_profile; DROP TABLE workers; "
        "PRAGMA user_version=7"
    )
    conn.close()

    store = open_store(f"sqlite:///{path}")
    try:
        assert store.control.get_document(T, P, doc.id).metadata == {}  # type: ignore[union-attr]
        changed = store.control.update_document(T, P, doc.id, DocumentChange(metadata=META))
        assert changed.metadata == META
    finally:
        store.close()


def test_a_postgres_store_of_schema_3_gains_the_column() -> None:
    from vancetope_rag.store.postgres import schema
    from vancetope_rag.store.postgres.store import open_postgres_store

    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri)
    try:
        schema.initialize(store.db, upto=3)
        with store.db.initializing():  # the version check would refuse the older schema
            store.db.execute(
                "INSERT INTO documents (id, tenant_id, project_id, path, mime_type, content, "
                "content_hash, created_at, updated_at) VALUES "
                "('d1', %s, %s, 'documents/a.md', 'text/markdown', 'hello', 'h', 1, 1)",
                (T, P),
            )
        store.initialize()
        assert store.control.get_document(T, P, "d1").metadata == {}  # type: ignore[union-attr]
    finally:
        store.close()
        postgres_support.drop_schema(name)


def test_a_mongo_document_without_the_field_reads_as_empty(tmp_path: Path) -> None:
    import mongomock

    from vancetope_rag.store.mongo.client import open_mongo_store

    client = mongomock.MongoClient()
    store = open_mongo_store("mongodb://localhost/t", client=client)
    try:
        doc = store.control.insert_document(new(metadata=META))
        client["t"]["documents"].update_one({"_id": doc.id}, {"$unset": {"metadata": ""}})
        assert store.control.get_document(T, P, doc.id).metadata == {}  # type: ignore[union-attr]
    finally:
        store.close()
