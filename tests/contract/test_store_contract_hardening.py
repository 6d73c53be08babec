"""Store contract of the hardening reads and marks: the garbage collection reads (a RAG's
distinct source refs, the RAG ids that hold chunks in a project, documents' current paths by
id) and the ``truncated`` mark of a document indexed up to the text limit.

Runs once per adapter of ``conftest.STORE_FACTORIES``, through the port only.
"""

from __future__ import annotations

import pytest
from test_store_contract import DIM, TA, TB, TTL, P, chunk, new_doc, rag_record, unit

from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port import ChunkStore, ControlStore, Store
from vancetope_rag.store.port.documents import CleanMark, Release
from vancetope_rag.store.port.types import DocumentChange, RagScope


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


@pytest.fixture
def chunks(store: Store) -> ChunkStore:
    return store.chunks


def _scope(control: ControlStore, tenant: str, name: str, rag_id: str, dim: int = DIM) -> RagScope:
    return RagScope.of(control.insert_rag(rag_record(tenant, P, name, rag_id=rag_id, dim=dim)))


def test_source_refs_are_distinct_sorted_and_scoped(
    control: ControlStore, chunks: ChunkStore
) -> None:
    a = _scope(control, TA, "_documents", "rag-a")
    other = _scope(control, TA, "notes", "rag-n")
    foreign = _scope(control, TB, "_documents", "rag-b")
    assert chunks.source_refs(a) == []
    chunks.add_chunks(
        a,
        [
            chunk(a, f"a{i}", unit(i % DIM), source=s)
            for i, s in enumerate(["d2", "d1", "d2", "manual"])
        ],
    )
    chunks.add_chunks(other, [chunk(other, "n1", unit(0), source="elsewhere")])
    chunks.add_chunks(foreign, [chunk(foreign, "b1", unit(0), source="theirs")])
    assert chunks.source_refs(a) == ["d1", "d2", "manual"]
    assert chunks.source_refs(other) == ["elsewhere"]
    assert chunks.source_refs(RagScope(TB, P, "rag-a", DIM)) == []  # a forged scope sees none
    chunks.replace_source(a, "d2", [chunk(a, "a9", unit(1), source="d2")])
    chunks.remove_by_source(a, "manual")
    assert chunks.source_refs(a) == ["d1", "d2"]


def test_chunk_rags_lists_every_rag_id_with_chunks_in_the_project(
    control: ControlStore, chunks: ChunkStore
) -> None:
    a = _scope(control, TA, "_documents", "rag-a")
    wide = _scope(control, TA, "wide", "rag-w", dim=16)
    empty = _scope(control, TA, "empty", "rag-e")
    foreign = _scope(control, TB, "_documents", "rag-b")
    for scope, cid in ((a, "a1"), (wide, "w1"), (foreign, "b1")):
        chunks.add_chunks(scope, [chunk(scope, cid, unit(0, scope.dimension))])
    assert chunks.chunk_rags(TA, P) == {"rag-a": DIM, "rag-w": 16}
    assert chunks.chunk_rags(TB, P) == {"rag-b": DIM}
    assert chunks.chunk_rags(TA, "other-project") == {}
    # a catalog row deleted directly: its chunks are still listed, so they can be collected
    control.delete_rag(TA, P, "rag-w")
    assert chunks.chunk_rags(TA, P) == {"rag-a": DIM, "rag-w": 16}
    chunks.drop_rag(wide)
    assert chunks.chunk_rags(TA, P) == {"rag-a": DIM}
    assert empty.rag_id not in chunks.chunk_rags(TA, P)


def test_document_paths_by_id_are_scoped(control: ControlStore) -> None:
    one = control.insert_document(new_doc("documents/one.md"))
    two = control.insert_document(new_doc("documents/two.md"))
    theirs = control.insert_document(new_doc("documents/one.md", tenant=TB))
    assert control.document_paths(TA, P, []) == {}
    found = control.document_paths(TA, P, [one.id, two.id, theirs.id, "no-such-id", one.id])
    assert found == {one.id: "documents/one.md", two.id: "documents/two.md"}
    control.update_document(TA, P, one.id, DocumentChange(path="documents/renamed.md"))
    assert control.document_paths(TA, P, [one.id]) == {one.id: "documents/renamed.md"}
    many = [f"missing-{i}" for i in range(1200)] + [two.id]  # more than one batch
    assert control.document_paths(TA, P, many) == {two.id: "documents/two.md"}


def test_truncated_is_recorded_by_mark_clean_and_counted(control: ControlStore) -> None:
    docs = [control.insert_document(new_doc(f"documents/{i}.md", dirty=True)) for i in range(3)]
    assert not any(d.truncated for d in docs)
    assert control.count_truncated(TA, P) == 0
    claimed = control.claim_for_rag_index(TA, P, "w1", 10, TTL)
    for d in claimed:
        control.mark_rag_clean(
            CleanMark(
                TA,
                P,
                d.id,
                "w1",
                d.rag_version,
                state=IndexState.INDEXED,
                truncated=d.id == docs[0].id,
            )
        )
    fresh = {d.id: d for d in control.list_documents(TA, P)}
    assert [fresh[d.id].truncated for d in docs] == [True, False, False]
    assert control.count_truncated(TA, P) == 1
    assert control.count_truncated(TB, P) == 0
    control.mark_dirty(TA, P, [docs[0].id])  # dirty again: the mark stays until the next pass
    assert control.count_truncated(TA, P) == 1
    (again,) = control.claim_for_rag_index(TA, P, "w1", 10, TTL)
    control.mark_rag_clean(
        CleanMark(TA, P, again.id, "w1", again.rag_version, state=IndexState.INDEXED)
    )
    assert control.count_truncated(TA, P) == 0


def test_a_release_that_counts_no_attempt_never_fails_the_document(
    control: ControlStore, fake_clock
) -> None:  # type: ignore[no-untyped-def]
    (doc,) = [control.insert_document(new_doc("documents/a.md", dirty=True))]
    for _ in range(5):
        (claimed,) = control.claim_for_rag_index(TA, P, "w1", 10, TTL)
        state = control.release_rag_claim(
            Release(
                TA,
                P,
                claimed.id,
                "w1",
                error="store full",
                retry_delay_s=5,
                max_attempts=2,
                count_attempt=False,
            )
        )
        assert state is IndexState.PENDING
        fresh = control.get_document(TA, P, doc.id)
        assert fresh is not None
        assert (fresh.index_attempts, fresh.rag_dirty, fresh.rag_claimed_by) == (0, True, None)
        assert fresh.index_last_error == "store full"
        assert control.claim_for_rag_index(TA, P, "w1", 10, TTL) == []  # waits its delay
        fake_clock.advance(6)
