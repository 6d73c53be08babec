"""Both stores keep what an import's extraction recorded, and a document whose file cannot be
read: created FAILED with the reason, or failed later with its claim ended."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port import ControlStore, Store
from vancetope_rag.store.port.documents import Claim, CleanMark
from vancetope_rag.store.port.types import DocumentChange, NewDocument

T, P = "tenant-x", "proj-x"
RECORD = json.dumps({"fileHash": "ab", "config": "cd", "sections": [["page 1", 0, 4]]})
TTL = 60.0


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


def doc(path: str = "documents/a.pdf", **kwargs: object) -> NewDocument:
    return dataclasses.replace(
        NewDocument(T, P, path, "text/plain", "text", rag_dirty=True), **kwargs
    )


def test_the_extraction_record_round_trips(control: ControlStore) -> None:
    created = control.insert_document(doc(extraction=RECORD))
    assert created.extraction == RECORD and created.index_state is IndexState.PENDING
    assert control.get_document(T, P, created.id).extraction == RECORD  # type: ignore[union-attr]
    other = json.dumps({"fileHash": "ef", "config": "cd"})
    updated = control.update_document(T, P, created.id, DocumentChange(extraction=other))
    assert updated.extraction == other and updated.content == "text"
    cleared = control.update_document(T, P, created.id, DocumentChange(extraction=None))
    assert cleared.extraction is None
    assert control.insert_document(doc("documents/b.md")).extraction is None


def test_a_document_can_be_created_failed(control: ControlStore) -> None:
    failed = control.insert_document(
        doc(content="", extraction=RECORD, failed_reason="no text layer — configure OCR")
    )
    assert failed.index_state is IndexState.FAILED and not failed.rag_dirty
    assert failed.index_last_error == "no text layer — configure OCR"
    assert control.claim_for_rag_index(T, P, "w1", 10, TTL) == []
    assert control.document_state_counts(T, P)["failed"] == 1


def test_failing_a_claimed_document_ends_the_claim(control: ControlStore) -> None:
    created = control.insert_document(doc())
    [claimed] = control.claim_for_rag_index(T, P, "w1", 10, TTL)
    failed = control.update_document(
        T,
        P,
        created.id,
        DocumentChange(content="", extraction=RECORD, failed_reason="the PDF is encrypted"),
    )
    assert failed.index_state is IndexState.FAILED and failed.rag_claimed_by is None
    assert failed.index_last_error == "the PDF is encrypted" and failed.content == ""
    assert failed.rag_version > claimed.rag_version
    assert not control.holds_claim(Claim(T, P, created.id, "w1"))
    # The worker that held it finishes nothing: its version is gone.
    assert not control.mark_rag_clean(CleanMark.of(claimed, "w1", IndexState.INDEXED))
    after = control.get_document(T, P, created.id)
    assert after is not None and after.index_state is IndexState.FAILED
    # Queued again (a reindex), it is pending like any document, and still says why its
    # last attempt failed until the next one ends.
    control.mark_dirty(T, P, [created.id])
    again = control.get_document(T, P, created.id)
    assert again is not None and again.index_state is IndexState.PENDING
    assert again.index_last_error == "the PDF is encrypted"


def test_failed_documents_are_scoped(control: ControlStore) -> None:
    control.insert_document(doc(failed_reason="corrupt"))
    assert control.document_state_counts(T, "other")["failed"] == 0
    assert control.document_state_counts("other", P)["failed"] == 0
