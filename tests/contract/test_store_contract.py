"""Store contract: what every store adapter must do, checked through the port only.

Runs once per factory in ``conftest.STORE_FACTORIES`` (SQLite today, MongoDB later). No SQL,
no adapter internals: a test that needs either belongs in an adapter's own test file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from vancetope_rag.domain.records import (
    Chunk,
    Document,
    Hit,
    IndexState,
    ProjectStatus,
    RagRecord,
)
from vancetope_rag.domain.retrieval.calibration import PROBE_SET_ID, Calibration
from vancetope_rag.domain.retrieval.rerank_calibration import (
    RERANK_RULE_ID,
    RerankCalibration,
    RerankUnmeasurable,
    rerank_identity,
)
from vancetope_rag.errors import (
    DimensionMismatchError,
    DocumentNotFoundError,
    InvalidInputError,
    RagAlreadyExistsError,
)
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store.port import (
    CatalogStore,
    ChunkStore,
    ControlStore,
    DocumentStore,
    EmbeddingCache,
    ProjectStore,
    RebuildStore,
    SettingsStore,
    Store,
)
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope

#: Lets search catch up with the writes so far (conftest's ``settle``).
Settle = Callable[[], None]

TA, TB = "tenant-a", "tenant-b"
P = "proj-1"
DIM = 8
TTL = 60.0

RUNNING, SUSPENDED, CLOSED = ProjectStatus.RUNNING, ProjectStatus.SUSPENDED, ProjectStatus.CLOSED


# -- helpers ---------------------------------------------------------------------------------


def new_doc(
    path: str, *, tenant: str = TA, project: str = P, content: str = "text", dirty: bool = False
) -> NewDocument:
    return NewDocument(tenant, project, path, "text/markdown", content, rag_dirty=dirty)


def rag_record(tenant: str, project: str, name: str, *, rag_id: str, dim: int = DIM) -> RagRecord:
    return RagRecord(
        id=rag_id,
        tenant_id=tenant,
        project_id=project,
        name=name,
        embedding_provider="test",
        embedding_model="test-model",
        embedding_dimension=dim,
        chunk_size=200,
        chunk_overlap=20,
        title="Title",
        description="About",
    )


def unit(i: int, dim: int = DIM, sign: float = 1.0) -> list[float]:
    v = np.zeros(dim, dtype=np.float32)
    v[i] = sign
    return v.tolist()


def random_vectors(n: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunk(
    scope: RagScope,
    cid: str,
    vec: Sequence[float],
    *,
    source: str = "doc-1",
    kind: str = "content",
    path: str | None = "a.md",
    metadata: dict[str, object] | None = None,
) -> Chunk:
    return Chunk(
        id=cid,
        rag_id=scope.rag_id,
        source_ref=source,
        text=f"text of {cid}",
        embedding=[float(x) for x in vec],
        kind=kind,
        path=path,
        metadata=dict(metadata or {}),
    )


def ids(hits: Sequence[Hit]) -> list[str]:
    return [h.chunk_id for h in hits]


def exact_top_k(
    vectors: dict[str, np.ndarray], query: Sequence[float], k: int
) -> list[tuple[str, float]]:
    q = np.asarray(query, dtype=np.float64)
    scored = [
        (cid, float(v @ q / (np.linalg.norm(v) * np.linalg.norm(q)))) for cid, v in vectors.items()
    ]
    return sorted(scored, key=lambda t: -t[1])[:k]


def doc_of(control: ControlStore, doc: Document) -> Document:
    fresh = control.get_document(doc.tenant_id, doc.project_id, doc.id)
    assert fresh is not None
    return fresh


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


@pytest.fixture
def chunks(store: Store) -> ChunkStore:
    return store.chunks


@pytest.fixture
def scope(control: ControlStore) -> RagScope:
    return RagScope.of(control.insert_rag(rag_record(TA, P, "_documents", rag_id="rag-a")))


def test_store_satisfies_the_ports(store: Store) -> None:
    assert isinstance(store.control, ControlStore)
    assert isinstance(store.chunks, ChunkStore)
    for port in (ProjectStore, DocumentStore, CatalogStore, SettingsStore, EmbeddingCache):
        assert isinstance(store.control, port)
    assert isinstance(store.rebuilds, RebuildStore)
    # the adapter's own catalog, behind its control and rebuild stores, speaks the same port
    catalog = store.rebuilds.catalog  # type: ignore[attr-defined]
    assert isinstance(catalog, CatalogStore)


# -- projects --------------------------------------------------------------------------------


def test_upsert_get_and_list_projects(control: ControlStore, fake_clock) -> None:
    created = control.upsert_project(TA, "p1", status=RUNNING, home_node="node-1")
    assert (created.tenant_id, created.project_id) == (TA, "p1")
    assert (created.status, created.home_node) == (RUNNING, "node-1")
    assert created.created_at is not None
    assert control.get_project(TA, "p1") == created
    assert control.get_project(TB, "p1") is None

    fake_clock.advance(100)
    updated = control.upsert_project(TA, "p1", status=SUSPENDED, home_node=None)
    assert (updated.status, updated.home_node) == (SUSPENDED, None)
    assert updated.created_at == created.created_at

    control.upsert_project(TA, "p2", status=RUNNING, home_node=None)
    control.upsert_project(TB, "p1", status=RUNNING, home_node=None)
    keys = {(p.tenant_id, p.project_id) for p in control.list_projects()}
    assert keys == {(TA, "p1"), (TA, "p2"), (TB, "p1")}
    assert {p.project_id for p in control.list_projects(tenant_id=TA)} == {"p1", "p2"}
    running = {(p.tenant_id, p.project_id) for p in control.list_projects(status=RUNNING)}
    assert running == {(TA, "p2"), (TB, "p1")}
    assert [p.project_id for p in control.list_projects(status=SUSPENDED, tenant_id=TA)] == ["p1"]


def test_projects_for_node(control: ControlStore) -> None:
    control.upsert_project(TA, "home", status=RUNNING, home_node="node-1")
    control.upsert_project(TB, "home-b", status=RUNNING, home_node="node-1")
    control.upsert_project(TA, "floating", status=RUNNING, home_node=None)
    control.upsert_project(TA, "elsewhere", status=RUNNING, home_node="node-2")
    control.upsert_project(TA, "suspended", status=SUSPENDED, home_node="node-1")
    control.upsert_project(TA, "closed", status=CLOSED, home_node=None)

    got = {(p.tenant_id, p.project_id) for p in control.projects_for_node("node-1")}
    assert got == {(TA, "home"), (TB, "home-b"), (TA, "floating")}
    got2 = {(p.tenant_id, p.project_id) for p in control.projects_for_node("node-2")}
    assert got2 == {(TA, "elsewhere"), (TA, "floating")}


# -- documents -------------------------------------------------------------------------------


def test_insert_get_and_get_by_path(control: ControlStore) -> None:
    doc = control.insert_document(
        NewDocument(TA, P, "notes/a.md", "text/markdown", "alpha", summary="sum", rag_enabled=True)
    )
    assert doc.id
    assert (doc.tenant_id, doc.project_id, doc.path) == (TA, P, "notes/a.md")
    assert (doc.mime_type, doc.content, doc.summary, doc.rag_enabled) == (
        "text/markdown",
        "alpha",
        "sum",
        True,
    )
    assert doc.rag_dirty is False and doc.index_state is IndexState.NONE
    assert doc.content_hash and doc.created_at is not None and doc.updated_at is not None
    assert control.get_document(TA, P, doc.id) == doc
    assert control.get_document_by_path(TA, P, "notes/a.md") == doc
    assert control.get_document_by_path(TA, P, "notes/b.md") is None
    assert control.get_document(TA, P, "no-such-id") is None

    dirty = control.insert_document(new_doc("b.md", dirty=True))
    assert dirty.rag_dirty is True and dirty.index_state is IndexState.PENDING
    assert dirty.id != doc.id


def test_same_content_same_hash_other_content_other_hash(control: ControlStore) -> None:
    a = control.insert_document(new_doc("a.md", content="same"))
    b = control.insert_document(new_doc("b.md", content="same"))
    c = control.insert_document(new_doc("c.md", content="other"))
    assert a.content_hash == b.content_hash != c.content_hash


def test_list_documents_with_path_prefix(control: ControlStore) -> None:
    for path in [
        "docs/a.md",
        "docs/sub/b.md",
        "docs.md",
        "other/c.md",
        "a_b/x.md",
        "axb/y.md",
        "r.e+(1)/z.md",
        "rXe+(1)/w.md",
    ]:
        control.insert_document(new_doc(path))
    control.insert_document(new_doc("docs/other-project.md", project="p-2"))

    assert len(control.list_documents(TA, P)) == 8
    assert sorted(d.path for d in control.list_documents(TA, P, path_prefix="docs/")) == [
        "docs/a.md",
        "docs/sub/b.md",
    ]
    # the prefix is literal text, not a LIKE or regex pattern
    assert [d.path for d in control.list_documents(TA, P, path_prefix="a_b/")] == ["a_b/x.md"]
    assert [d.path for d in control.list_documents(TA, P, path_prefix="r.e+(1)/")] == [
        "r.e+(1)/z.md"
    ]
    assert control.list_documents(TA, P, path_prefix="nothing/") == []


def test_duplicate_path_is_invalid_input(control: ControlStore) -> None:
    control.insert_document(new_doc("a.md"))
    with pytest.raises(InvalidInputError):
        control.insert_document(new_doc("a.md", content="again"))
    # the same path is fine in another project or tenant
    control.insert_document(new_doc("a.md", project="p-2"))
    control.insert_document(new_doc("a.md", tenant=TB))
    assert len(control.list_documents(TA, P)) == 1


def test_update_document_fields(control: ControlStore, fake_clock) -> None:
    doc = control.insert_document(
        NewDocument(TA, P, "a.md", "text/markdown", "one", summary="s", rag_enabled=True)
    )
    fake_clock.advance(10)
    updated = control.update_document(
        TA,
        P,
        doc.id,
        DocumentChange(
            path="b.md", mime_type="text/plain", content="two", summary=None, rag_enabled=None
        ),
    )
    assert (updated.path, updated.mime_type, updated.content) == ("b.md", "text/plain", "two")
    assert updated.summary is None and updated.rag_enabled is None
    assert updated.content_hash != doc.content_hash
    assert updated.updated_at is not None and doc.updated_at is not None
    assert updated.updated_at > doc.updated_at
    assert updated.rag_version == doc.rag_version and updated.rag_dirty is False
    assert control.get_document_by_path(TA, P, "a.md") is None
    assert control.get_document_by_path(TA, P, "b.md") == updated

    only_flag = control.update_document(TA, P, doc.id, DocumentChange(rag_enabled=False))
    assert only_flag.rag_enabled is False and only_flag.content == "two"


def test_update_to_a_taken_path_is_invalid_input(control: ControlStore) -> None:
    control.insert_document(new_doc("a.md"))
    b = control.insert_document(new_doc("b.md"))
    with pytest.raises(InvalidInputError):
        control.update_document(TA, P, b.id, DocumentChange(path="a.md"))
    assert doc_of(control, b).path == "b.md"


def test_update_unknown_document_raises(control: ControlStore) -> None:
    with pytest.raises(DocumentNotFoundError) as info:
        control.update_document(TA, P, "missing", DocumentChange(content="x"))
    assert info.value.document_id == "missing"


def test_delete_document(control: ControlStore) -> None:
    doc = control.insert_document(new_doc("a.md"))
    assert control.delete_document(TA, P, doc.id) is True
    assert control.get_document(TA, P, doc.id) is None
    assert control.delete_document(TA, P, doc.id) is False
    control.insert_document(new_doc("a.md"))  # the path is free again


def test_rag_version_increments_on_mark_dirty(control: ControlStore) -> None:
    doc = control.insert_document(new_doc("a.md"))
    v0 = doc.rag_version
    assert control.mark_dirty(TA, P, [doc.id]) == 1
    d1 = doc_of(control, doc)
    assert d1.rag_version == v0 + 1
    assert d1.rag_dirty is True and d1.index_state is IndexState.PENDING
    d2 = control.update_document(TA, P, doc.id, DocumentChange(content="new", mark_dirty=True))
    assert d2.rag_version == v0 + 2
    assert control.mark_dirty(TA, P, [doc.id, "missing"]) == 1
    assert doc_of(control, doc).rag_version == v0 + 3


def test_documents_are_scoped_by_tenant_and_project(control: ControlStore) -> None:
    a = control.insert_document(new_doc("secret.md", content="tenant A only", dirty=True))
    for tenant, project in [(TB, P), (TA, "p-2")]:
        assert control.get_document(tenant, project, a.id) is None
        assert control.get_document_by_path(tenant, project, "secret.md") is None
        assert control.list_documents(tenant, project) == []
        assert control.list_documents(tenant, project, path_prefix="sec") == []
        with pytest.raises(DocumentNotFoundError):
            control.update_document(tenant, project, a.id, DocumentChange(content="overwritten"))
        assert control.delete_document(tenant, project, a.id) is False
        assert control.mark_dirty(tenant, project, [a.id]) == 0
        assert control.claim_for_rag_index(tenant, project, "w-b", 10, TTL) == []
        assert control.holds_claim(Claim(tenant, project, a.id, "w-b")) is False
        assert control.document_state_counts(tenant, project)[IndexState.PENDING.value] == 0
    assert doc_of(control, a) == a


# -- claims and leases -----------------------------------------------------------------------


def dirty_docs(control: ControlStore, n: int, *, tenant: str = TA) -> list[Document]:
    return [
        control.insert_document(new_doc(f"d{i}.md", tenant=tenant, dirty=True)) for i in range(n)
    ]


def test_claim_returns_at_most_batch_size_and_leases_them(control: ControlStore) -> None:
    docs = dirty_docs(control, 5)
    control.insert_document(new_doc("clean.md"))
    got = control.claim_for_rag_index(TA, P, "w1", 3, TTL)
    assert len(got) == 3
    assert {d.id for d in got} <= {d.id for d in docs}
    for d in got:
        assert d.rag_claimed_by == "w1" and d.rag_claimed_at == control.now()
        assert d.index_state is IndexState.PROCESSING
        assert control.holds_claim(Claim(TA, P, d.id, "w1"))
        assert not control.holds_claim(Claim(TA, P, d.id, "w2"))
    assert control.claim_for_rag_index(TA, P, "w1", 0, TTL) == []


def test_no_document_goes_to_two_workers_while_the_lease_lives(
    control: ControlStore, fake_clock
) -> None:
    docs = dirty_docs(control, 5)
    first = control.claim_for_rag_index(TA, P, "w1", 3, TTL)
    second = control.claim_for_rag_index(TA, P, "w2", 10, TTL)
    assert len(second) == 2
    assert {d.id for d in first} | {d.id for d in second} == {d.id for d in docs}
    assert {d.id for d in first} & {d.id for d in second} == set()
    assert control.claim_for_rag_index(TA, P, "w3", 10, TTL) == []

    fake_clock.advance(TTL - 1)
    assert control.claim_for_rag_index(TA, P, "w3", 10, TTL) == []

    fake_clock.advance(2)  # both leases have expired: the documents can be claimed again
    third = control.claim_for_rag_index(TA, P, "w3", 10, TTL)
    assert {d.id for d in third} == {d.id for d in docs}
    assert all(control.holds_claim(Claim(TA, P, d.id, "w3")) for d in docs)
    assert not any(control.holds_claim(Claim(TA, P, d.id, "w1")) for d in docs)


def test_claim_takes_only_the_projects_own_documents(control: ControlStore) -> None:
    mine = dirty_docs(control, 2)
    dirty_docs(control, 2, tenant=TB)
    control.insert_document(new_doc("other.md", project="p-2", dirty=True))
    got = control.claim_for_rag_index(TA, P, "w1", 10, TTL)
    assert {d.id for d in got} == {d.id for d in mine}
    assert all((d.tenant_id, d.project_id) == (TA, P) for d in got)


def test_mark_rag_clean_clears_dirty(control: ControlStore) -> None:
    a, b = dirty_docs(control, 2)
    claimed = {d.id: d for d in control.claim_for_rag_index(TA, P, "w1", 10, TTL)}
    assert control.mark_rag_clean(
        CleanMark(TA, P, a.id, "w1", claimed[a.id].rag_version, state=IndexState.INDEXED)
    )
    assert control.mark_rag_clean(
        CleanMark(TA, P, b.id, "w1", claimed[b.id].rag_version, state=IndexState.NONE)
    )
    ca, cb = doc_of(control, a), doc_of(control, b)
    assert ca.rag_dirty is False and ca.index_state is IndexState.INDEXED
    assert ca.rag_claimed_by is None and ca.indexed_at == control.now()
    assert cb.rag_dirty is False and cb.index_state is IndexState.NONE
    assert not control.holds_claim(Claim(TA, P, a.id, "w1"))
    assert control.claim_for_rag_index(TA, P, "w2", 10, TTL) == []


@pytest.mark.parametrize("how", ["mark_dirty", "update"])
def test_mark_rag_clean_with_a_stale_version_leaves_it_dirty(
    control: ControlStore, how: str
) -> None:
    (doc,) = dirty_docs(control, 1)
    (claimed,) = control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    if how == "mark_dirty":
        control.mark_dirty(TA, P, [doc.id])
    else:
        control.update_document(TA, P, doc.id, DocumentChange(content="changed", mark_dirty=True))
    assert control.holds_claim(Claim(TA, P, doc.id, "w1"))  # an update does not steal the lease

    control.mark_rag_clean(
        CleanMark(TA, P, doc.id, "w1", claimed.rag_version, state=IndexState.INDEXED)
    )
    after = doc_of(control, doc)
    assert after.rag_dirty is True and after.index_state is IndexState.PENDING
    assert after.rag_claimed_by is None
    # the second pass happens at once and can finish with the new version
    (again,) = control.claim_for_rag_index(TA, P, "w2", 1, TTL)
    assert again.rag_version == claimed.rag_version + 1
    assert control.mark_rag_clean(
        CleanMark(TA, P, doc.id, "w2", again.rag_version, state=IndexState.INDEXED)
    )
    assert doc_of(control, doc).rag_dirty is False


def test_a_worker_that_lost_its_lease_changes_nothing(control: ControlStore, fake_clock) -> None:
    (doc,) = dirty_docs(control, 1)
    (old,) = control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    fake_clock.advance(TTL + 1)
    (new,) = control.claim_for_rag_index(TA, P, "w2", 1, TTL)
    before = doc_of(control, doc)

    assert not control.holds_claim(Claim(TA, P, doc.id, "w1"))
    assert (
        control.mark_rag_clean(
            CleanMark(TA, P, doc.id, "w1", old.rag_version, state=IndexState.INDEXED)
        )
        is False
    )
    control.release_rag_claim(
        Release(TA, P, doc.id, "w1", error="late failure", retry_delay_s=10, max_attempts=1)
    )
    after = doc_of(control, doc)
    assert after == before
    assert after.rag_dirty is True and after.rag_claimed_by == "w2"
    assert after.index_attempts == 0 and after.index_last_error is None
    assert control.mark_rag_clean(
        CleanMark(TA, P, doc.id, "w2", new.rag_version, state=IndexState.INDEXED)
    )


def test_release_retries_later_then_fails(control: ControlStore, fake_clock) -> None:
    (doc,) = dirty_docs(control, 1)
    control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    state = control.release_rag_claim(
        Release(TA, P, doc.id, "w1", error="boom 1", retry_delay_s=30, max_attempts=3)
    )
    assert state is IndexState.PENDING
    d = doc_of(control, doc)
    assert d.rag_dirty is True and d.index_state is IndexState.PENDING
    assert d.rag_claimed_by is None
    assert d.index_attempts == 1 and d.index_last_error == "boom 1"
    assert d.index_next_attempt_at == control.now() + timedelta(seconds=30)

    # not before its retry time
    assert control.claim_for_rag_index(TA, P, "w1", 1, TTL) == []
    fake_clock.advance(29)
    assert control.claim_for_rag_index(TA, P, "w1", 1, TTL) == []
    fake_clock.advance(2)
    assert len(control.claim_for_rag_index(TA, P, "w1", 1, TTL)) == 1
    assert (
        control.release_rag_claim(
            Release(TA, P, doc.id, "w1", error="boom 2", retry_delay_s=30, max_attempts=3)
        )
        is IndexState.PENDING
    )

    fake_clock.advance(31)
    assert len(control.claim_for_rag_index(TA, P, "w1", 1, TTL)) == 1
    state = control.release_rag_claim(
        Release(TA, P, doc.id, "w1", error="boom 3", retry_delay_s=30, max_attempts=3)
    )
    assert state is IndexState.FAILED
    failed = doc_of(control, doc)
    assert failed.index_state is IndexState.FAILED and failed.rag_dirty is False
    assert failed.index_attempts == 3 and failed.index_last_error == "boom 3"
    assert failed.rag_claimed_by is None
    fake_clock.advance(1000)
    assert control.claim_for_rag_index(TA, P, "w1", 1, TTL) == []


@pytest.mark.parametrize("how", ["mark_dirty", "update"])
def test_dirty_again_after_failure_resets_attempts(
    control: ControlStore, fake_clock, how: str
) -> None:
    (doc,) = dirty_docs(control, 1)
    control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    control.release_rag_claim(
        Release(TA, P, doc.id, "w1", error="boom", retry_delay_s=5, max_attempts=1)
    )
    assert doc_of(control, doc).index_state is IndexState.FAILED

    if how == "mark_dirty":
        control.mark_dirty(TA, P, [doc.id])
    else:
        control.update_document(TA, P, doc.id, DocumentChange(content="fixed", mark_dirty=True))
    d = doc_of(control, doc)
    assert d.rag_dirty is True and d.index_state is IndexState.PENDING
    assert d.index_attempts == 0 and d.index_next_attempt_at is None
    # queued again, it still says why its last attempt failed (a reindex used to erase it:
    # the UI then showed the document as plain "pending" and "Failed: None")
    assert d.index_last_error == "boom"
    (claimed,) = control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    assert control.mark_rag_clean(
        CleanMark(TA, P, doc.id, "w1", claimed.rag_version, state=IndexState.INDEXED)
    )
    assert doc_of(control, doc).index_last_error is None  # the next attempt's word counts


def test_an_update_can_clear_the_last_error(control: ControlStore) -> None:
    """New text (a new read of a scan that failed) drops the error of the text before."""
    (doc,) = dirty_docs(control, 1)
    control.claim_for_rag_index(TA, P, "w1", 1, TTL)
    control.release_rag_claim(
        Release(TA, P, doc.id, "w1", error="boom", retry_delay_s=5, max_attempts=1)
    )
    change = DocumentChange(content="read now", mark_dirty=True, index_last_error=None)
    control.update_document(TA, P, doc.id, change)
    d = doc_of(control, doc)
    assert d.index_last_error is None and d.index_state is IndexState.PENDING and d.rag_dirty


def test_document_state_counts(control: ControlStore) -> None:
    control.insert_document(new_doc("none.md"))
    pending, _processing, indexed, failed = dirty_docs(control, 4)
    claimed = {d.id: d for d in control.claim_for_rag_index(TA, P, "w1", 10, TTL)}
    control.mark_rag_clean(
        CleanMark(
            TA, P, indexed.id, "w1", claimed[indexed.id].rag_version, state=IndexState.INDEXED
        )
    )
    control.release_rag_claim(
        Release(TA, P, failed.id, "w1", error="x", retry_delay_s=0, max_attempts=1)
    )
    control.release_rag_claim(
        Release(TA, P, pending.id, "w1", error="x", retry_delay_s=0, max_attempts=5)
    )
    dirty_docs(control, 2, tenant=TB)

    assert control.document_state_counts(TA, P) == {
        "none": 1,
        "pending": 1,
        "processing": 1,
        "indexed": 1,
        "failed": 1,
    }
    counts_b = control.document_state_counts(TB, P)
    assert counts_b["pending"] == 2 and sum(counts_b.values()) == 2
    assert sum(control.document_state_counts(TA, "empty").values()) == 0


# -- RAG catalog -----------------------------------------------------------------------------


def test_rag_catalog_round_trip(control: ControlStore) -> None:
    rag = control.insert_rag(rag_record(TA, P, "manual", rag_id="r1", dim=16))
    assert rag.created_at is not None
    assert (rag.name, rag.embedding_dimension, rag.chunk_size, rag.chunk_overlap) == (
        "manual",
        16,
        200,
        20,
    )
    assert (rag.title, rag.description, rag.embedding_model) == ("Title", "About", "test-model")
    assert control.get_rag(TA, P, "r1") == rag
    assert control.find_rag(TA, P, "manual") == rag
    assert control.find_rag(TA, P, "other") is None
    control.insert_rag(rag_record(TA, P, "_documents", rag_id="r2"))
    assert sorted(r.name for r in control.list_rags(TA, P)) == ["_documents", "manual"]

    assert control.delete_rag(TA, P, "r1") is True
    assert control.get_rag(TA, P, "r1") is None
    assert control.delete_rag(TA, P, "r1") is False
    assert [r.name for r in control.list_rags(TA, P)] == ["_documents"]


def test_rag_names_are_unique_per_project(control: ControlStore) -> None:
    control.insert_rag(rag_record(TA, P, "kb", rag_id="r1"))
    with pytest.raises(RagAlreadyExistsError) as info:
        control.insert_rag(rag_record(TA, P, "kb", rag_id="r2"))
    assert info.value.rag_name == "kb"
    control.insert_rag(rag_record(TA, "p-2", "kb", rag_id="r3"))
    control.insert_rag(rag_record(TB, P, "kb", rag_id="r4"))
    assert [r.id for r in control.list_rags(TA, P)] == ["r1"]


def test_rag_catalog_is_scoped(control: ControlStore) -> None:
    control.insert_rag(rag_record(TA, P, "kb", rag_id="r1"))
    assert control.get_rag(TB, P, "r1") is None
    assert control.get_rag(TA, "p-2", "r1") is None
    assert control.find_rag(TB, P, "kb") is None
    assert control.list_rags(TB, P) == []
    assert control.delete_rag(TB, P, "r1") is False
    assert control.get_rag(TA, P, "r1") is not None


def test_rag_calibration_is_stored_with_the_rag_in_its_scope(control: ControlStore) -> None:
    rag = control.insert_rag(rag_record(TA, P, "kb", rag_id="r1"))
    assert rag.calibration is None  # a new RAG is not calibrated
    measured = Calibration(
        min_score=0.3512,
        chunks=40,
        probe_set=PROBE_SET_ID,
        scores=(0.25, 0.5, -0.125),
        calibrated_at=datetime(2026, 12, 2, 14, 0, tzinfo=UTC),
        gap=0.1505,  # the relevance cut's, kept with the threshold
        spreads=(0.284, 0.25),
        rerank=RerankCalibration(  # and the cut in the project's reranker's scale
            reranker="tei:bge-reranker-base",
            identity=rerank_identity("tei", "tei", "http://rerank:8080"),
            rule="relative",
            value=1.625,
            separation=0.9375,
            chunks=40,
            rule_set=RERANK_RULE_ID,
            sources=(7.25, -0.5),
            background=(-6.0, -1.5, 2.25),
            calibrated_at=datetime(2026, 12, 2, 14, 0, tzinfo=UTC),
        ),
        # and that another reranker found nothing to measure at 30 chunks
        rerank_unmeasurable=RerankUnmeasurable(
            identity=rerank_identity("cohere", "rerank-v3.5", None),
            chunks=30,
            rule_set=RERANK_RULE_ID,
            measured_at=datetime(2026, 12, 2, 13, 0, tzinfo=UTC),
        ),
    )
    # another tenant's or project's id is not this RAG, and nothing changes
    assert control.set_rag_calibration(TB, P, "r1", measured) is False
    assert control.set_rag_calibration(TA, "p-2", "r1", measured) is False
    assert control.set_rag_calibration(TA, P, "nope", measured) is False
    assert control.get_rag(TA, P, "r1") == rag

    assert control.set_rag_calibration(TA, P, "r1", measured) is True
    for seen in (
        control.get_rag(TA, P, "r1"),
        control.find_rag(TA, P, "kb"),
        control.list_rags(TA, P)[0],
    ):
        assert seen is not None and seen.calibration == measured
    again = replace(measured, min_score=0.4, chunks=80)
    assert control.set_rag_calibration(TA, P, "r1", again) is True
    found = control.get_rag(TA, P, "r1")
    assert found is not None and found.calibration == again

    # a rebuild's new generation is calibrated before readers switch to it
    shadow = control.insert_generation(replace(rag_record(TA, P, "kb", rag_id="r2"), generation=2))
    assert shadow.calibration is None
    assert control.set_rag_calibration(TA, P, "r2", measured) is True
    seen_shadow = control.get_any_rag(TA, P, "r2")
    assert seen_shadow is not None and seen_shadow.calibration == measured
    live = control.get_rag(TA, P, "r1")
    assert live is not None and live.calibration == again


# -- settings --------------------------------------------------------------------------------


def test_settings_tenant_and_project_scopes(control: ControlStore) -> None:
    control.set_setting(TA, None, "rag.autoInject", '"AUTO"')
    control.set_setting(TA, P, "rag.autoInject", '"ON"')
    control.set_setting(TA, P, "rag.topK", "5")
    assert control.get_settings(TA, None) == {"rag.autoInject": '"AUTO"'}
    assert control.get_settings(TA, P) == {"rag.autoInject": '"ON"', "rag.topK": "5"}
    assert control.get_settings(TA, "p-2") == {}

    control.set_setting(TA, P, "rag.topK", "7")  # overwrite
    control.set_setting(TA, P, "rag.autoInject", None)  # delete
    assert control.get_settings(TA, P) == {"rag.topK": "7"}
    assert control.get_settings(TA, None) == {"rag.autoInject": '"AUTO"'}
    control.set_setting(TA, None, "missing.key", None)  # deleting nothing is fine

    assert control.get_settings(TB, None) == {}
    assert control.get_settings(TB, P) == {}
    control.set_setting(TB, None, "rag.autoInject", '"OFF"')
    assert control.get_settings(TA, None) == {"rag.autoInject": '"AUTO"'}


def test_a_projects_settings_are_read_with_its_tenants_in_one_call(
    control: ControlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every chat turn reads (``SettingsService.snapshot``): both scopes in one store
    call, one round trip on a server (it was two)."""
    control.set_setting(TA, None, "rag.autoInject", '"AUTO"')
    control.set_setting(TA, None, "rag.topK", "3")
    control.set_setting(TA, P, "rag.autoInject", '"ON"')
    control.set_setting(TA, "p-2", "rag.topK", "9")  # another project
    control.set_setting(TB, None, "rag.topK", "4")  # another tenant
    control.set_setting(TB, P, "rag.minScore", "0.5")
    assert control.get_scope_settings(TA, P) == (
        {"rag.autoInject": '"AUTO"', "rag.topK": "3"},
        {"rag.autoInject": '"ON"'},
    )
    assert control.get_scope_settings(TA, "p-3") == (
        {"rag.autoInject": '"AUTO"', "rag.topK": "3"},
        {},
    )
    assert control.get_scope_settings(TB, P) == ({"rag.topK": "4"}, {"rag.minScore": "0.5"})
    assert control.get_scope_settings("t-none", P) == ({}, {})
    calls: list[str] = []
    for name in ("get_settings", "get_scope_settings"):
        real = getattr(control, name)

        def counted(*args: object, _real: Any = real, _name: str = name) -> Any:
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(control, name, counted)
    snapshot = SettingsService(control).snapshot(TA, P)
    assert calls == ["get_scope_settings"]
    assert snapshot.effective["rag.topK"] == 3


# -- embedding cache -------------------------------------------------------------------------


def test_embedding_cache_round_trip(control: ControlStore) -> None:
    vecs = random_vectors(3, 16, seed=1)
    items = {f"h{i}": [float(x) for x in v] for i, v in enumerate(vecs)}
    control.put_cached_embeddings("model-a", items)
    got = control.get_cached_embeddings("model-a", ["h0", "h1", "h2", "missing", "h0"])
    assert set(got) == {"h0", "h1", "h2"}
    for h, v in items.items():
        assert len(got[h]) == 16
        np.testing.assert_array_equal(np.asarray(got[h], dtype=np.float32), np.float32(v))
    # float64 input comes back at float32 precision
    control.put_cached_embeddings("model-a", {"h64": [1 / 3] * 4})
    assert control.get_cached_embeddings("model-a", ["h64"])["h64"] == pytest.approx(
        [1 / 3] * 4, rel=1e-6
    )
    assert control.get_cached_embeddings("model-b", ["h0"]) == {}
    assert control.get_cached_embeddings("model-a", []) == {}
    control.put_cached_embeddings("model-a", {})


# -- chunks ----------------------------------------------------------------------------------


def test_add_count_and_get_chunks(chunks: ChunkStore, scope: RagScope) -> None:
    added = chunks.add_chunks(
        scope,
        [
            chunk(scope, "c1", unit(0), source="doc-1", path="a.md", metadata={"n": 1}),
            chunk(scope, "c2", unit(1), source="doc-1", kind="summary", path="a.md"),
            chunk(scope, "c3", unit(2), source="doc-2", path="b.md"),
            chunk(scope, "c4", unit(3), source="doc-3", path=None),
        ],
    )
    assert added == ["c1", "c2", "c3", "c4"]
    assert chunks.count_chunks(scope) == 4
    assert chunks.count_chunks(scope, filters={"sourceRef": "doc-1"}) == 2
    assert chunks.count_chunks(scope, filters={"sourceRef": "doc-1", "kind": "summary"}) == 1
    assert chunks.count_chunks(scope, filters={"!sourceRef": ["doc-1", "doc-2"]}) == 1
    everything = {h.chunk_id: h for h in chunks.get_chunks(scope)}
    assert set(everything) == {"c1", "c2", "c3", "c4"}
    c1 = everything["c1"]
    assert (c1.text, c1.source_ref, c1.kind, c1.path, c1.rag_id) == (
        "text of c1",
        "doc-1",
        "content",
        "a.md",
        scope.rag_id,
    )
    assert c1.metadata == {"n": 1}
    assert everything["c4"].path is None

    assert set(ids(chunks.get_chunks(scope, chunk_ids=["c2", "c3", "nope"]))) == {"c2", "c3"}
    assert chunks.get_chunks(scope, chunk_ids=[]) == []
    assert ids(chunks.get_chunks(scope, filters={"kind": "summary"})) == ["c2"]
    assert set(ids(chunks.get_chunks(scope, filters={"!kind": "summary"}))) == {"c1", "c3", "c4"}
    assert set(ids(chunks.get_chunks(scope, filters={"path": "a.md"}))) == {"c1", "c2"}
    assert set(ids(chunks.get_chunks(scope, filters={"sourceRef": ["doc-2", "doc-3"]}))) == {
        "c3",
        "c4",
    }
    assert set(ids(chunks.get_chunks(scope, filters={"!sourceRef": ["doc-1", "doc-3"]}))) == {"c3"}
    both = chunks.get_chunks(scope, filters={"sourceRef": "doc-1", "kind": "content"})
    assert ids(both) == ["c1"]
    assert ids(chunks.get_chunks(scope, chunk_ids=["c1", "c2"], filters={"kind": "summary"})) == [
        "c2"
    ]


def test_query_scores_are_cosine_similarity(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "same", unit(0)),
            chunk(scope, "orthogonal", unit(1)),
            chunk(scope, "opposite", unit(0, sign=-1.0)),
            chunk(scope, "diagonal", (np.array(unit(0)) + np.array(unit(1))).tolist()),
        ],
    )
    settle()
    hits = chunks.query(scope, [3.0, *[0.0] * (DIM - 1)], 4)  # cosine ignores the length
    assert ids(hits) == ["same", "diagonal", "orthogonal", "opposite"]
    scores = {h.chunk_id: h.score for h in hits}
    assert scores["same"] == pytest.approx(1.0, abs=1e-5)
    assert scores["diagonal"] == pytest.approx(2**-0.5, abs=1e-5)
    assert scores["orthogonal"] == pytest.approx(0.0, abs=1e-5)
    assert scores["opposite"] == pytest.approx(-1.0, abs=1e-5)
    assert hits[0].text == "text of same" and hits[0].rag_id == scope.rag_id


def test_query_returns_the_true_top_k_best_first(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    vecs = random_vectors(40, seed=2)
    kinds = ["content", "summary"]
    all_chunks = [
        chunk(scope, f"c{i}", v, kind=kinds[i % 2], path=f"p{i % 5}.md", source=f"doc-{i % 4}")
        for i, v in enumerate(vecs)
    ]
    chunks.add_chunks(scope, all_chunks)
    settle()
    q = random_vectors(1, seed=3)[0]
    by_id = {c.id: np.asarray(c.embedding) for c in all_chunks}

    hits = chunks.query(scope, q.tolist(), 5)
    expected = exact_top_k(by_id, q, 5)
    assert ids(hits) == [cid for cid, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], abs=1e-5)
    assert len(chunks.query(scope, q.tolist(), 100)) == 40

    cases: list[tuple[dict[str, str | list[str]], set[str]]] = [
        ({"kind": "summary"}, {c.id for c in all_chunks if c.kind == "summary"}),
        ({"!kind": "summary"}, {c.id for c in all_chunks if c.kind != "summary"}),
        ({"path": ["p1.md", "p3.md"]}, {c.id for c in all_chunks if c.path in ("p1.md", "p3.md")}),
        (
            {"sourceRef": "doc-2", "kind": "content"},
            {c.id for c in all_chunks if c.source_ref == "doc-2" and c.kind == "content"},
        ),
    ]
    for filters, matching in cases:
        hits = chunks.query(scope, q.tolist(), 3, filters=filters)
        expected = exact_top_k({cid: by_id[cid] for cid in matching}, q, 3)
        assert ids(hits) == [cid for cid, _ in expected], filters
    assert chunks.query(scope, q.tolist(), 3, filters={"path": "nowhere.md"}) == []


def test_query_with_more_than_any_index_limit_returns_everything(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(scope, [chunk(scope, f"c{i}", v) for i, v in enumerate(random_vectors(3))])
    settle()
    assert len(chunks.query(scope, unit(0), 10_000)) == 3


def test_query_on_an_empty_rag_returns_nothing(chunks: ChunkStore, scope: RagScope) -> None:
    assert chunks.query(scope, unit(0), 5) == []
    assert chunks.count_chunks(scope) == 0
    assert chunks.get_chunks(scope) == []


def test_remove_by_source(chunks: ChunkStore, scope: RagScope, settle: Settle) -> None:
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "a1", unit(0), source="doc-a"),
            chunk(scope, "a2", unit(1), source="doc-a", kind="summary"),
            chunk(scope, "b1", unit(2), source="doc-b"),
        ],
    )
    settle()
    assert chunks.remove_by_source(scope, "doc-a") == 2
    assert ids(chunks.get_chunks(scope)) == ["b1"]
    assert ids(chunks.query(scope, unit(0), 5)) == ["b1"]  # a deletion shows at once
    settle()
    assert ids(chunks.query(scope, unit(0), 5)) == ["b1"]
    assert chunks.remove_by_source(scope, "doc-a") == 0


def test_remove_chunks_by_ids_and_by_filter(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "c1", unit(0), source="doc-1"),
            chunk(scope, "s1", unit(1), source="doc-1", kind="summary"),
            chunk(scope, "c2", unit(2), source="doc-2", path="b.md"),
            chunk(scope, "s2", unit(3), source="doc-2", kind="summary", path="b.md"),
        ],
    )
    assert chunks.remove_chunks(scope, chunk_ids=["c1", "missing"]) == 1
    assert chunks.remove_chunks(scope, chunk_ids=[]) == 0
    assert chunks.remove_chunks(scope, filters={"kind": "summary", "path": "b.md"}) == 1
    assert sorted(ids(chunks.get_chunks(scope))) == ["c2", "s1"]
    assert chunks.remove_chunks(scope, filters={"!kind": "summary"}) == 1
    assert ids(chunks.get_chunks(scope)) == ["s1"]
    settle()
    assert ids(chunks.query(scope, unit(2), 5)) == ["s1"]


def test_drop_rag_removes_only_that_rag(
    control: ControlStore, chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    other = RagScope.of(control.insert_rag(rag_record(TA, P, "kb", rag_id="rag-kb")))
    chunks.add_chunks(scope, [chunk(scope, f"c{i}", unit(i)) for i in range(3)])
    chunks.add_chunks(other, [chunk(other, "k1", unit(0))])
    settle()
    assert chunks.drop_rag(scope) == 3
    assert chunks.count_chunks(scope) == 0 and chunks.query(scope, unit(0), 3) == []
    assert chunks.count_chunks(other) == 1 and ids(chunks.query(other, unit(0), 3)) == ["k1"]
    assert chunks.drop_rag(scope) == 0
    chunks.add_chunks(scope, [chunk(scope, "again", unit(0))])  # a dropped RAG can be refilled
    settle()
    assert ids(chunks.query(scope, unit(0), 3)) == ["again"]


def test_replace_source_replaces_exactly(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "old1", unit(0), source="doc-1"),
            chunk(scope, "old2", unit(1), source="doc-1", kind="summary"),
            chunk(scope, "keep", unit(2), source="doc-2"),
        ],
    )
    chunks.replace_source(
        scope,
        "doc-1",
        [
            chunk(scope, "new1", unit(3), source="doc-1"),
            chunk(scope, "new2", unit(4), source="doc-1"),
            chunk(scope, "new3", unit(5), source="doc-1", kind="summary"),
        ],
    )
    assert sorted(ids(chunks.get_chunks(scope, filters={"sourceRef": "doc-1"}))) == [
        "new1",
        "new2",
        "new3",
    ]
    assert ids(chunks.get_chunks(scope, filters={"sourceRef": "doc-2"})) == ["keep"]
    assert chunks.count_chunks(scope) == 4  # counts and listings show the write at once
    settle()
    assert chunks.query(scope, unit(0), 1)[0].score < 0.5  # the old vector is gone too
    assert ids(chunks.query(scope, unit(3), 1)) == ["new1"]

    # re-indexing with the same chunk ids (deterministic ids) replaces, too
    chunks.replace_source(scope, "doc-1", [chunk(scope, "new1", unit(6), source="doc-1")])
    assert ids(chunks.get_chunks(scope, filters={"sourceRef": "doc-1"})) == ["new1"]
    settle()
    assert ids(chunks.query(scope, unit(6), 1)) == ["new1"]
    chunks.replace_source(scope, "doc-1", [])
    assert ids(chunks.get_chunks(scope)) == ["keep"]


def test_dimension_mismatch(chunks: ChunkStore, scope: RagScope) -> None:
    with pytest.raises(DimensionMismatchError):
        chunks.add_chunks(scope, [chunk(scope, "c1", [1.0] * (DIM + 1))])
    with pytest.raises(DimensionMismatchError):
        chunks.replace_source(scope, "doc-1", [chunk(scope, "c1", [1.0] * (DIM - 1))])
    chunks.add_chunks(scope, [chunk(scope, "ok", unit(0))])
    with pytest.raises(DimensionMismatchError):
        chunks.query(scope, [1.0] * 16, 3)
    # a failed batch writes nothing
    with pytest.raises(DimensionMismatchError):
        chunks.add_chunks(scope, [chunk(scope, "c2", unit(1)), chunk(scope, "c3", [1.0] * 3)])
    assert ids(chunks.get_chunks(scope)) == ["ok"]


def test_bad_vectors_and_arguments_are_invalid_input(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(scope, [chunk(scope, "ok", unit(0))])
    settle()
    with pytest.raises(InvalidInputError):
        chunks.add_chunks(scope, [chunk(scope, "nan", [float("nan")] * DIM)])
    with pytest.raises(InvalidInputError):
        chunks.add_chunks(scope, [chunk(scope, "zero", [0.0] * DIM)])  # no cosine for zero
    with pytest.raises(InvalidInputError):
        chunks.query(scope, [0.0] * DIM, 3)
    with pytest.raises(InvalidInputError):
        chunks.query(scope, unit(0), 0)
    with pytest.raises(InvalidInputError):
        chunks.add_chunks(scope, [chunk(scope, "ok", unit(1))])  # the id is taken
    assert ids(chunks.query(scope, unit(0), 3)) == ["ok"]


@pytest.mark.parametrize("bad", [{"text": "x"}, {"!metadata": "x"}, {"rag_id": "x"}])
def test_bad_filter_key_is_invalid_input(
    chunks: ChunkStore, scope: RagScope, bad: dict[str, str]
) -> None:
    chunks.add_chunks(scope, [chunk(scope, "c1", unit(0))])
    with pytest.raises(InvalidInputError):
        chunks.get_chunks(scope, filters=bad)
    with pytest.raises(InvalidInputError):
        chunks.query(scope, unit(0), 3, filters=bad)
    with pytest.raises(InvalidInputError):
        chunks.remove_chunks(scope, filters=bad)
    assert chunks.count_chunks(scope) == 1


# -- eventual consistency: generations (acceptance criterion) --------------------------------


def test_queries_during_replacements_never_see_zero_chunks(
    chunks: ChunkStore, scope: RagScope, settle: Settle, fake_clock
) -> None:
    """While a source is replaced again and again, every query (at any moment of the search
    lag, with sweeps in between) finds it with exactly one whole generation."""

    def version(v: int) -> list[Chunk]:
        return [
            chunk(scope, f"v{v}-a", unit(v % DIM), source="doc-1"),
            chunk(scope, f"v{v}-b", unit((v + 1) % DIM), source="doc-1", kind="summary"),
        ]

    chunks.add_chunks(scope, [*version(0), chunk(scope, "other", unit(7), source="doc-2")])
    settle()
    for v in range(1, 6):
        chunks.replace_source(scope, "doc-1", version(v))
        for step in range(4):  # before, while and after the new generation becomes visible
            for filters in (None, {"sourceRef": "doc-1"}, {"kind": "content"}):
                hits = chunks.query(scope, unit(0), 10, filters=filters)
                doc1 = [h for h in hits if h.source_ref == "doc-1"]
                assert doc1, f"doc-1 vanished from a query (filters {filters}) at version {v}"
                seen = {h.chunk_id.split("-")[0] for h in doc1}
                assert len(seen) == 1, f"a query mixed generations {seen}"
                assert int(seen.pop()[1:]) in (v - 1, v)
            assert chunks.count_chunks(scope, filters={"sourceRef": "doc-1"}) == 2
            assert {
                h.chunk_id for h in chunks.get_chunks(scope, filters={"sourceRef": "doc-1"})
            } == {f"v{v}-a", f"v{v}-b"}
            fake_clock.advance(0.03)  # the Atlas double's lag is 0.05: both visible at step 2
            if step == 3:
                chunks.sweep()
    settle()
    chunks.sweep()
    settle()
    assert sorted(ids(chunks.query(scope, unit(0), 10))) == ["other", "v5-a", "v5-b"]


def test_the_newest_generation_wins_over_a_better_score(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(scope, [chunk(scope, "same", unit(0))])
    settle()
    chunks.replace_source(scope, "doc-1", [chunk(scope, "same", unit(1))])  # same id, new vector
    settle()  # both generations are visible to search until a sweep
    hits = chunks.query(scope, unit(0), 5)
    assert [(h.chunk_id, round(h.score, 5)) for h in hits] == [("same", 0.0)]
    chunks.sweep()
    settle()
    assert [(h.chunk_id, round(h.score, 5)) for h in chunks.query(scope, unit(0), 5)] == [
        ("same", 0.0)
    ]


def test_source_counts_count_each_sources_chunks_and_those_of_its_path(
    chunks: ChunkStore, scope: RagScope, control: ControlStore
) -> None:
    """What a no-op reindex checks for a batch of documents, in one query: per source, its
    chunks and those carrying the document's path (a chunk of another path under a
    document's id was not written by the indexer)."""
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "c1", unit(0), source="doc-1", path="a.md"),
            chunk(scope, "c2", unit(1), source="doc-1", kind="summary", path="a.md"),
            chunk(scope, "c3", unit(2), source="doc-2", path="b.md"),
            chunk(scope, "c4", unit(3), source="doc-2", path=None),
            chunk(scope, "c5", unit(0), source="doc-3", path="c.md"),
        ],
    )
    other = RagScope.of(control.insert_rag(rag_record(TA, P, "other", rag_id="rag-other")))
    chunks.add_chunks(other, [chunk(other, "o1", unit(0), source="doc-1", path="a.md")])
    paths = {"doc-1": "a.md", "doc-2": "b.md", "doc-3": "moved.md", "doc-9": "z.md"}
    assert chunks.source_counts(scope, paths) == {
        "doc-1": (2, 2),
        "doc-2": (2, 1),
        "doc-3": (1, 0),
        "doc-9": (0, 0),
    }
    assert chunks.source_counts(scope, {}) == {}
    # the newest chunk version of a source only
    chunks.replace_source(scope, "doc-1", [chunk(scope, "c6", unit(2), path="a.md")])
    assert chunks.source_counts(scope, {"doc-1": "a.md"}) == {"doc-1": (1, 1)}


def test_best_scores_are_the_top_hits_scores_of_each_vector(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    """What the calibrator asks: per probe, the score ``query(…, 1)`` gives its best chunk
    (one statement for all probes on PostgreSQL); None for a RAG without chunks."""
    probes = [unit(0), unit(1, sign=-1.0), [0.5] * DIM, unit(3)]
    assert chunks.best_scores(scope, probes) == [None] * 4
    assert chunks.best_scores(scope, []) == []
    chunks.add_chunks(
        scope,
        [
            chunk(scope, "c1", [1.0, 0.2, 0.0, 0.1, 0, 0, 0, 0.3], source="doc-1"),
            chunk(scope, "c2", [0.1, 1.0, 0.3, 0.0, 0.2, 0, 0, 0], source="doc-2"),
            chunk(scope, "c3", [0.0, 0.4, 1.0, 0.2, 0, 0.1, 0, 0], source="doc-3"),
        ],
    )
    settle()
    expected = [chunks.query(scope, probe, 1)[0].score for probe in probes]
    assert chunks.best_scores(scope, probes) == expected
    assert len(set(expected)) == 4  # four different best chunks or scores, not one repeated


def test_counts_and_listings_show_the_newest_generation_at_once(
    chunks: ChunkStore, scope: RagScope
) -> None:
    chunks.add_chunks(
        scope, [chunk(scope, "c", unit(0)), chunk(scope, "s", unit(1), kind="summary")]
    )
    chunks.replace_source(scope, "doc-1", [chunk(scope, "c2", unit(2))])  # the summary went
    assert chunks.count_chunks(scope) == 1
    assert chunks.count_chunks(scope, filters={"kind": "summary"}) == 0
    assert chunks.count_chunks(scope, filters={"sourceRef": "doc-1", "kind": "content"}) == 1
    assert ids(chunks.get_chunks(scope)) == ["c2"]
    assert chunks.get_chunks(scope, filters={"kind": "summary"}) == []
    assert chunks.get_chunks(scope, chunk_ids=["c", "s"]) == []


def test_adding_to_a_source_never_hides_its_chunks(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(scope, [chunk(scope, "m1", unit(0), source="manual")])
    settle()
    chunks.add_chunks(scope, [chunk(scope, "m2", unit(1), source="manual")])
    assert "m1" in ids(chunks.query(scope, unit(0), 5))  # before search sees m2
    assert chunks.count_chunks(scope, filters={"sourceRef": "manual"}) == 2
    settle()
    assert sorted(ids(chunks.query(scope, unit(0), 5))) == ["m1", "m2"]
    chunks.sweep()
    settle()
    assert sorted(ids(chunks.query(scope, unit(0), 5))) == ["m1", "m2"]


@pytest.mark.parametrize("removal", ["empty replacement", "remove_by_source"])
def test_a_removal_fences_a_writer_holding_an_older_claim(
    control: ControlStore,
    chunks: ChunkStore,
    scope: RagScope,
    settle: Settle,
    fake_clock,
    removal: str,
) -> None:
    """Worker A claims and stalls; the document is then disabled (B's claim writes an empty
    replacement) or deleted (``remove_by_source``). A wakes up and writes under its older
    token: nothing comes back, whether search has caught up or not."""
    doc = control.insert_document(new_doc("a.md", dirty=True))
    (a,) = control.claim_for_rag_index(TA, P, "worker-a", 1, TTL)
    assert a.rag_claim_token is not None
    if removal == "empty replacement":
        fake_clock.advance(TTL + 1)
        (b,) = control.claim_for_rag_index(TA, P, "worker-b", 1, TTL)
        chunks.replace_source(scope, doc.id, [], chunk_version=b.rag_claim_token)
    else:
        chunks.remove_by_source(scope, doc.id)
    chunks.replace_source(
        scope, doc.id, [chunk(scope, "a1", unit(0), source=doc.id)], chunk_version=a.rag_claim_token
    )  # A wakes up
    assert chunks.count_chunks(scope) == 0 and chunks.get_chunks(scope) == []
    for _ in range(2):
        settle()
        assert chunks.query(scope, unit(0), 5) == []
        chunks.sweep()
    assert chunks.source_refs(scope) == []


def test_a_late_writer_never_supersedes_a_newer_claim(
    control: ControlStore, chunks: ChunkStore, scope: RagScope, settle: Settle, fake_clock
) -> None:
    """Worker A claims, its lease expires, B claims, writes and marks clean; then A writes and
    marks clean: A's chunks never become the visible generation and A's mark changes nothing."""
    doc = control.insert_document(new_doc("a.md", dirty=True))
    (a,) = control.claim_for_rag_index(TA, P, "worker-a", 1, TTL)
    fake_clock.advance(TTL + 1)
    (b,) = control.claim_for_rag_index(TA, P, "worker-b", 1, TTL)
    assert a.rag_claim_token is not None and b.rag_claim_token is not None
    assert b.rag_claim_token > a.rag_claim_token
    chunks.replace_source(
        scope, doc.id, [chunk(scope, "b1", unit(1), source=doc.id)], chunk_version=b.rag_claim_token
    )
    assert control.mark_rag_clean(CleanMark.of(b, "worker-b", IndexState.INDEXED))
    chunks.replace_source(
        scope, doc.id, [chunk(scope, "a1", unit(0), source=doc.id)], chunk_version=a.rag_claim_token
    )  # A wakes up
    assert not control.mark_rag_clean(CleanMark.of(a, "worker-a", IndexState.FAILED))
    after = doc_of(control, doc)
    assert (after.index_state, after.rag_dirty, after.rag_claimed_by) == (
        IndexState.INDEXED,
        False,
        None,
    )
    assert ids(chunks.get_chunks(scope, filters={"sourceRef": doc.id})) == ["b1"]
    assert chunks.count_chunks(scope) == 1
    for _ in range(2):
        settle()
        assert ids(chunks.query(scope, unit(0), 5)) == ["b1"]
        chunks.sweep()


def test_a_workers_own_expired_claim_finishes_nothing(control: ControlStore, fake_clock) -> None:
    doc = control.insert_document(new_doc("a.md", dirty=True))
    (first,) = control.claim_for_rag_index(TA, P, "worker-a", 1, TTL)
    fake_clock.advance(TTL + 1)
    (second,) = control.claim_for_rag_index(TA, P, "worker-a", 1, TTL)  # the same worker again
    assert not control.mark_rag_clean(CleanMark.of(first, "worker-a", IndexState.INDEXED))
    assert doc_of(control, doc).rag_claimed_by == "worker-a"
    assert control.mark_rag_clean(CleanMark.of(second, "worker-a", IndexState.INDEXED))
    assert doc_of(control, doc).rag_claim_token is None


def test_claim_tokens_increase_across_claims(control: ControlStore) -> None:
    for i in range(3):
        control.insert_document(new_doc(f"d{i}.md", dirty=True))
    tokens = [d.rag_claim_token for d in control.claim_for_rag_index(TA, P, "w1", 1, TTL)]
    tokens += [d.rag_claim_token for d in control.claim_for_rag_index(TA, P, "w2", 2, TTL)]
    assert all(isinstance(t, int) for t in tokens)
    assert tokens[0] < tokens[1] == tokens[2]  # one token per claim batch


def test_a_generation_must_be_a_positive_integer(chunks: ChunkStore, scope: RagScope) -> None:
    for bad in (0, -3, "7"):
        with pytest.raises(InvalidInputError):
            chunks.replace_source(scope, "doc-1", [chunk(scope, "x", unit(0))], chunk_version=bad)  # type: ignore[arg-type]
    assert chunks.count_chunks(scope) == 0


def test_index_management_on_every_store(
    store: Store, control: ControlStore, scope: RagScope, settle: Settle
) -> None:
    statuses = store.initialize(dimensions=[DIM, 16])
    assert statuses and all(s.status and s.collection for s in statuses)
    settle()
    store.chunks.prepare_dimension(16)
    settle()
    assert store.chunks.dimension_ready(DIM) and store.chunks.dimension_ready(16)
    assert all(s.ready for s in store.initialize(wait=True, timeout_s=60))
    assert store.chunks.sweep() == 0


# -- lexical (full-text) search --------------------------------------------------------------


def text_chunk(scope: RagScope, cid: str, text: str, vec: Sequence[float], **kw: str) -> Chunk:
    return Chunk(
        cid,
        scope.rag_id,
        kw.get("source", "doc-1"),
        text,
        list(vec),
        kind=kw.get("kind", "content"),
        path=kw.get("path", "a.md"),
    )


def test_lexical_query_ranks_by_relevance_and_scores_by_cosine(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(
        scope,
        [
            text_chunk(scope, "both", "Cats purr and cats sleep.", unit(0)),
            text_chunk(scope, "one", "The cat sat; dogs purr never.", unit(1), source="doc-2"),
            text_chunk(scope, "none", "Nothing about it here.", unit(2), kind="summary"),
            text_chunk(scope, "code", "def purr_loudly(): return CATS", unit(3), path="x.py"),
        ],
    )
    settle()
    hits = chunks.lexical_query(scope, "cats purr", 10, vector=unit(0))
    assert hits[0].chunk_id == "both" and "none" not in ids(hits)
    assert set(ids(hits)) <= {"both", "one", "code"}
    assert all(h.lexical_score is not None and h.lexical_score > 0 for h in hits)
    assert [h.lexical_score for h in hits] == sorted(
        (h.lexical_score or 0 for h in hits), reverse=True
    )
    scores = {h.chunk_id: h.score for h in hits}
    assert scores["both"] == pytest.approx(1.0, abs=1e-5)  # the cosine, not the relevance
    assert scores["one"] == pytest.approx(0.0, abs=1e-5)
    assert ids(chunks.lexical_query(scope, "cats purr", 1, vector=unit(0))) == ["both"]
    assert ids(
        chunks.lexical_query(scope, "purr", 10, vector=unit(0), filters={"sourceRef": "doc-2"})
    ) == ["one"]
    assert "code" not in ids(
        chunks.lexical_query(scope, "purr", 10, vector=unit(0), filters={"!path": "x.py"})
    )
    assert chunks.lexical_query(scope, "zebra", 10, vector=unit(0)) == []
    assert chunks.lexical_query(scope, "  ?! ", 10, vector=unit(0)) == []
    with pytest.raises(DimensionMismatchError):
        chunks.lexical_query(scope, "cats", 3, vector=[1.0, 0.0])
    with pytest.raises(InvalidInputError):
        chunks.lexical_query(scope, "cats", 3, vector=unit(0), filters={"text": "x"})


def test_lexical_hits_are_tenant_scoped(
    control: ControlStore, chunks: ChunkStore, settle: Settle
) -> None:
    """A term that exists only in another tenant finds nothing, even under a forged scope."""
    a = RagScope.of(control.insert_rag(rag_record(TA, P, "_documents", rag_id="rag-a")))
    b = RagScope.of(control.insert_rag(rag_record(TB, P, "_documents", rag_id="rag-b")))
    chunks.add_chunks(a, [text_chunk(a, "a1", "quarterly revenue forecast", unit(0))])
    chunks.add_chunks(
        b,
        [
            text_chunk(b, "b1", "zanzibar merger secret", unit(0)),
            text_chunk(b, "b2", "quarterly zanzibar plan", unit(1)),
        ],
    )
    settle()
    assert chunks.lexical_query(a, "zanzibar merger", 10, vector=unit(0)) == []
    assert ids(chunks.lexical_query(a, "quarterly", 10, vector=unit(0))) == ["a1"]
    assert sorted(ids(chunks.lexical_query(b, "zanzibar", 10, vector=unit(0)))) == ["b1", "b2"]
    for forged in forged_scopes(a, b):
        assert chunks.lexical_query(forged, "zanzibar quarterly", 10, vector=unit(0)) == []


def test_lexical_query_sees_one_generation_of_a_replaced_source(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    chunks.add_chunks(scope, [text_chunk(scope, "v1", "alpha release notes", unit(0))])
    settle()
    chunks.replace_source(scope, "doc-1", [text_chunk(scope, "v2", "beta release notes", unit(1))])
    before = ids(chunks.lexical_query(scope, "release notes", 5, vector=unit(0)))
    assert before in (["v1"], ["v2"])  # the old generation until search sees the new one
    settle()
    assert ids(chunks.lexical_query(scope, "release notes", 5, vector=unit(0))) == ["v2"]
    # a word only the old generation holds finds it until the sweep (the search returned no
    # newer row of that source to prefer); the indexer sweeps every tick
    chunks.sweep()
    settle()
    assert chunks.lexical_query(scope, "alpha", 5, vector=unit(0)) == []


# -- tenant isolation (acceptance criterion) -------------------------------------------------


@pytest.fixture
def two_tenants(
    control: ControlStore, chunks: ChunkStore, settle: Settle
) -> tuple[RagScope, RagScope]:
    """Tenants A and B, same project id, each with its `_documents` RAG and chunks of the same
    source and path; B's vectors are exactly A's, so any leak would rank first."""
    a = RagScope.of(control.insert_rag(rag_record(TA, P, "_documents", rag_id="rag-a")))
    b = RagScope.of(control.insert_rag(rag_record(TB, P, "_documents", rag_id="rag-b")))
    vecs = random_vectors(6, seed=4)
    for s, prefix in [(a, "a"), (b, "b")]:
        chunks.add_chunks(
            s,
            [
                chunk(
                    s,
                    f"{prefix}{i}",
                    v,
                    source="doc-1",
                    path="shared.md",
                    kind="summary" if i == 5 else "content",
                )
                for i, v in enumerate(vecs)
            ],
        )
    settle()
    return a, b


def forged_scopes(a: RagScope, b: RagScope) -> list[RagScope]:
    return [
        RagScope(a.tenant_id, a.project_id, b.rag_id, DIM),  # A's tenant, B's RAG id
        RagScope(b.tenant_id, b.project_id, a.rag_id, DIM),  # B's tenant, A's RAG id
        RagScope(a.tenant_id, "other-project", a.rag_id, DIM),  # right tenant, wrong project
    ]


def test_forged_scopes_read_nothing(
    chunks: ChunkStore, two_tenants: tuple[RagScope, RagScope]
) -> None:
    a, b = two_tenants
    for forged in forged_scopes(a, b):
        assert chunks.count_chunks(forged) == 0
        assert chunks.get_chunks(forged) == []
        assert chunks.get_chunks(forged, chunk_ids=["a0", "b0"]) == []
        assert chunks.get_chunks(forged, filters={"sourceRef": "doc-1"}) == []
        vec = random_vectors(6, seed=4)[0].tolist()
        assert chunks.query(forged, vec, 10) == []
        assert chunks.query(forged, vec, 10, filters={"path": "shared.md"}) == []


def test_forged_scopes_delete_nothing(
    chunks: ChunkStore, two_tenants: tuple[RagScope, RagScope]
) -> None:
    a, b = two_tenants
    for forged in forged_scopes(a, b):
        assert chunks.remove_by_source(forged, "doc-1") == 0
        assert chunks.remove_chunks(forged, chunk_ids=["a0", "a1", "b0", "b1"]) == 0
        assert chunks.remove_chunks(forged, filters={"kind": "content"}) == 0
        assert chunks.remove_chunks(forged, filters={"!kind": "nothing"}) == 0
        chunks.replace_source(forged, "doc-1", [])
        assert chunks.drop_rag(forged) == 0
    assert chunks.count_chunks(a) == 6 and chunks.count_chunks(b) == 6
    assert all(h.chunk_id.startswith("a") for h in chunks.get_chunks(a))
    assert all(h.chunk_id.startswith("b") for h in chunks.get_chunks(b))


def test_each_tenant_queries_only_its_own_chunks(
    chunks: ChunkStore, two_tenants: tuple[RagScope, RagScope]
) -> None:
    a, b = two_tenants
    vec = random_vectors(6, seed=4)[0].tolist()
    for s, prefix in [(a, "a"), (b, "b")]:
        hits = chunks.query(s, vec, 10)
        assert len(hits) == 6 and all(h.chunk_id.startswith(prefix) for h in hits)
        assert hits[0].chunk_id == f"{prefix}0" and hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert all(h.rag_id == s.rag_id for h in hits)
        filtered = chunks.query(s, vec, 10, filters={"kind": "summary"})
        assert ids(filtered) == [f"{prefix}5"]
    # removing in A leaves B whole
    assert chunks.remove_by_source(a, "doc-1") == 6
    assert chunks.count_chunks(a) == 0 and chunks.count_chunks(b) == 6
    assert ids(chunks.query(b, vec, 1)) == ["b0"]


def test_writes_under_a_forged_scope_stay_out_of_the_real_rag(
    chunks: ChunkStore, two_tenants: tuple[RagScope, RagScope], settle: Settle
) -> None:
    """Chunks written by tenant A under B's RAG id never show up in B, and B's top-k stays whole."""
    a, b = two_tenants
    forged = RagScope(a.tenant_id, a.project_id, b.rag_id, DIM)
    vecs = random_vectors(6, seed=4)
    intruders = [
        chunk(forged, f"x{i}", vecs[0], source="doc-1", path="shared.md") for i in range(8)
    ]
    chunks.add_chunks(forged, intruders)
    settle()

    hits = chunks.query(b, vecs[0].tolist(), 3)
    expected = exact_top_k({f"b{i}": v for i, v in enumerate(vecs)}, vecs[0], 3)
    assert ids(hits) == [cid for cid, _ in expected]
    assert chunks.count_chunks(b) == 6
    assert not any(h.chunk_id.startswith("x") for h in chunks.get_chunks(b))
    assert chunks.remove_by_source(b, "doc-1") == 6
    assert chunks.count_chunks(forged) == 8
