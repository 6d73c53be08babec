"""The layer the store adapters share (``store/port/shared.py``) and how each adapter translates
it.

The pure functions are checked directly; the twin errors are checked through every adapter of
the contract suite, so an adapter that words an error its own way again fails here.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from vancetope_rag.domain.records import Chunk, IndexState, RagRecord
from vancetope_rag.errors import (
    DimensionMismatchError,
    DocumentNotFoundError,
    InvalidInputError,
    RagAlreadyExistsError,
)
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.port import Store
from vancetope_rag.store.port.shared import (
    ERROR_TEXT_MAX,
    DocumentChanges,
    capped_error,
    check_top_k,
    checked_vector,
    content_hash,
    document_not_found_error,
    foreign_chunk_error,
    iter_filter,
    path_exists_error,
    path_taken_error,
    rag_exists_error,
    state_counts,
    unique_batches,
    vector_from_bytes,
    vector_to_bytes,
)
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope
from vancetope_rag.store.sql.rows import DIRTY_SETS, document_update_sql

T, P, DIM = "tenant-s", "proj-s", 4

# -- the document change set ------------------------------------------------------------------


def test_no_argument_changes_nothing() -> None:
    changes = DocumentChanges.of(DocumentChange())
    assert changes.values == {} and changes.mark_dirty is False


def test_every_given_field_is_changed_and_content_brings_its_hash() -> None:
    changes = DocumentChanges.of(
        DocumentChange(
            path="b.md",
            mime_type="text/plain",
            content="two",
            summary="s",
            rag_enabled=True,
            mark_dirty=True,
        ),
    )
    assert changes.values == {
        "path": "b.md",
        "mime_type": "text/plain",
        "content": "two",
        "content_hash": content_hash("two"),
        "summary": "s",
        "rag_enabled": True,
    }
    assert changes.mark_dirty is True


def test_none_clears_a_field_while_unset_leaves_it() -> None:
    cleared = DocumentChanges.of(DocumentChange(summary=None, rag_enabled=None))
    assert cleared.values == {"summary": None, "rag_enabled": None}
    assert "content_hash" not in DocumentChanges.of(DocumentChange(path="x.md")).values


def test_content_hash_is_the_sha256_of_the_utf8_text() -> None:
    assert content_hash("héllo") == hashlib.sha256("héllo".encode()).hexdigest()
    assert content_hash("a") != content_hash("b")


def test_sqlite_translation_of_a_change_set() -> None:
    changes = DocumentChanges.of(DocumentChange(content="c", summary=None, rag_enabled=False))
    sets, params = document_update_sql(changes, 12.5)
    assert sets == "updated_at = ?, content = ?, content_hash = ?, summary = ?, rag_enabled = ?"
    assert params == [12.5, "c", content_hash("c"), None, 0]  # booleans stored as 0/1
    dirty_sets, dirty_params = document_update_sql(DocumentChanges({}, mark_dirty=True), 1.0)
    assert dirty_sets == ", ".join(("updated_at = ?", *DIRTY_SETS)) and dirty_params == [1.0]
    assert "rag_version = rag_version + 1" in DIRTY_SETS


def test_mongo_translation_of_a_change_set() -> None:
    changes = DocumentChanges.of(
        DocumentChange(path="p", mime_type="m", content="c", summary=None, rag_enabled=True)
    )
    (stage,) = q.document_update(changes, time=q.ServerTime())
    assert stage["$set"] == {
        "path": {"$literal": "p"},
        "mimeType": {"$literal": "m"},
        "content": {"$literal": "c"},
        "contentHash": {"$literal": content_hash("c")},
        "summary": {"$literal": None},
        "ragEnabled": {"$literal": True},
        "updatedAt": "$$NOW",
    }
    dirty = q.document_update(DocumentChanges({}, mark_dirty=True), time=q.ServerTime())
    assert dirty[1] == q.dirty_stage()


# -- small shared rules ------------------------------------------------------------------------


def test_error_text_is_capped() -> None:
    assert capped_error("short") == "short"
    assert capped_error("x" * (ERROR_TEXT_MAX + 5)) == "x" * ERROR_TEXT_MAX


def test_state_counts_name_every_state() -> None:
    counts = state_counts([("indexed", 3), ("failed", 1)])
    assert counts == {s.value: 0 for s in IndexState} | {"indexed": 3, "failed": 1}


def test_unique_batches_drop_repeats_and_keep_order() -> None:
    assert list(unique_batches(["a", "b", "a", "c", "d", "b", "e"], 2)) == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    assert list(unique_batches([], 3)) == []


def test_cached_vectors_round_trip_as_float32() -> None:
    blob = vector_to_bytes([0.5, -1.25, 3.0])
    assert len(blob) == 3 * 4
    assert vector_from_bytes(blob) == [0.5, -1.25, 3.0]


def test_filter_keys_negation_and_values() -> None:
    assert list(iter_filter({"kind": "summary", "!path": ("a.md", "b.md")})) == [
        ("kind", False, ["summary"]),
        ("path", True, ["a.md", "b.md"]),
    ]
    assert list(iter_filter(None)) == []
    with pytest.raises(InvalidInputError, match="filterable keys: kind, path, sourceRef"):
        list(iter_filter({"text": "x"}))


def test_top_k_and_vector_checks() -> None:
    check_top_k(1)
    with pytest.raises(InvalidInputError, match="top_k must be at least 1"):
        check_top_k(0)
    assert checked_vector([1, 0, 0], 3).dtype == np.float32
    with pytest.raises(DimensionMismatchError):
        checked_vector([1.0, 0.0], 3)
    with pytest.raises(InvalidInputError, match="NaN"):
        checked_vector([1.0, float("nan"), 0.0], 3)
    with pytest.raises(InvalidInputError, match="all zeros"):
        checked_vector([0.0, 0.0, 0.0], 3)


# -- twin errors: every adapter raises the shared error ------------------------------------


def _message(exc_info: pytest.ExceptionInfo[Any]) -> str:
    return str(exc_info.value)


def _rag(rag_id: str = "rag-1") -> RagRecord:
    return RagRecord(
        id=rag_id,
        tenant_id=T,
        project_id=P,
        name="notes",
        embedding_provider="test",
        embedding_model="m",
        embedding_dimension=DIM,
        chunk_size=100,
        chunk_overlap=10,
    )


def test_document_errors_are_worded_alike(store: Store) -> None:
    control = store.control
    doc = NewDocument(T, P, "a.md", "text/plain", "one")
    control.insert_document(doc)
    with pytest.raises(InvalidInputError) as info:
        control.insert_document(doc)
    assert _message(info) == str(path_exists_error(doc))
    assert (info.value.tenant_id, info.value.project_id) == (T, P)

    other = control.insert_document(NewDocument(T, P, "b.md", "text/plain", "two"))
    with pytest.raises(InvalidInputError) as info:
        control.update_document(T, P, other.id, DocumentChange(path="a.md"))
    assert _message(info) == str(path_taken_error("a.md", other.id))
    assert info.value.document_id == other.id

    with pytest.raises(DocumentNotFoundError) as missing:
        control.update_document(T, P, "nope", DocumentChange(content="x"))
    assert _message(missing) == str(document_not_found_error(T, P, "nope"))


def test_rag_and_chunk_errors_are_worded_alike(store: Store) -> None:
    store.control.insert_rag(_rag())
    with pytest.raises(RagAlreadyExistsError) as info:
        store.control.insert_rag(_rag("rag-2"))
    assert _message(info) == str(rag_exists_error(_rag("rag-2")))
    assert info.value.rag_name == "notes"

    scope = RagScope(T, P, "rag-1", DIM)
    vec = [1.0, 0.0, 0.0, 0.0]
    store.chunks.add_chunks(scope, [Chunk("c1", "rag-1", "doc-1", "t", vec)])
    with pytest.raises(InvalidInputError) as taken:
        store.chunks.add_chunks(scope, [Chunk("c1", "rag-1", "doc-2", "t", vec)])
    # the detail (what the database says) differs by adapter; the wording does not
    assert _message(taken).startswith("a chunk id is already taken: ")
    assert _message(taken).endswith("; chunk ids must be unique")
    assert taken.value.rag_id == "rag-1"

    with pytest.raises(InvalidInputError) as foreign:
        store.chunks.add_chunks(scope, [Chunk("c2", "rag-other", "doc-1", "t", vec)])
    assert _message(foreign) == str(foreign_chunk_error())
    with pytest.raises(InvalidInputError, match="top_k must be at least 1"):
        store.chunks.query(scope, vec, 0)
