"""The MongoDB adapter in Atlas mode, on the lagging Atlas double (``atlas_double.py``).

What only a search that lags and indexes that build can show: ``init`` and its statuses, a
query before ``init`` or during a build failing fast, a definition update served old until
rebuilt, the sweep waiting for visibility, every moment of a swap, exact-or-ANN choice and
over-fetching, tier limits, missing privileges, a server without search, and the connection
semantics (primary for control reads, read concern ``local`` for search).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from atlas_double import AtlasCluster
from atlas_search_sim import failure
from mongo_support import ATLAS_BUILD_S, ATLAS_LAG_S, ATLAS_SEARCH_GRACE_S, atlas_store
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.operations import SearchIndexModel

from vancetope_rag.domain.records import Chunk
from vancetope_rag.errors import StoreError
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.port.documents import Claim
from vancetope_rag.store.port.types import NewDocument, RagScope

DIM = 8
SCOPE = RagScope("ta", "p", "rag-a", DIM)
URI = "mongodb://user:pw@atlas.example.net/vancetope_rag_test?readPreference=primaryPreferred&w=1"


def unit(i: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


def chunk(
    cid: str,
    vec: list[float],
    *,
    source: str = "doc-1",
    text: str | None = None,
    scope: RagScope = SCOPE,
) -> Chunk:
    return Chunk(cid, scope.rag_id, source, text or f"text of {cid}", vec)


def ids(hits: Any) -> list[str]:
    return sorted(h.chunk_id for h in hits)


def fresh(clock: Any, **cluster_options: Any) -> tuple[MongoStore, AtlasCluster]:
    """A store on a new double, not initialised."""
    cluster = AtlasCluster(clock=clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S, **cluster_options)
    store = open_mongo_store(
        URI,
        clock=clock,
        client=cluster.client(),
        server_clock=False,
        search_grace_s=ATLAS_SEARCH_GRACE_S,
    )
    store.sleep = clock.advance
    store.monotonic = clock
    return store, cluster


def chunks_of(store: MongoStore) -> MongoChunkStore:
    assert isinstance(store.chunks, MongoChunkStore)
    return store.chunks


@pytest.fixture
def atlas(tmp_path: Path, fake_clock: Any) -> tuple[MongoStore, AtlasCluster]:
    store, cluster = atlas_store(tmp_path, fake_clock)
    assert isinstance(store, MongoStore)
    return store, cluster


# -- init ------------------------------------------------------------------------------------


def test_init_creates_a_collection_and_two_search_indexes_per_dimension(fake_clock: Any) -> None:
    store, cluster = fresh(fake_clock)
    store.control.insert_rag(
        __import__("vancetope_rag.domain.records", fromlist=["x"]).RagRecord(
            "r384", "t", "p", "kb", "test", "m", 384, 200, 20
        )
    )
    statuses = store.initialize(dimensions=[DIM])
    assert {(s.collection, s.name) for s in statuses} == {
        (c, n) for c in ("chunks_8", "chunks_384") for n in (ix.VECTOR_INDEX, ix.TEXT_INDEX)
    }
    assert not any(s.ready for s in statuses)  # building
    assert {s.status for s in statuses} <= {"PENDING", "BUILDING"}
    definitions = cluster.indexes[("vancetope_rag_test", "chunks_384")]
    assert definitions[ix.VECTOR_INDEX].versions[0][1] == ix.vector_index_definition(384)
    assert definitions[ix.TEXT_INDEX].type == "search"
    assert "chunks_source_gen_idx" in store.database["chunks_8"].index_information()
    ready = store.initialize(wait=True, timeout_s=60)
    assert all(s.ready and s.status == "READY" for s in ready)
    assert (
        fake_clock.now
        >= cluster.indexes[("vancetope_rag_test", "chunks_8")][ix.VECTOR_INDEX].created_at
        + ATLAS_BUILD_S
    )  # it waited on the store's clock
    assert len(cluster.indexes[("vancetope_rag_test", "chunks_8")]) == 2  # idempotent


def test_init_wait_times_out_with_an_actionable_error(fake_clock: Any) -> None:
    store, _ = fresh(fake_clock)
    with pytest.raises(StoreError, match="not READY after 0s"):
        store.initialize(dimensions=[DIM], wait=True, timeout_s=0)


def test_a_query_before_init_fails_fast_and_creates_nothing(fake_clock: Any) -> None:
    store, cluster = fresh(fake_clock)
    start = fake_clock.now
    with pytest.raises(StoreError, match="does not exist; run `vancetope-rag --store <uri> init"):
        store.chunks.query(SCOPE, unit(0), 3)
    with pytest.raises(StoreError, match="'vancetope_rag_text' on 'chunks_8' does not exist"):
        store.chunks.lexical_query(SCOPE, "words", 3, vector=unit(0))
    assert cluster.indexes.get(("vancetope_rag_test", "chunks_8"), {}) == {}
    assert fake_clock.now == start and cluster.searches == []  # no wait, no search sent


def test_a_query_while_the_index_builds_fails_fast_then_works(fake_clock: Any) -> None:
    store, cluster = fresh(fake_clock)
    store.initialize(dimensions=[DIM])
    store.chunks.add_chunks(SCOPE, [chunk("a", unit(0))])
    with pytest.raises(StoreError, match="still being built"):
        store.chunks.query(SCOPE, unit(0), 3)
    cluster.settle()
    assert ids(store.chunks.query(SCOPE, unit(0), 3)) == ["a"]


def test_writes_need_no_index_and_the_index_covers_them_once_built(fake_clock: Any) -> None:
    store, _cluster = fresh(fake_clock)
    store.chunks.add_chunks(SCOPE, [chunk("a", unit(0))])  # before init: stored all the same
    store.initialize(dimensions=[DIM], wait=True)
    assert ids(store.chunks.query(SCOPE, unit(0), 3)) == ["a"]


def test_a_dimension_is_ready_only_when_both_indexes_are(fake_clock: Any) -> None:
    store, cluster = fresh(fake_clock)
    store.chunks.prepare_dimension(16)  # what creating a RAG of a new dimension does
    assert set(cluster.indexes[("vancetope_rag_test", "chunks_16")]) == {
        ix.VECTOR_INDEX,
        ix.TEXT_INDEX,
    }
    assert store.chunks.dimension_ready(16) is False
    cluster.settle()
    assert store.chunks.dimension_ready(16) is True


# -- a definition update ---------------------------------------------------------------------


def test_an_updated_definition_is_served_old_until_rebuilt(atlas: Any, fake_clock: Any) -> None:
    """An index from before ``gen`` was a filter field: init updates it; Atlas keeps serving
    the old definition (queryable, BUILDING) so queries work, the sweep's probe on ``gen``
    is refused until the rebuild ends, and init --wait waits for READY."""
    store, cluster = atlas
    chunks = chunks_of(store)
    collection = store.database["chunks_8"]
    old = ix.vector_index_definition(DIM)
    old["fields"] = [f for f in old["fields"] if f["path"] != "gen"]
    index = cluster.indexes[("vancetope_rag_test", "chunks_8")][ix.VECTOR_INDEX]
    index.versions = [(index.created_at, old)]
    chunks.add_chunks(SCOPE, [chunk("v1", unit(0))])
    cluster.settle()
    chunks.replace_source(SCOPE, "doc-1", [chunk("v2", unit(1))])
    statuses = store.initialize()  # the definition lacks gen: update it
    vector = next(s for s in statuses if s.name == ix.VECTOR_INDEX)
    assert (vector.status, vector.ready) == ("BUILDING", False)
    info = ix.find_search_index(collection, ix.VECTOR_INDEX)
    assert info is not None and info["queryable"] is True
    assert ix.definition_covers(info["latestDefinition"], ix.vector_index_definition(DIM))
    fake_clock.advance(ATLAS_LAG_S + 0.01)  # v2 visible, the rebuild still running
    assert ids(chunks.query(SCOPE, unit(0), 3)) == ["v2"]
    with pytest.raises(OperationFailure, match="Path 'gen' needs to be indexed as filter"):
        list(collection.aggregate(mq.build_probe_pipeline(SCOPE, "doc-1", 1, 1, DIM)))
    assert chunks.sweep() == 0 and collection.count_documents({}) == 2  # waits, no error
    assert all(s.ready for s in store.initialize(wait=True))
    assert chunks.sweep() == 1 and collection.count_documents({}) == 1


def test_the_text_index_analyses_as_the_sqlite_store(atlas: Any, fake_clock: Any) -> None:
    """On the double, which analyses with the definition's analyzer: a plural finds its
    singular, accents fold, ``snake_case`` stays one term, and a query of stopwords and
    content words matches on the content words only."""
    store, cluster = atlas
    chunks = chunks_of(store)
    chunks.add_chunks(
        SCOPE,
        [
            chunk("cell", unit(0), source="a", text="A cell divides."),
            chunk("cafe", unit(1), source="b", text="Le café est ouvert."),
            chunk("code", unit(2), source="c", text="call claim_for_rag_index first"),
            chunk("the", unit(3), source="d", text="the and of the"),
        ],
    )
    cluster.settle()

    def found(query: str) -> list[str]:
        return ids(chunks.lexical_query(SCOPE, query, 5, vector=unit(0)))

    assert found("dividing cells") == ["cell"]
    assert found("CAFE") == ["cafe"]
    assert found("claim_for_rag_index") == ["code"] and found("claim") == []
    assert found("what is the cell") == ["cell"]  # stopwords dropped while others remain


def test_decomposed_text_and_folded_forms_are_found(atlas: Any, fake_clock: Any) -> None:
    """On the double, which analyses with the definition's analyzer: a chunk in decomposed
    form (NFD, as macOS names files) is found by the composed query and the other way round;
    ``strasse`` finds ``Straße``, ``file`` finds ``ﬁle``."""
    store, cluster = atlas
    chunks = chunks_of(store)
    nfd = unicodedata.normalize("NFD", "naïve résumé")
    chunks.add_chunks(
        SCOPE,
        [
            chunk("nfd", unit(0), source="a", text=f"A {nfd} of the author."),
            chunk("street", unit(1), source="b", text="Die Straße ist lang."),
            chunk("lig", unit(2), source="c", text="The ﬁle is open."),
        ],
    )
    cluster.settle()

    def found(query: str) -> list[str]:
        return ids(chunks.lexical_query(SCOPE, query, 5, vector=unit(0)))

    assert found("naïve résumé") == ["nfd"] and found(nfd) == ["nfd"]
    assert found("resume") == ["nfd"]
    assert found("strasse") == ["street"] and found("STRASSE") == ["street"]
    assert found("file") == ["lig"]


def test_init_moves_a_text_index_that_splits_on_marks(atlas: Any, fake_clock: Any) -> None:
    """A text index made by the release whose pattern cut tokens at combining marks: ``init``
    updates it (the same planned update as any change of our analyzer), after which
    decomposed text is found."""
    store, cluster = atlas
    chunks = chunks_of(store)
    old = ix.text_index_definition()
    old["analyzers"][0]["tokenizer"]["pattern"] = r"[^\p{L}\p{N}_]+"
    index = cluster.indexes[("vancetope_rag_test", "chunks_8")][ix.TEXT_INDEX]
    index.versions = [(index.created_at, old)]
    chunks.add_chunks(SCOPE, [chunk("nfd", unit(0), text=unicodedata.normalize("NFD", "naïve"))])
    cluster.settle()
    assert ids(chunks.lexical_query(SCOPE, "naïve", 3, vector=unit(0))) == []  # "nai", "ve"
    chunks.search.forget(DIM)
    text = next(s for s in store.initialize(wait=True) if s.name == ix.TEXT_INDEX)
    assert text.ready
    assert ids(chunks.lexical_query(SCOPE, "naïve", 3, vector=unit(0))) == ["nfd"]


def test_init_moves_an_old_text_index_to_our_analyzer(atlas: Any, fake_clock: Any) -> None:
    """A cluster indexed by an older version (``lucene.standard``): ``init`` updates the text
    index; while Atlas rebuilds it, queries answer from the old definition and the indexer
    holds (the dimension is not READY); then the new analysis serves."""
    store, cluster = atlas
    chunks = chunks_of(store)
    old = ix.text_index_definition()
    old.pop("analyzers", None)
    old["mappings"]["fields"]["text"] = {"type": "string", "analyzer": "lucene.standard"}
    index = cluster.indexes[("vancetope_rag_test", "chunks_8")][ix.TEXT_INDEX]
    index.versions = [(index.created_at, old)]
    chunks.add_chunks(SCOPE, [chunk("cell", unit(0), text="A cell divides.")])
    cluster.settle()
    assert ids(chunks.lexical_query(SCOPE, "cells", 3, vector=unit(0))) == []  # standard
    chunks.search.forget(DIM)
    statuses = store.initialize()
    text = next(s for s in statuses if s.name == ix.TEXT_INDEX)
    assert (text.status, text.ready) == ("BUILDING", False)
    assert not chunks.dimension_ready(DIM)  # the indexer holds its documents meanwhile
    assert ids(chunks.lexical_query(SCOPE, "cell", 3, vector=unit(0))) == ["cell"]  # old one
    assert all(s.ready for s in store.initialize(wait=True))
    assert ids(chunks.lexical_query(SCOPE, "cells", 3, vector=unit(0))) == ["cell"]
    assert store.initialize()[1].status == "READY"  # unchanged from now on: no rebuild
    assert ix.ensure_search_index(store.database["chunks_8"], ix.search_index_models(DIM)[1]) == (
        "unchanged"
    )


def test_writes_are_acknowledged_by_a_majority_whatever_the_uri(fake_clock: Any) -> None:
    """``w=1`` in the URI: a failover could roll back a counter increment and hand out one
    fencing token twice. Every collection the store writes is pinned to ``majority``."""
    store, _ = fresh(fake_clock)
    store.initialize(dimensions=[DIM], wait=True)
    names = ["counters", "documents", "rags", "rag_names", "migrations", "migration_items"]
    names += ["chunk_swaps", "source_marks", "chunks_8"]
    for name in names:
        concern = store.database[name].options.get("write_concern")
        assert concern is not None and concern.document == {"w": "majority"}, name
    for collection in (store.control.counters, store.control.documents, store.chunks.marks):
        assert collection.options["write_concern"].document == {"w": "majority"}


@pytest.mark.parametrize("mode", ["secondary", "secondaryPreferred", "nearest"])
def test_a_non_primary_read_preference_is_refused_at_open(fake_clock: Any, mode: str) -> None:
    """``nearest`` may pick a secondary as surely as ``secondary*``: the sweep's probe and a
    query land on different members, so all three are refused."""
    cluster = AtlasCluster(clock=fake_clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S)
    uri = f"mongodb://user:pw@atlas.example.net/db?readPreference={mode}"
    with pytest.raises(StoreError, match=f"readPreference={mode} is not supported") as refused:
        open_mongo_store(uri, clock=fake_clock, client=cluster.client(), server_clock=False)
    assert "pw" not in str(refused.value) and "primaryPreferred" in str(refused.value)
    assert cluster.reads == []  # refused before anything was read
    client = MongoClient("mongodb://localhost/", connect=False, readPreference=mode)
    with pytest.raises(StoreError, match="is not supported"):  # the client's own preference
        open_mongo_store("mongodb://localhost/db", client=client)
    client.close()


# -- the swap, moment by moment --------------------------------------------------------------


def test_every_moment_of_a_swap_shows_the_source(atlas: Any, fake_clock: Any) -> None:
    """A query after every single write the swap makes (and a sweep attempt), with time
    passing between writes: the source is always there, one generation at a time."""
    store, cluster = atlas
    chunks = chunks_of(store)
    chunks.add_chunks(SCOPE, [chunk("old-a", unit(0)), chunk("old-b", unit(1))])
    cluster.settle()
    seen: list[list[str]] = []

    def during(collection: str) -> None:
        cluster.on_write = None  # the checks below write too (the sweep)
        fake_clock.advance(0.02)
        hits = chunks.query(SCOPE, unit(0), 10)
        seen.append(ids(hits))
        chunks.sweep()
        cluster.on_write = during

    cluster.on_write = during
    chunks.replace_source(SCOPE, "doc-1", [chunk("new-a", unit(2)), chunk("new-b", unit(3))])
    cluster.on_write = None
    for _ in range(5):
        fake_clock.advance(0.02)
        seen.append(ids(chunks.query(SCOPE, unit(0), 10)))
        chunks.sweep()
    assert seen and all(s in (["old-a", "old-b"], ["new-a", "new-b"]) for s in seen), seen
    assert seen[-1] == ["new-a", "new-b"]
    assert sorted(d["chunkId"] for d in store.database["chunks_8"].find()) == ["new-a", "new-b"]
    assert store.database["chunk_swaps"].count_documents({}) == 0


def test_the_sweep_waits_until_search_sees_the_new_generation(
    atlas: Any, fake_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, cluster = atlas
    chunks = chunks_of(store)
    chunks.add_chunks(SCOPE, [chunk("old", unit(0))])
    chunks.replace_source(SCOPE, "doc-1", [chunk("new", unit(1))])
    assert chunks.sweep() == 0  # not visible yet: the old generation keeps answering
    assert store.database["chunks_8"].count_documents({}) == 2
    assert ids(chunks.query(SCOPE, unit(0), 3)) == []  # "old" not visible either: it was new
    fake_clock.advance(ATLAS_LAG_S + 0.01)  # visible to the probe, but within the grace time
    assert chunks.search.visible(SCOPE, "doc-1", chunks.next_chunk_version() - 1)
    assert chunks.sweep() == 0  # another search node may still lag the one probed
    cluster.settle()
    assert chunks.sweep() == 1
    assert ids(chunks.query(SCOPE, unit(0), 3)) == ["new"]
    assert chunks.sweep() == 0


def test_removal_shows_at_once_even_before_search_catches_up(atlas: Any) -> None:
    store, cluster = atlas
    chunks = chunks_of(store)
    chunks.add_chunks(SCOPE, [chunk("a", unit(0)), chunk("b", unit(1), source="doc-2")])
    cluster.settle()
    chunks.remove_by_source(SCOPE, "doc-1")
    assert ids(chunks.query(SCOPE, unit(0), 5)) == ["b"]  # the lookup drops deleted documents
    chunks.replace_source(SCOPE, "doc-2", [])
    assert chunks.query(SCOPE, unit(0), 5) == []


def test_old_generations_never_shrink_an_answer(atlas: Any) -> None:
    """The best rows of a search may all be an old generation of one source; the adapter
    asks for more until ``top_k`` rows of newest generations are in."""
    store, cluster = atlas
    chunks = chunks_of(store)
    query = np.array(unit(0), dtype=np.float64)
    rng = np.random.default_rng(3)

    def near(similarity: float) -> list[float]:
        noise = rng.standard_normal(DIM)
        noise -= (noise @ query) * query
        noise /= np.linalg.norm(noise)
        return (similarity * query + np.sqrt(1 - similarity**2) * noise).tolist()

    old = [chunk(f"c{i}", near(0.99 - 0.001 * i)) for i in range(20)]
    new = [chunk("c0", near(0.995))] + [chunk(f"c{i}", near(0.5 - 0.01 * i)) for i in range(1, 20)]
    chunks.add_chunks(SCOPE, old)
    chunks.replace_source(SCOPE, "doc-1", new)
    cluster.settle()  # both generations visible, no sweep yet
    before = len(cluster.searches)
    hits = chunks.query(SCOPE, unit(0), 5)
    assert [h.chunk_id for h in hits] == ["c0", "c1", "c2", "c3", "c4"]
    assert hits[1].score == pytest.approx(0.49, abs=1e-4)  # the new generation's vectors
    limits = [s["$vectorSearch"]["limit"] for s in cluster.searches[before:]]
    assert limits[0] == mq.fetch_limit(5) and len(limits) == 2 and limits[1] > limits[0]
    # what the service's over-fetch may ask for: capped at Atlas's 10,000, never refused
    assert len(chunks.query(SCOPE, unit(0), 40_000)) == 20
    assert cluster.searches[-1]["$vectorSearch"]["limit"] == mq.MAX_NUM_CANDIDATES


# -- exact or approximate --------------------------------------------------------------------


def test_small_or_selective_scopes_use_exact_search(
    atlas: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, cluster = atlas
    chunks = chunks_of(store)
    small, big = SCOPE, RagScope("ta", "p", "rag-big", DIM)
    chunks.add_chunks(small, [chunk("s", unit(0))])
    chunks.add_chunks(big, [chunk(f"b{i}", unit(i), scope=big) for i in range(30)])
    cluster.settle()
    monkeypatch.setattr(mq, "EXACT_MAX_CHUNKS", 10)
    monkeypatch.setattr(mq, "EXACT_MAX_SELECTIVE", 20)
    chunks.query(small, unit(0), 3)
    chunks.query(big, unit(0), 3)
    small_stage, big_stage = (s["$vectorSearch"] for s in cluster.searches[-2:])
    assert small_stage["exact"] is True and "numCandidates" not in small_stage
    assert "exact" not in big_stage and big_stage["numCandidates"] >= big_stage["limit"]
    counts = sum(1 for r in cluster.reads if r.method == "count_documents")
    chunks.query(big, unit(1), 3)
    assert sum(1 for r in cluster.reads if r.method == "count_documents") == counts  # cached


# -- refusals and missing capabilities --------------------------------------------------------


def test_a_tier_limit_on_search_indexes_is_a_clear_error(fake_clock: Any) -> None:
    store, cluster = fresh(fake_clock, max_search_indexes=3)  # M0
    store.initialize(dimensions=[DIM])
    with pytest.raises(StoreError, match=r"Free \(M0\): 3"):
        store.initialize(dimensions=[16])
    assert cluster.index_count() == 3


def test_a_user_without_search_rights_gets_a_store_error_not_a_fallback(atlas: Any) -> None:
    store, cluster = atlas
    chunks = chunks_of(store)
    chunks.add_chunks(SCOPE, [chunk("a", unit(0))])
    cluster.settle()
    cluster.deny("search")
    with pytest.raises(StoreError, match="lacks a privilege"):
        chunks.query(SCOPE, unit(0), 3)
    assert chunks.vector_search == "atlas"  # an authorization error is no reason to go exact
    cluster.denied = frozenset()
    assert ids(chunks.query(SCOPE, unit(0), 3)) == ["a"]


def test_init_without_the_right_to_create_search_indexes(fake_clock: Any) -> None:
    store, _cluster = fresh(fake_clock, denied=frozenset({"createSearchIndexes"}))
    with pytest.raises(StoreError, match="createSearchIndexes"):
        store.initialize(dimensions=[DIM])


def test_a_server_without_atlas_search_ranks_exactly(fake_clock: Any) -> None:
    store, _cluster = fresh(fake_clock, search_supported=False)  # a community mongod
    statuses = store.initialize(dimensions=[DIM], wait=True)
    assert [(s.collection, s.status, s.ready) for s in statuses] == [
        ("chunks_8", "NO_SEARCH", True)
    ]
    assert store.chunks.vector_search == "exact"  # type: ignore[attr-defined]
    store.chunks.add_chunks(SCOPE, [chunk("a", unit(0)), chunk("b", unit(1))])
    assert ids(store.chunks.query(SCOPE, unit(0), 1)) == ["a"]  # no lag without an index
    assert store.chunks.dimension_ready(DIM) is True


def test_the_double_refuses_what_atlas_refuses(atlas: Any) -> None:
    """The double checks what Atlas checks, so pipeline mistakes cannot pass here."""
    store, _ = atlas
    collection = store.database["chunks_8"]
    base = {"index": ix.VECTOR_INDEX, "path": "embedding", "queryVector": unit(0), "limit": 5}
    for bad, message in [
        ({**base, "numCandidates": 10_001}, "less than or equal to 10000"),
        ({**base, "numCandidates": 4}, 'greater than or equal to "limit"'),
        ({**base, "exact": True, "numCandidates": 50}, 'not allowed when "exact" is true'),
        ({**base}, 'required when "exact" is false'),
        ({**base, "exact": True, "filter": {"text": {"$eq": "x"}}}, "indexed as filter"),
        ({**base, "exact": True, "queryVector": [1.0, 0.0]}, "dimensions"),
    ]:
        with pytest.raises(OperationFailure, match=message):
            list(collection.aggregate([{"$vectorSearch": bad}]))
    with pytest.raises(OperationFailure, match="first stage"):
        list(collection.aggregate([{"$match": {}}, {"$vectorSearch": {**base, "exact": True}}]))
    missing = {**base, "index": "nope", "exact": True}
    assert list(collection.aggregate([{"$vectorSearch": missing}])) == []  # as Atlas: empty
    with pytest.raises(OperationFailure, match="indexed as token"):
        list(
            collection.aggregate(
                [{"$search": {"index": ix.TEXT_INDEX, "equals": {"path": "text", "value": "x"}}}]
            )
        )
    with pytest.raises(OperationFailure):
        collection.create_search_index(
            SearchIndexModel(definition={}, name=ix.VECTOR_INDEX, type="vectorSearch")
        )
    assert isinstance(failure("x"), OperationFailure)


# -- connection semantics ----------------------------------------------------------------------


def test_control_reads_use_the_primary_and_search_reads_local(fake_clock: Any) -> None:
    """Opened with ``readPreference=primaryPreferred`` in the URI: claims, ``holds_claim`` and chunk
    counts still read the primary; search stages run with read concern ``local``."""
    store, cluster = fresh(fake_clock)
    store.initialize(dimensions=[DIM], wait=True)
    control = store.control
    control.insert_document(NewDocument("ta", "p", "a.md", "text/plain", "x", rag_dirty=True))
    cluster.reads.clear()
    (doc,) = control.claim_for_rag_index("ta", "p", "w1", 5, 60.0)
    assert control.holds_claim(Claim("ta", "p", doc.id, "w1"))
    store.chunks.add_chunks(SCOPE, [chunk("a", unit(0))])
    store.chunks.count_chunks(SCOPE)
    store.chunks.get_chunks(SCOPE)
    cluster.settle()
    store.chunks.query(SCOPE, unit(0), 3)
    control_reads = [r for r in cluster.reads if r.collection == "documents"]
    assert control_reads and all(r.read_preference == "primary" for r in control_reads)
    chunk_reads = [
        r
        for r in cluster.reads
        if r.collection == "chunks_8" and not (r.pipeline and "$vectorSearch" in r.pipeline[0])
    ]
    assert chunk_reads and all(r.read_preference == "primary" for r in chunk_reads)
    store.chunks.lexical_query(SCOPE, "text", 3, vector=unit(0))
    searches = [
        r
        for r in cluster.reads
        if r.pipeline and ({"$vectorSearch", "$search"} & set(r.pipeline[0]))
    ]
    assert {next(iter(r.pipeline[0])) for r in searches if r.pipeline} == {
        "$vectorSearch",
        "$search",
    }
    assert all(r.read_concern == "local" for r in searches)
    assert all(r.read_preference is None for r in searches)  # the URI's own preference
