"""Store contract for ``ControlStore.document_paths`` (the citations' one lookup per turn)."""

from __future__ import annotations

from vancetope_rag.store.port import Store
from vancetope_rag.store.port.types import DocumentChange, NewDocument


def test_document_paths_are_current_and_scoped(store: Store) -> None:
    control = store.control
    a = control.insert_document(NewDocument("t-a", "p1", "documents/a.md", "text/plain", "a"))
    b = control.insert_document(NewDocument("t-a", "p1", "documents/b.md", "text/plain", "b"))
    other = control.insert_document(NewDocument("t-b", "p1", "documents/x.md", "text/plain", "x"))
    control.update_document("t-a", "p1", b.id, DocumentChange(path="documents/moved/b.md"))
    paths = control.document_paths("t-a", "p1", [a.id, b.id, b.id, other.id, "no-such-id"])
    assert paths == {a.id: "documents/a.md", b.id: "documents/moved/b.md"}
    assert control.document_paths("t-a", "p2", [a.id]) == {}  # another project of the tenant
    assert control.document_paths("t-b", "p1", [a.id, other.id]) == {other.id: "documents/x.md"}
    assert control.document_paths("t-a", "p1", []) == {}
    control.delete_document("t-a", "p1", a.id)
    assert control.document_paths("t-a", "p1", [a.id, b.id]) == {b.id: "documents/moved/b.md"}
