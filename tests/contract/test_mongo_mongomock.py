"""MongoDB adapter behaviour that the port-level contract cannot see, on mongomock.

The chunk swap (never zero chunks, even with a crash or a concurrent writer in the middle),
all-or-nothing batches, and the Atlas query path against a simulated ``$vectorSearch`` that
answers like Atlas (pre-filter, ``(1 + cos) / 2`` scores).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from pymongo.errors import OperationFailure

from vancetope_rag.domain.records import Chunk, RagRecord
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store import open_store
from vancetope_rag.store.mongo import MongoStore, open_mongo_store
from vancetope_rag.store.mongo_chunks import MongoChunkStore
from vancetope_rag.store.mongo_indexes import vector_index_definition
from vancetope_rag.store.mongo_queries import MAX_NUM_CANDIDATES
from vancetope_rag.store.types import NewDocument, RagScope

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


def chunk(cid: str, vec: list[float], *, source: str = "doc-1", scope: RagScope = SCOPE,
          kind: str = "content", path: str | None = "a.md") -> Chunk:  # fmt: skip
    return Chunk(cid, scope.rag_id, source, f"text of {cid}", vec, kind=kind, path=path)


def ids(hits: Any) -> list[str]:
    return sorted(h.chunk_id for h in hits)


class Hooked:
    """A collection proxy running ``hook(name)`` before chosen methods."""

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


# -- opening ---------------------------------------------------------------------------------


def test_mongomock_defaults(mstore: MongoStore, fake_clock: Any) -> None:
    control: Any = mstore.control
    assert control.server_clock is False  # mongomock has no $$NOW
    assert mstore.chunks.vector_search == "exact"  # type: ignore[attr-defined]
    assert mstore.owns_client is False  # an injected client is the caller's to close
    assert control.now().timestamp() == fake_clock.now
    names = set(mstore.database.list_collection_names())
    assert {"projects", "documents", "rags", "settings", "embedding_cache", "chunks",
            "schema"} <= names  # fmt: skip
    assert "tenant_project_rag_claim_idx" in mstore.database["documents"].index_information()


def test_a_newer_schema_is_refused(fake_clock: Any) -> None:
    client = mongomock.MongoClient()
    client["t"]["schema"].insert_one({"_id": "vancetope_rag", "version": 99})
    with pytest.raises(StoreError, match="schema version 99"):
        open_mongo_store("mongodb://localhost/t", clock=fake_clock, client=client)


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError) as info:
        open_store("mongodb://app:s3cret@127.0.0.1:1/db?serverSelectionTimeoutMS=300")
    assert "s3cret" not in str(info.value) and "app:***@" in str(info.value)


def test_text_that_looks_like_an_operator_is_stored_as_text(mstore: MongoStore) -> None:
    control = mstore.control
    doc = control.insert_document(NewDocument("t", "p", "$HOME/a.md", "text/plain", "$$NOW"))
    assert (doc.path, doc.content) == ("$HOME/a.md", "$$NOW")
    updated = control.update_document("t", "p", doc.id, summary="$path", mark_dirty=True)
    assert updated.summary == "$path" and updated.path == "$HOME/a.md"
    assert [d.path for d in control.list_documents("t", "p", path_prefix="$HOME/")] == [
        "$HOME/a.md"
    ]


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


# -- chunk swap ------------------------------------------------------------------------------


def test_replace_source_never_shows_zero_chunks(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("old1", unit(0)), chunk("same", unit(1))])
    seen: list[list[str]] = []

    def look() -> None:
        seen.append(ids(chunks.query(SCOPE, unit(0), 10)))
        seen.append(ids(chunks.get_chunks(SCOPE, filters={"sourceRef": "doc-1"})))

    chunks.collection = Hooked(chunks.collection, {"delete_many": look, "update_many": look})
    chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(2)), chunk("same", unit(3))])
    # before the delete: old and new (same id shown once); before the flip: only the new
    assert seen == [["new1", "old1", "same"]] * 2 + [["new1", "same"]] * 2
    assert ids(chunks.get_chunks(SCOPE)) == ["new1", "same"]
    assert chunks.query(SCOPE, unit(3), 1)[0].chunk_id == "same"  # the new vector


def test_a_crash_in_the_middle_of_a_swap_leaves_chunks_and_heals(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("old1", unit(0))])
    inner = chunks.collection

    def crash() -> None:
        raise RuntimeError("process killed")

    chunks.collection = Hooked(inner, {"update_many": crash})
    with pytest.raises(RuntimeError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(1))])
    chunks.collection = inner
    assert ids(chunks.query(SCOPE, unit(1), 5)) == ["new1"]  # staged chunks are visible
    chunks.replace_source(SCOPE, "doc-1", [chunk("new1", unit(2)), chunk("new2", unit(3))])
    assert ids(chunks.get_chunks(SCOPE)) == ["new1", "new2"]
    assert chunks.count_chunks(SCOPE) == 2
    assert inner.count_documents({"live": False}) == 0


@pytest.mark.parametrize("moment", ["delete_many", "update_many"])
def test_two_writers_replacing_one_source_end_with_the_later_one(
    chunks: MongoChunkStore, moment: str
) -> None:
    """Writer B replaces the source while writer A is between its steps (a lease expired)."""
    chunks.add_chunks(SCOPE, [chunk("old", unit(0))])
    inner = chunks.collection
    ran = []

    def writer_b() -> None:
        if not ran:
            ran.append(True)
            chunks.collection = inner
            chunks.replace_source(SCOPE, "doc-1", [chunk("b1", unit(2)), chunk("b2", unit(3))])
            chunks.collection = hooked

    hooked = Hooked(inner, {moment: writer_b})
    chunks.collection = hooked
    chunks.replace_source(SCOPE, "doc-1", [chunk("a1", unit(1))])
    chunks.collection = inner
    assert ran and ids(chunks.get_chunks(SCOPE)) == ["b1", "b2"]


def test_replace_source_refuses_an_id_of_another_source(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("k", unit(0), source="doc-2"), chunk("x", unit(1))])
    with pytest.raises(InvalidInputError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("k", unit(2))])
    assert ids(chunks.get_chunks(SCOPE)) == ["k", "x"]
    with pytest.raises(InvalidInputError):
        chunks.replace_source(SCOPE, "doc-1", [chunk("d", unit(2)), chunk("d", unit(3))])
    assert ids(chunks.get_chunks(SCOPE)) == ["k", "x"]


def test_a_failed_batch_writes_nothing(chunks: MongoChunkStore) -> None:
    chunks.add_chunks(SCOPE, [chunk("taken", unit(0))])
    with pytest.raises(InvalidInputError):
        chunks.add_chunks(SCOPE, [chunk("n1", unit(1)), chunk("taken", unit(2)),
                                  chunk("n2", unit(3))])  # fmt: skip
    assert ids(chunks.get_chunks(SCOPE)) == ["taken"]
    # the same id is fine in another RAG or tenant (unique per RAG)
    chunks.add_chunks(scope_of("tb"), [chunk("taken", unit(0), scope=scope_of("tb"))])


# -- the Atlas query path, against a simulated $vectorSearch ---------------------------------


class SimulatedAtlas:
    """A mongomock collection that answers ``$vectorSearch`` the way Atlas does: the stage's
    ``filter`` is applied as a pre-filter, scores are ``(1 + cos) / 2``."""

    name = "chunks"

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.searches: list[dict[str, Any]] = []
        self.indexes: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list_search_indexes(self, name: str | None = None) -> list[dict[str, Any]]:
        return [
            {"name": n, "status": "READY", "queryable": True, "latestDefinition": d}
            for n, d in self.indexes.items()
            if name in (None, n)
        ]

    def create_search_index(self, model: Any) -> str:
        self.indexes[model.document["name"]] = model.document["definition"]
        return str(model.document["name"])

    def aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stage = pipeline[0].get("$vectorSearch")
        if stage is None:
            return list(self._inner.aggregate(pipeline))
        self.searches.append(stage)
        definition = self.indexes[stage["index"]]
        assert definition["fields"][0]["path"] == stage["path"]
        assert stage["limit"] <= stage["numCandidates"] <= MAX_NUM_CANDIDATES
        query = np.asarray(stage["queryVector"])
        scored = []
        for row in self._inner.find(stage["filter"]):
            if stage["path"] not in row:
                continue
            v = np.asarray(row[stage["path"]])
            cos = float(v @ query / (np.linalg.norm(v) * np.linalg.norm(query)))
            scored.append(((1 + cos) / 2, row))
        scored.sort(key=lambda t: -t[0])
        projected = [k for k, v in pipeline[1]["$project"].items() if v == 1]
        return [
            {"_id": row["_id"], **{k: row.get(k) for k in projected}, "score": score}
            for score, row in scored[: stage["limit"]]
        ]


@pytest.fixture
def atlas(chunks: MongoChunkStore) -> SimulatedAtlas:
    simulated = SimulatedAtlas(chunks.collection)
    chunks.collection = simulated
    chunks.vector_search = "atlas"
    return simulated


def test_atlas_mode_matches_exact_mode(chunks: MongoChunkStore, atlas: SimulatedAtlas) -> None:
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((30, DIM))
    chunks.add_chunks(SCOPE, [
        chunk(f"c{i}", v.tolist(), source=f"doc-{i % 3}", kind=["content", "summary"][i % 2],
              path=f"p{i % 4}.md")
        for i, v in enumerate(vecs)
    ])  # fmt: skip
    other = scope_of("tb", "rag-a")  # same RAG id under another tenant: must never show
    chunks.add_chunks(other, [chunk(f"x{i}", v.tolist(), scope=other) for i, v in enumerate(vecs)])
    assert atlas.indexes == {"vancetope_rag_vectors_8": vector_index_definition(DIM)}

    q = rng.standard_normal(DIM).tolist()
    for filters in [None, {"kind": "summary"}, {"!path": ["p1.md", "p2.md"]},
                    {"sourceRef": "doc-1", "kind": "content"}]:  # fmt: skip
        chunks.vector_search = "atlas"
        got = chunks.query(SCOPE, q, 5, filters=filters)
        chunks.vector_search = "exact"
        want = chunks.query(SCOPE, q, 5, filters=filters)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want], filters
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)
        assert all(h.chunk_id.startswith("c") for h in got)
    assert len(atlas.searches) == 4
    assert all(s["filter"]["$and"][0] == {"tenantId": {"$eq": "ta"}} for s in atlas.searches)


def test_atlas_scores_are_cosine_similarity(chunks: MongoChunkStore, atlas: SimulatedAtlas) -> None:
    chunks.add_chunks(SCOPE, [chunk("same", unit(0)), chunk("orth", unit(1)),
                              chunk("opp", [-x for x in unit(0)])])  # fmt: skip
    scores = {h.chunk_id: h.score for h in chunks.query(SCOPE, unit(0), 3)}
    assert scores == pytest.approx({"same": 1.0, "orth": 0.0, "opp": -1.0}, abs=1e-6)


def test_atlas_mode_ranks_exactly_past_the_candidate_cap(
    chunks: MongoChunkStore, atlas: SimulatedAtlas
) -> None:
    chunks.add_chunks(SCOPE, [chunk("a", unit(0)), chunk("b", unit(1))])
    assert len(chunks.query(SCOPE, unit(0), MAX_NUM_CANDIDATES + 1)) == 2
    assert atlas.searches == []


def test_auto_mode_probes_for_atlas_search(mstore: MongoStore) -> None:
    store = MongoChunkStore(mstore.database, vector_search="auto")
    store.collection = SimulatedAtlas(store.collection)
    assert store.uses_atlas() is True

    class NoSearch:
        def list_search_indexes(self) -> list[Any]:
            raise OperationFailure("$listSearchIndexes is only supported on Atlas", code=115)

    plain = MongoChunkStore(mstore.database, vector_search="auto")
    plain.collection = NoSearch()
    assert plain.uses_atlas() is False and plain.vector_search == "exact"
    with pytest.raises(StoreError):
        MongoChunkStore(mstore.database, vector_search="faiss")  # type: ignore[arg-type]
