"""MongoDB adapter behaviour that the port-level contract cannot see, on mongomock (a server
without Atlas Search: exact ranking, no search lag).

Opening and schema versions, the migration from the single ``chunks`` collection, the chunk
swap with a crash or a concurrent writer in the middle, all-or-nothing batches, binary
vectors, and which failures switch a process to exact ranking (only "no search here").
The Atlas query path runs on the lagging double: ``test_mongo_atlas.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bson.binary import Binary
from pymongo.errors import OperationFailure

from vancetope_rag.domain.records import Chunk, RagRecord
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store import open_store
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.mongo.search import SearchSupport
from vancetope_rag.store.mongo.setup import SCHEMA_VERSION
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope

mongomock = pytest.importorskip("mongomock")

DIM = 8


@pytest.fixture
def mstore(fake_clock: Any) -> Iterator[MongoStore]:
    store = open_mongo_store(
        "mongodb://localhost/t", clock=fake_clock, client=mongomock.MongoClient()
    )
    yield store
    store.close()


@pytest.fixture
def chunks(mstore: MongoStore) -> MongoChunkStore:
    assert isinstance(mstore.chunks, MongoChunkStore)
    return mstore.chunks


def scope_of(tenant: str = "ta", rag: str = "rag-a") -> RagScope:
    return RagScope(tenant, "p", rag, DIM)


SCOPE = scope_of()


def unit(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    return v


def chunk(
    cid: str,
    vec: list[float],
    *,
    source: str = "doc-1",
    scope: RagScope = SCOPE,
    kind: str = "content",
    path: str | None = "a.md",
) -> Chunk:
    return Chunk(cid, scope.rag_id, source, f"text of {cid}", vec, kind=kind, path=path)


def ids(hits: Any) -> list[str]:
    return sorted(h.chunk_id for h in hits)


class Hooked:
    """A collection proxy running ``hook()`` before chosen methods."""

    def __init__(self, inner: Any, hooks: dict[str, Callable[[], None]]) -> None:
        self._inner = inner
        self._hooks = hooks

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        hook = self._hooks.get(name)
        if hook is None:
            return method

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            hook()
            return method(*args, **kwargs)

        return wrapped


def hook_collection(chunks: MongoChunkStore, hooks: dict[str, Callable[[], None]]) -> Any:
    """Route the chunk store's collection of ``DIM`` through :class:`Hooked`."""
    inner = chunks.search.collection(DIM)
    original = chunks.search.collection

    def collection(dim: int) -> Any:
        return Hooked(inner, hooks) if dim == DIM else original(dim)

    chunks.search.collection = collection  # type: ignore[method-assign]
    return inner


# -- opening ---------------------------------------------------------------------------------


def test_mongomock_defaults(mstore: MongoStore, fake_clock: Any) -> None:
    control: Any = mstore.control
    assert control.server_clock is False  # mongomock has no $$NOW
    assert mstore.chunks.vector_search == "exact"  # type: ignore[attr-defined]
    assert mstore.owns_client is False  # an injected client is the caller's to close
    assert control.now().timestamp() == fake_clock.now
    names = set(mstore.database.list_collection_names())
    assert {"projects", "documents", "rags", "settings", "embedding_cache", "schema"} <= names
    assert "chunks" not in names  # chunks live in chunks_<dim>, made on demand
    documents = mstore.database["documents"].index_information()
    assert {"tenant_project_rag_claim_idx", "tenant_project_dirty_claim_order_idx"} <= set(
        documents
    )
    assert mstore.database["schema"].find_one()["version"] == SCHEMA_VERSION


def test_a_newer_schema_is_refused(fake_clock: Any) -> None:
    client = mongomock.MongoClient()
    client["t"]["schema"].insert_one({"_id": "vancetope_rag", "version": 99})
    with pytest.raises(StoreError, match="schema version 99"):
        open_mongo_store("mongodb://localhost/t", clock=fake_clock, client=client)


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError) as info:
        open_store("mongodb://app:s3cret@127.0.0.1:1/db?serverSelectionTimeoutMS=300")
    assert "s3cret" not in str(info.value) and "app:***@" in str(info.value)
    assert "could not be reached" in str(info.value)


def test_text_that_looks_like_an_operator_is_stored_as_text(mstore: MongoStore) -> None:
    control = mstore.control
    doc = control.insert_document(NewDocument("t", "p", "$HOME/a.md", "text/plain", "$$NOW"))
    assert (doc.path, doc.content) == ("$HOME/a.md", "$$NOW")
    updated = control.update_document(
        "t", "p", doc.id, DocumentChange(summary="$path", mark_dirty=True)
    )
    assert updated.summary == "$path" and updated.path == "$HOME/a.md"
    assert [d.path for d in control.list_documents("t", "p", path_prefix="$HOME/")] == [
        "$HOME/a.md"
    ]


def test_a_document_over_16_mib_is_refused_before_the_driver(mstore: MongoStore) -> None:
    control = mstore.control
    big = "x" * (16 * 2**20 + 10)
    with pytest.raises(InvalidInputError, match="16 MiB"):
        control.insert_document(NewDocument("t", "p", "big.md", "text/plain", big))
    doc = control.insert_document(NewDocument("t", "p", "small.md", "text/plain", "ok"))
    with pytest.raises(InvalidInputError, match="16 MiB"):
        control.update_document("t", "p", doc.id, DocumentChange(content=big))
    assert control.get_document("t", "p", doc.id).content == "ok"  # type: ignore[union-attr]


def test_embedding_cache_first_writer_wins(mstore: MongoStore) -> None:
    mstore.control.put_cached_embeddings("m", {"h": [1.0, 2.0]})
    mstore.control.put_cached_embeddings("m", {"h": [9.0, 9.0], "h2": [3.0]})
    got = mstore.control.get_cached_embeddings("m", ["h", "h2"])
    assert got == {"h": [1.0, 2.0], "h2": [3.0]}


def test_rag_ids_are_unique(mstore: MongoStore) -> None:
    rag = RagRecord("r1", "t", "p", "kb", "test", "m", DIM, 200, 20)
    mstore.control.insert_rag(rag)
    with pytest.raises(Exception) as info:
        mstore.control.insert_rag(RagRecord("r1", "t", "p", "other", "test", "m", DIM, 200, 20))
    assert type(info.value).__name__ == "RagAlreadyExistsError"
    mstore.control.insert_rag(RagRecord("r2", "t2", "p", "kb", "test", "m", 16, 200, 20))
    assert mstore.control.rag_dimensions() == {DIM, 16}


# -- vectors, collections --------------------------------------------------------------------


def test_vectors_are_stored_as_binary_float32(chunks: MongoChunkStore, mstore: MongoStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("c1", [0.5, *unit(1)[1:]])])
    stored = mstore.database["chunks_8"].find_one({"chunkId": "c1"})
    assert isinstance(stored["embedding"], Binary) and stored["embedding"].subtype == 9
    assert stored["embedding"].as_vector().data == pytest.approx([0.5, 1, 0, 0, 0, 0, 0, 0])
    other = RagScope("ta", "p", "rag-b", 16)
    chunks.add_chunks(other, [Chunk("c1", "rag-b", "d", "t", [1.0] * 16)])
    assert mstore.database["chunks_16"].count_documents({}) == 1  # a collection per dimension


def test_top_k_is_capped_at_atlas_limit(
    chunks: MongoChunkStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Atlas returns at most 10,000 results; the exact path answers the same (the limit is
    lowered here so the test needs 60 chunks, not 10,050)."""
    chunks.add_chunks(SCOPE, [chunk(f"c{i}", unit(i)) for i in range(3)])
    assert len(chunks.query(SCOPE, unit(0), 10_001)) == 3
    monkeypatch.setattr(mq, "MAX_NUM_CANDIDATES", 50)
    many = RagScope("ta", "p", "rag-many", 2)
    chunks.add_chunks(
        many, [Chunk(f"m{i}", "rag-many", "d", "t", [1.0, i / 100]) for i in range(60)]
    )
    assert len(chunks.query(many, [1.0, 0.0], 200)) == 50


# -- chunk swap without search lag -----------------------------------------------------------


def test_without_atlas_the_old_generation_goes_at_once(
    chunks: MongoChunkStore, mstore: MongoStore
) -> None:
    chunks.add_chunks(SCOPE, [chunk("old1", unit(0)), chunk("same", unit(1))])
    seen: list[list[str]] = []

    def look() -> None:
        seen.append(ids(chunks.query(SCOPE, unit(0), 10)))

    hook_collection(chunks, {"delete_many": look})
    chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(2)), chunk("same", unit(3))])
    # before the old generation's delete, queries already see only the new one
    assert seen == [["new1", "same"]]
    assert mstore.database["chunks_8"].count_documents({}) == 2
    assert mstore.database["chunk_swaps"].count_documents({}) == 0


def test_a_crash_in_the_middle_of_a_swap_leaves_chunks_and_heals(
    chunks: MongoChunkStore, mstore: MongoStore
) -> None:
    chunks.add_chunks(SCOPE, [chunk("old1", unit(0))])

    def crash() -> None:
        raise RuntimeError("process killed")

    hook_collection(chunks, {"delete_many": crash})  # after the insert, before the old goes
    with pytest.raises(RuntimeError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(1))])
    chunks.search = SearchSupport(mstore.database, mstore.database, mode="exact")
    assert ids(chunks.query(SCOPE, unit(1), 5)) == ["new1"]  # the newest generation answers
    assert ids(chunks.get_chunks(SCOPE)) == ["new1"] and chunks.count_chunks(SCOPE) == 1
    assert chunks.sweep() == 1  # the note written before the insert lets the sweeper finish
    assert mstore.database["chunks_8"].count_documents({}) == 1
    chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(2)), chunk("new2", unit(3))])
    assert ids(chunks.get_chunks(SCOPE)) == ["new1", "new2"]


def test_a_late_writer_that_loses_the_race_leaves_nothing(
    chunks: MongoChunkStore, mstore: MongoStore
) -> None:
    """Writer A (older generation) is between its insert and its check when writer B, newer,
    replaces the source: A's chunks are removed, B's stay."""
    chunks.add_chunks(SCOPE, [chunk("old", unit(0))])
    a_gen = chunks.next_chunk_version()
    b_gen = chunks.next_chunk_version()
    ran: list[bool] = []
    inner = mstore.database["chunks_8"]

    def writer_b() -> None:
        if not ran:
            ran.append(True)
            chunks.search = SearchSupport(mstore.database, mstore.database, mode="exact")
            chunks.replace_source(SCOPE, "doc-1", [chunk("b1", unit(2))], chunk_version=b_gen)

    hook_collection(chunks, {"aggregate": lambda: None, "insert_many": writer_b})
    chunks.replace_source(SCOPE, "doc-1", [chunk("a1", unit(1))], chunk_version=a_gen)
    assert ran and ids(chunks.get_chunks(SCOPE)) == ["b1"]
    assert sorted(d["chunkId"] for d in inner.find({})) == ["b1"]


def test_a_removal_racing_an_indexing_leaves_no_orphans(
    chunks: MongoChunkStore, mstore: MongoStore
) -> None:
    """The document is deleted (``remove_by_source``) after the indexer's write passed its
    mark check but before its insert: the writer sees the removal's mark and takes its
    chunks back, instead of leaving orphans until garbage collection."""
    token = chunks.next_chunk_version()
    ran: list[int] = []

    def delete_document() -> None:
        if not ran:
            ran.append(chunks.remove_by_source(SCOPE, "doc-1"))

    hook_collection(chunks, {"insert_many": delete_document})
    chunks.replace_source(SCOPE, "doc-1", [chunk("a1", unit(1))], chunk_version=token)
    assert ran == [0]
    assert mstore.database["chunks_8"].count_documents({}) == 0
    assert mstore.database["chunk_swaps"].count_documents({}) == 0


def test_an_add_racing_a_removal_leaves_no_orphans(
    chunks: MongoChunkStore, mstore: MongoStore
) -> None:
    chunks.add_chunks(SCOPE, [chunk("m1", unit(0))])
    ran: list[int] = []

    def remove_source() -> None:
        if not ran:
            ran.append(chunks.remove_by_source(SCOPE, "doc-1"))

    hook_collection(chunks, {"insert_many": remove_source})
    chunks.add_chunks(SCOPE, [chunk("m2", unit(1))])
    assert ran == [1]
    assert mstore.database["chunks_8"].count_documents({}) == 0
    chunks.add_chunks(SCOPE, [chunk("m3", unit(2))])  # a later add starts the source again
    assert ids(chunks.get_chunks(SCOPE)) == ["m3"]


def test_source_marks_last_twice_the_claim_ttl(fake_clock: Any) -> None:
    store = open_mongo_store(
        "mongodb://localhost/t", clock=fake_clock, client=mongomock.MongoClient(), claim_ttl_s=60
    )
    chunks = store.chunks
    marks = store.database["source_marks"]
    stale = chunks.next_chunk_version()  # a claim token drawn before the removal
    chunks.remove_by_source(SCOPE, "doc-1")
    assert marks.count_documents({}) == 1
    fake_clock.advance(119)
    chunks.sweep()
    chunks.replace_source(SCOPE, "doc-1", [chunk("a1", unit(1))], chunk_version=stale)
    assert chunks.count_chunks(SCOPE) == 0  # still fenced (and the attempt raised its age)
    fake_clock.advance(119)
    chunks.sweep()
    assert marks.count_documents({}) == 1
    fake_clock.advance(2)
    chunks.sweep()
    assert marks.count_documents({}) == 0
    assert {i["name"] for i in marks.list_indexes()} >= {"mark_source_uniq", "mark_age_idx"}


def test_replace_source_refuses_an_id_of_another_source(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("k", unit(0), source="doc-2"), chunk("x", unit(1))])
    with pytest.raises(InvalidInputError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("k", unit(2))])
    assert ids(chunks.get_chunks(SCOPE)) == ["k", "x"]
    with pytest.raises(InvalidInputError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("d", unit(2)), chunk("d", unit(3))])
    assert ids(chunks.get_chunks(SCOPE)) == ["k", "x"]
    # an id only an old (superseded) generation holds is free again
    chunks.replace_source(SCOPE, "doc-2", [chunk("k2", unit(4), source="doc-2")])
    chunks.replace_source(SCOPE, "doc-1", [chunk("k", unit(5))])
    assert ids(chunks.get_chunks(SCOPE)) == ["k", "k2"]


def test_a_failed_batch_writes_nothing(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("taken", unit(0))])
    with pytest.raises(InvalidInputError):
        chunks.add_chunks(
            SCOPE, [chunk("n1", unit(1)), chunk("taken", unit(2)), chunk("n2", unit(3))]
        )
    assert ids(chunks.get_chunks(SCOPE)) == ["taken"]
    # the same id is fine in another RAG or tenant (unique per RAG)
    chunks.add_chunks(scope_of("tb"), [chunk("taken", unit(0), scope=scope_of("tb"))])


# -- which failures mean "no Atlas Search here" ----------------------------------------------


class Answering:
    """A database whose ``list_search_indexes`` raises ``error`` (and counts the calls)."""

    def __init__(self, inner: Any, error: Exception | None) -> None:
        self._inner = inner
        self.error = error
        self.calls = 0

    def __getitem__(self, name: str) -> Any:
        outer = self

        class Collection:
            def list_search_indexes(self, *args: Any) -> list[Any]:
                outer.calls += 1
                if outer.error is not None:
                    raise outer.error
                return []

        return Collection()


def test_auto_mode_falls_back_only_when_search_is_truly_absent(mstore: MongoStore) -> None:
    not_enabled = OperationFailure(
        "requires additional configuration", code=31082, details={"codeName": "SearchNotEnabled"}
    )
    db = Answering(mstore.database, not_enabled)
    support = SearchSupport(db, db, mode="auto")
    assert support.uses_atlas() is False and support.mode == "exact"
    assert support.uses_atlas() is False and db.calls == 1  # decided once per process

    for transient in (
        OperationFailure("not authorized on t", code=13),
        OperationFailure("operation exceeded time limit", code=50),
    ):
        db = Answering(mstore.database, transient)
        support = SearchSupport(db, db, mode="auto")
        with pytest.raises(StoreError):
            support.uses_atlas()
        assert support.mode == "auto"  # not decided: asked again next time
        db.error = None
        assert support.uses_atlas() is True

    with pytest.raises(StoreError):
        MongoChunkStore(mstore.database, vector_search="faiss")  # type: ignore[arg-type]


# -- schema 1 → 2 ----------------------------------------------------------------------------


def legacy_chunk(
    cid: str,
    vec: list[float],
    *,
    seq: int,
    live: bool = True,
    source: str = "doc-1",
    rag: str = "rag-a",
) -> dict[str, Any]:
    return {
        "tenantId": "ta",
        "projectId": "p",
        "ragId": rag,
        "chunkId": cid,
        "sourceRef": source,
        "kind": "content",
        "path": "a.md",
        "text": f"text of {cid}",
        "metadata": {},
        "dim": len(vec),
        f"embedding_{len(vec)}": vec,
        "seq": seq,
        "ord": 0,
        "live": live,
    }


def test_a_schema_1_store_is_migrated_by_init_and_nothing_is_stranded(fake_clock: Any) -> None:
    client = mongomock.MongoClient()
    db = client["t"]
    db["schema"].insert_one({"_id": "vancetope_rag", "version": 1})
    db["chunks"].insert_many(
        [
            legacy_chunk("a", unit(0), seq=3),
            legacy_chunk("b", unit(1), seq=3),
            legacy_chunk("a", unit(2), seq=5, live=False),  # a swap interrupted half-way
            legacy_chunk("w", [1.0] * 16, seq=4, source="doc-9", rag="rag-w"),
        ]
    )
    store = open_mongo_store("mongodb://localhost/t", clock=fake_clock, client=client)
    with pytest.raises(StoreError, match="run `vancetope-rag --store <uri> init`"):
        store.chunks.query(SCOPE, unit(0), 3)
    assert db["chunks"].count_documents({}) == 4  # nothing touched until init

    statuses = store.initialize()
    assert {s.collection for s in statuses} == {"chunks_8", "chunks_16"}
    assert "chunks" not in db.list_collection_names()
    assert db["schema"].find_one()["version"] == SCHEMA_VERSION
    # the interrupted swap resolves to its newer side, as the old reader showed it
    assert ids(store.chunks.get_chunks(SCOPE)) == ["a"]
    assert store.chunks.query(SCOPE, unit(2), 1)[0].score == pytest.approx(1.0)
    assert ids(store.chunks.get_chunks(RagScope("ta", "p", "rag-w", 16))) == ["w"]
    assert store.chunks.next_chunk_version() > 5  # past every old write sequence
    assert isinstance(db["chunks_8"].find_one()["embedding"], Binary)
    assert store.initialize()  # running it again is harmless
    assert db["chunks_8"].count_documents({}) == 3


def test_a_missing_collection_is_not_a_missing_search(mstore: MongoStore) -> None:
    """Listing search indexes of a collection not created yet answers NamespaceNotFound on
    some servers: Atlas Search is there, the index is simply missing."""
    missing = OperationFailure("ns does not exist", code=26)
    db = Answering(mstore.database, missing)
    assert SearchSupport(db, db, mode="auto").uses_atlas() is True
