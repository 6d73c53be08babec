"""MongoDB adapter, pure parts: every aggregation the adapter sends, filters, claim
documents, generations and vector codecs.

Everything here is checked without a server (and without mongomock): what the adapter would
send to MongoDB/Atlas. Index definitions and management: ``test_mongo_indexes.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from bson.binary import Binary, BinaryVectorDtype

from vancetope_rag.domain.records import Chunk, IndexState, ProjectStatus
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import rebuilds as mm
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.mongo.builders.analysis import text_terms
from vancetope_rag.store.mongo.builders.queries import (
    MAX_NUM_CANDIDATES,
    atlas_hits,
    atlas_score_to_cosine,
    build_probe_pipeline,
    build_vector_search_pipeline,
    chunk_documents,
    chunk_match,
    count_pipeline,
    decode_vector,
    encode_vector,
    fetch_limit,
    keep_newest,
    newest_chunk_version,
    num_candidates_for,
    prefer_exact,
    rank_exact,
    rank_rows_exact,
    scope_match,
    source_counts_pipeline,
    translate_filters,
    vector_search_filter,
)
from vancetope_rag.store.mongo.builders.text import (
    build_text_probe_pipeline,
    build_text_search_pipeline,
)
from vancetope_rag.store.mongo.client import client_options, database_from_uri, redact_uri
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.shared import DocumentChanges
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope

SCOPE = RagScope("tenant-a", "proj-1", "rag-a", 4)
SCOPE_CLAUSES = [
    {"tenantId": {"$eq": "tenant-a"}},
    {"projectId": {"$eq": "proj-1"}},
    {"ragId": {"$eq": "rag-a"}},
]
AT = datetime(2027, 1, 15, 10, 0, 0, 123000, tzinfo=UTC)
NAIVE_AT = AT.replace(tzinfo=None)


# -- filters ---------------------------------------------------------------------------------


def test_translate_filters() -> None:
    assert translate_filters(None) == {}
    assert translate_filters({}) == {}
    assert translate_filters({"kind": "summary"}) == {"kind": {"$eq": "summary"}}
    assert translate_filters({"!kind": "summary"}) == {"kind": {"$ne": "summary"}}
    assert translate_filters({"path": ["a.md", "b.md"]}) == {"path": {"$in": ["a.md", "b.md"]}}
    assert translate_filters({"!sourceRef": ("d1", "d2")}) == {"sourceRef": {"$nin": ["d1", "d2"]}}
    assert translate_filters({"sourceRef": ["only"]}) == {"sourceRef": {"$eq": "only"}}
    assert translate_filters({"kind": "content", "!path": "x.md"}) == {
        "$and": [{"kind": {"$eq": "content"}}, {"path": {"$ne": "x.md"}}]
    }


@pytest.mark.parametrize("bad", [{"text": "x"}, {"!metadata": "x"}, {"ragId": "other"}])
def test_translate_filters_refuses_unknown_keys(bad: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        translate_filters(bad)
    with pytest.raises(InvalidInputError):
        build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 3, bad, exact=False)
    with pytest.raises(InvalidInputError):
        build_text_search_pipeline(SCOPE, text_terms("words"), 3, bad)


def test_vector_search_filter_always_scopes_by_tenant_project_and_rag() -> None:
    assert vector_search_filter(SCOPE, None) == {"$and": SCOPE_CLAUSES}
    assert vector_search_filter(SCOPE, {"kind": "summary"}) == {
        "$and": [*SCOPE_CLAUSES, {"kind": {"$eq": "summary"}}]
    }
    two = vector_search_filter(SCOPE, {"!kind": "summary", "path": ["a", "b"]})
    assert two == {
        "$and": [*SCOPE_CLAUSES, {"kind": {"$ne": "summary"}}, {"path": {"$in": ["a", "b"]}}]
    }
    # a filter cannot widen the scope: scope clauses are ANDed first, whatever follows
    for flt in [None, {"sourceRef": "d"}, {"!path": ["x", "y"], "kind": "content"}]:
        assert vector_search_filter(SCOPE, flt)["$and"][:3] == SCOPE_CLAUSES


# -- $vectorSearch pipeline ------------------------------------------------------------------


def declared_filter_paths() -> set[str]:
    return {f["path"] for f in ix.vector_index_definition(4)["fields"] if f["type"] == "filter"}


def filter_paths(flt: Any) -> set[str]:
    if isinstance(flt, dict):
        out: set[str] = set()
        for k, v in flt.items():
            out |= set().union(*map(filter_paths, v)) if k.startswith("$") else {k}
        return out
    return set()


def test_vector_search_pipeline_shape() -> None:
    pipeline = build_vector_search_pipeline(
        SCOPE,
        np.array([0.5, 0.0, 0.0, 1.0], dtype=np.float32),
        5,
        {"kind": "content"},
        exact=False,
        num_candidates=100,
    )
    assert len(pipeline) == 2 and next(iter(pipeline[0])) == "$vectorSearch"  # first stage
    search = pipeline[0]["$vectorSearch"]
    assert search == {
        "index": "vancetope_rag_vectors",
        "path": "embedding",
        "queryVector": encode_vector(np.asarray([0.5, 0.0, 0.0, 1.0], dtype=np.float32)),
        "numCandidates": 100,
        "limit": 5,
        "filter": {"$and": [*SCOPE_CLAUSES, {"kind": {"$eq": "content"}}]},
    }
    assert isinstance(search["queryVector"], Binary)  # BinData float32, as stored
    project = pipeline[1]["$project"]
    assert project["score"] == {"$meta": "vectorSearchScore"}
    for field in [
        "chunkId",
        "tenantId",
        "projectId",
        "ragId",
        "sourceRef",
        "kind",
        "path",
        "text",
        "metadata",
        "gen",
    ]:
        assert project[field] == 1
    assert "embedding" not in project  # vectors never travel back


@pytest.mark.parametrize(
    "filters",
    [
        None,
        {"kind": "summary"},
        {"!path": ["a", "b"]},
        {"sourceRef": "d", "!kind": "summary", "path": "p"},
    ],
)
def test_every_search_filter_field_is_declared_in_the_index(filters: Any) -> None:
    for exact in (True, False):
        (stage, _) = build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 3, filters, exact=exact)
        assert filter_paths(stage["$vectorSearch"]["filter"]) <= declared_filter_paths()
    (probe, _) = build_probe_pipeline(SCOPE, "d1", 7, 3, 4)
    assert filter_paths(probe["$vectorSearch"]["filter"]) <= declared_filter_paths()
    tokens = {
        k
        for k, v in ix.text_index_definition()["mappings"]["fields"].items()
        if v["type"] in ("token", "number")
    }
    text = build_text_search_pipeline(SCOPE, text_terms("q"), 3, filters)[0]["$search"]["compound"]
    assert {c["equals"]["path"] for c in text["filter"] if "equals" in c} <= tokens


def test_exact_search_has_no_num_candidates_and_approximate_is_bounded() -> None:
    (exact, _) = build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 7, None, exact=True)
    assert exact["$vectorSearch"]["exact"] is True
    assert "numCandidates" not in exact["$vectorSearch"]
    for limit in (1, 7, 499, 500, 9_999, MAX_NUM_CANDIDATES):
        (ann, _) = build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], limit, None, exact=False)
        stage = ann["$vectorSearch"]
        assert "exact" not in stage
        assert stage["limit"] <= stage["numCandidates"] <= MAX_NUM_CANDIDATES


def test_vector_search_pipeline_scope_without_filters() -> None:
    (stage, _) = build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 1, None, exact=False)
    assert stage["$vectorSearch"]["filter"] == {"$and": SCOPE_CLAUSES}


@pytest.mark.parametrize(
    ("limit", "candidates"),
    [
        (0, 100),
        (101, 100),
        (5, MAX_NUM_CANDIDATES + 1),
        (MAX_NUM_CANDIDATES + 1, MAX_NUM_CANDIDATES),
    ],
)
def test_vector_search_pipeline_limits(limit: int, candidates: int) -> None:
    with pytest.raises(InvalidInputError):
        build_vector_search_pipeline(
            SCOPE, [1.0, 0, 0, 0], limit, None, exact=False, num_candidates=candidates
        )


def test_probe_pipeline_counts_one_generation_of_one_source_exactly() -> None:
    (stage, project) = build_probe_pipeline(SCOPE, "doc-1", 42, 12_000, 4)
    search = stage["$vectorSearch"]
    assert search["exact"] is True and "numCandidates" not in search
    assert (
        search["limit"] == MAX_NUM_CANDIDATES and len(search["queryVector"].as_vector().data) == 4
    )
    assert search["filter"] == {
        "$and": [*SCOPE_CLAUSES, {"sourceRef": {"$eq": "doc-1"}}, {"gen": {"$eq": 42}}]
    }
    assert project == {"$project": {"_id": 1}}
    text = build_text_probe_pipeline(SCOPE, "doc-1", 42, 3)
    assert text[0]["$search"]["compound"]["filter"][-1] == {"equals": {"path": "gen", "value": 42}}
    assert text[1] == {"$limit": 3}


# -- $search (the lexical half) --------------------------------------------------------------


def test_text_search_pipeline_shape() -> None:
    pipeline = build_text_search_pipeline(
        SCOPE,
        text_terms("eventual consistency"),
        20,
        {"kind": "content", "!path": ["a.md", "b.md"]},
    )
    assert [next(iter(stage)) for stage in pipeline] == ["$search", "$limit", "$project"]
    search = pipeline[0]["$search"]
    assert search["index"] == "vancetope_rag_text"
    assert search["compound"] == {
        "filter": [
            {"equals": {"path": "tenantId", "value": "tenant-a"}},
            {"equals": {"path": "projectId", "value": "proj-1"}},
            {"equals": {"path": "ragId", "value": "rag-a"}},
            {"equals": {"path": "kind", "value": "content"}},
            {"compound": {"mustNot": [{"in": {"path": "path", "value": ["a.md", "b.md"]}}]}},
        ],
        "must": [{"text": {"query": "eventual consistency", "path": "text"}}],
    }
    # scope and filters select inside the search: never a $match after it
    assert all("$match" not in stage for stage in pipeline)
    assert pipeline[1] == {"$limit": 20}
    project = pipeline[2]["$project"]
    assert project["lexical"] == {"$meta": "searchScore"} and "embedding" not in project


def test_the_text_query_is_reduced_by_the_sqlite_term_rule() -> None:
    """Atlas receives the query's distinct terms (by stem), stopwords dropped while others
    remain, at most 64: what FTS5 matches on the SQLite store, not the whole text."""

    def sent(query: str) -> str:
        (search, *_) = build_text_search_pipeline(SCOPE, text_terms(query), 5, None)
        return str(search["$search"]["compound"]["must"][0]["text"]["query"])

    assert sent("What is the state of the cells, the cell and its Cells?") == "state cells"
    assert sent("what is it") == "what is it"  # only stopwords: they are the query
    assert sent("naïve café, NAIVE Cafe") == "naïve café"
    long = " ".join(f"term{i}" for i in range(100))
    assert sent(long) == " ".join(f"term{i}" for i in range(64))
    assert text_terms("?!, -- ...") == []  # no token: the store asks nothing


def test_num_candidates() -> None:
    assert num_candidates_for(1) == 100
    assert num_candidates_for(5) == 100
    assert num_candidates_for(50) == 1000
    assert num_candidates_for(50, factor=10) == 500
    assert num_candidates_for(600) == MAX_NUM_CANDIDATES
    assert num_candidates_for(MAX_NUM_CANDIDATES) == MAX_NUM_CANDIDATES
    for k in [1, 7, 499, 500, 9_999, 10_000]:
        assert k <= num_candidates_for(k) <= MAX_NUM_CANDIDATES


def test_atlas_scores_convert_back_to_cosine_similarity() -> None:
    assert atlas_score_to_cosine(1.0) == 1.0
    assert atlas_score_to_cosine(0.5) == 0.0
    assert atlas_score_to_cosine(0.0) == -1.0
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 16))
    cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    atlas = (1 + cos) / 2  # what Atlas reports for a cosine index
    assert atlas_score_to_cosine(atlas) == pytest.approx(cos, abs=1e-12)


def test_rank_exact_is_the_true_top_k() -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((50, 8)).astype(np.float32)
    query = rng.standard_normal(8).astype(np.float32)
    cos = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    idx, scores = rank_exact(matrix, query, 5)
    assert idx.tolist() == np.argsort(-cos)[:5].tolist()
    np.testing.assert_allclose(scores, np.sort(cos)[::-1][:5], atol=1e-5)
    assert len(rank_exact(matrix, query, 500)[0]) == 50
    assert len(rank_exact(matrix[:0], query, 5)[0]) == 0


def _row(
    chunk_id: str, *, score: float = 0.9, gen: int = 1, rag: str = "rag-a", source: str = "d1"
) -> dict[str, Any]:
    return {
        "chunkId": chunk_id,
        "tenantId": "tenant-a",
        "projectId": "proj-1",
        "ragId": rag,
        "sourceRef": source,
        "kind": "content",
        "path": "a.md",
        "text": chunk_id,
        "metadata": {"n": 1},
        "gen": gen,
        "score": score,
    }


def test_atlas_hits_keep_scope_and_one_copy_per_chunk() -> None:
    rows = [
        _row("c1", score=1.0),
        _row("x", score=0.99, rag="rag-b"),
        _row("c1", score=0.75),
        _row("c2", score=0.5),
    ]
    hits = atlas_hits(rows, SCOPE)
    assert [(h.chunk_id, h.score) for h in hits] == [("c1", 1.0), ("c2", 0.0)]
    assert hits[0].metadata == {"n": 1} and hits[0].rag_id == "rag-a"


def test_the_newest_generation_per_source_wins_whatever_the_scores() -> None:
    rows = [
        _row("c1", score=1.0, gen=3),  # old generation, best score: stale
        _row("o1", score=0.9, gen=1, source="d2"),  # another source's only generation
        _row("c1", score=0.6, gen=5),
        _row("c2", score=0.55, gen=5),
        _row("c0", score=0.5, gen=3),
    ]
    assert [(h.chunk_id, h.score) for h in atlas_hits(rows, SCOPE)] == [
        ("o1", pytest.approx(0.8)),
        ("c1", pytest.approx(0.2)),
        ("c2", pytest.approx(0.1)),
    ]
    # while the new generation is not yet visible, the old one answers
    assert [h.chunk_id for h in atlas_hits(rows[:1] + rows[4:], SCOPE)] == ["c1", "c0"]
    assert [r["chunkId"] for r in newest_chunk_version([])] == []


def test_keep_newest_trusts_a_newer_generation_than_it_was_told() -> None:
    rows = [_row("a", gen=1), _row("b", gen=2), _row("c", gen=2, source="d2")]
    assert [r["chunkId"] for r in keep_newest(rows, {"d1": 2, "d2": 1})] == ["b", "c"]
    assert [r["chunkId"] for r in keep_newest(rows, {"d1": 3})] == ["c"]  # d1 moved on


def test_rank_rows_exact_ranks_the_newest_generation_once() -> None:
    def row(oid: int, cid: str, vec: list[float], gen: int) -> dict[str, Any]:
        v = encode_vector(np.asarray(vec, dtype=np.float32))
        return {"_id": oid, "chunkId": cid, "sourceRef": "d1", "gen": gen, "embedding": v}

    rows = [
        row(1, "a", [1.0, 0.0, 0.0, 0.0], 1),  # superseded copy of a
        row(2, "a", [0.0, 0.0, 1.0, 0.0], 2),
        row(3, "b", [0.0, 1.0, 0.0, 0.0], 2),
        {"_id": 4, "chunkId": "c", "sourceRef": "d1", "gen": 2, "embedding": [1.0, 1.0, 0.0, 0.0]},
    ]
    query = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    chosen = rank_rows_exact(rows, query, 2)
    assert [r["_id"] for r, _ in chosen] == [4, 2] or [r["_id"] for r, _ in chosen] == [4, 3]
    assert round(chosen[0][1], 4) == round(float(np.sqrt(0.5)), 4)
    assert len(rank_rows_exact(rows, query, 10)) == 3
    assert rank_rows_exact([], query, 3) == []


def test_vectors_are_binary_float32_and_both_forms_decode() -> None:
    vec = np.array([0.25, -1.5, 3.0, 1e-3], dtype=np.float32)
    encoded = encode_vector(vec)
    assert isinstance(encoded, Binary) and encoded.subtype == 9
    assert encoded == Binary.from_vector(vec.tolist(), BinaryVectorDtype.FLOAT32)
    assert len(bytes(encoded)) == 2 + 4 * 4  # vs 8 bytes + key per element as doubles
    np.testing.assert_array_equal(decode_vector(encoded), vec)
    np.testing.assert_array_equal(decode_vector([0.25, -1.5, 3.0, 1e-3]), vec)
    assert decode_vector(None) is None
    assert decode_vector(Binary(b"\x03\x00\x01", 9)) is None  # an int8 vector: not ours


def test_chunk_documents_are_validated_before_any_write() -> None:
    ok = Chunk("c1", "rag-a", "d1", "text", [1.0, 0.0, 0.0, 0.0], metadata={"when": "x"})
    (doc,) = chunk_documents(SCOPE, [ok])
    assert isinstance(doc["embedding"], Binary)  # binary vectors in writes
    np.testing.assert_array_equal(decode_vector(doc["embedding"]), [1.0, 0.0, 0.0, 0.0])
    assert (doc["gen"], doc["ord"]) == (0, 0) and "dim" not in doc
    assert {k: doc[k] for k in ("tenantId", "projectId", "ragId")} == scope_match(SCOPE)
    with pytest.raises(InvalidInputError, match="another RAG"):
        chunk_documents(SCOPE, [Chunk("c", "rag-b", "d", "t", [1.0, 0, 0, 0])])
    with pytest.raises(InvalidInputError, match="appears twice"):
        chunk_documents(SCOPE, [ok, ok])
    huge = Chunk("big", "rag-a", "d1", "x" * (17 * 2**20), [1.0, 0.0, 0.0, 0.0])
    with pytest.raises(InvalidInputError, match="16 MiB"):
        chunk_documents(SCOPE, [ok, huge])


def test_count_pipeline_takes_the_newest_generation_before_other_filters() -> None:
    pipeline = count_pipeline(SCOPE, {"sourceRef": "d1", "!kind": "summary"})
    assert pipeline[0] == {"$match": {**scope_match(SCOPE), "sourceRef": {"$eq": "d1"}}}
    assert [next(iter(s)) for s in pipeline] == ["$match", "$group", "$sort", "$group", "$group"]
    counted = pipeline[1]["$group"]["n"]["$sum"]["$cond"][0]
    assert {"$eq": [{"$in": ["$kind", ["summary"]]}, False]} in counted["$and"]


def test_source_counts_pipeline_is_scoped_and_takes_each_sources_newest_generation() -> None:
    pipeline = source_counts_pipeline(SCOPE, ["d1", "d2"])
    assert pipeline[0] == {"$match": {**scope_match(SCOPE), "sourceRef": {"$in": ["d1", "d2"]}}}
    assert [next(iter(s)) for s in pipeline] == ["$match", "$group", "$group", "$sort", "$group"]
    assert pipeline[3] == {"$sort": {"_id.s": 1, "_id.g": -1}}
    assert pipeline[4]["$group"]["paths"] == {"$first": "$paths"}


def test_fetch_limit_leaves_room_for_old_generations_within_atlas_caps() -> None:
    assert fetch_limit(5) == 18 and fetch_limit(1) == 10
    assert fetch_limit(MAX_NUM_CANDIDATES) == MAX_NUM_CANDIDATES


def test_exact_search_for_small_or_selective_scopes() -> None:
    assert prefer_exact(50, 10)  # small: exhaustive costs little
    assert prefer_exact(10_000, 50_000)
    assert not prefer_exact(20_000, 100_000)  # 20 %: ANN
    assert prefer_exact(20_000, 1_000_000)  # 2 %: selective, ANN would lose recall
    assert not prefer_exact(200_000, 10_000_000)  # selective but too big to scan
    assert chunk_match(SCOPE, ["c1"], {"kind": "summary"}) == {
        **scope_match(SCOPE),
        "kind": {"$eq": "summary"},
        "chunkId": {"$in": ["c1"]},
    }


# -- claims and documents: both time sources -------------------------------------------------


def test_claim_filter_on_the_server_clock() -> None:
    assert q.claim_filter("t", "p", 60, q.ServerTime()) == {
        "tenantId": "t",
        "projectId": "p",
        "ragDirty": True,
        "$and": [
            {
                "$or": [
                    {"ragClaimedBy": None},
                    {"$expr": {"$lt": ["$ragClaimedAt", {"$subtract": ["$$NOW", 60_000]}]}},
                ]
            },
            {
                "$or": [
                    {"indexNextAttemptAt": None},
                    {"$expr": {"$lte": ["$indexNextAttemptAt", "$$NOW"]}},
                ]
            },
        ],
    }


def test_claim_filter_on_an_injected_clock() -> None:
    assert q.claim_filter("t", "p", 1.5, q.ClockTime(AT)) == {
        "tenantId": "t",
        "projectId": "p",
        "ragDirty": True,
        "$and": [
            {
                "$or": [
                    {"ragClaimedBy": None},
                    {"ragClaimedAt": {"$lt": NAIVE_AT - timedelta(seconds=1.5)}},
                ]
            },
            {"$or": [{"indexNextAttemptAt": None}, {"indexNextAttemptAt": {"$lte": NAIVE_AT}}]},
        ],
    }


def index_keys(name: str) -> list[str]:
    (model,) = [m for m in ix.control_index_models()["documents"] if m.document["name"] == name]
    return list(model.document["key"])


def test_the_claim_index_follows_the_claim_query_in_esr_order() -> None:
    """Equality fields first, then the sort fields, in the query's order: the server walks
    dirty documents in claim order instead of sorting all of them (the range conditions —
    lease expiry, retry time — are checked on the documents it walks)."""
    flt = q.claim_filter("t", "p", 60, q.ServerTime())
    equality = [k for k, v in flt.items() if not k.startswith("$") and not isinstance(v, dict)]
    assert equality == ["tenantId", "projectId", "ragDirty"]
    keys = index_keys(ix.CLAIM_ORDER_INDEX)
    assert keys == equality + [field for field, _ in q.CLAIM_SORT]
    assert q.CLAIM_SORT == [("updatedAt", 1), ("_id", 1)]
    # the spec's index (§3.2) stays for the equality prefix
    assert index_keys(ix.CLAIM_INDEX) == ["tenantId", "projectId", "ragDirty", "ragClaimedBy"]


def serving_indexes(
    collection: str, flt: dict[str, Any], sort: list[tuple[str, int]]
) -> dict[str, list[str]]:
    """The declared indexes of ``collection`` whose keys are equality fields of the query
    (of every branch of a top-level ``$or``) followed by the sort, with that equality prefix:
    the server walks them in order and never sorts in memory."""
    branches = flt["$or"] if set(flt) == {"$or"} else [flt]
    equal = [
        {k for k, v in b.items() if not k.startswith("$") and not isinstance(v, dict)}
        for b in branches
    ]
    sort_keys = [field for field, _ in sort]
    found: dict[str, list[str]] = {}
    for model in ix.control_index_models()[collection]:
        keys = list(model.document["key"])
        prefix, rest = keys[: len(keys) - len(sort_keys)], keys[len(keys) - len(sort_keys) :]
        if prefix and rest == sort_keys and all(set(prefix) <= e for e in equal):
            found[str(model.document["name"])] = prefix
    return found


def test_the_queue_of_a_rebuild_is_claimed_along_an_index() -> None:
    """O(1) per claim instead of a sort of the whole queue: each state's branch of the claim
    query is the equality prefix of ``migration_claim_order_idx``, then its sort. (Walking
    ``(migrationId, documentId)`` would step over every finished item: the state must be in
    the prefix.)"""
    for time in (q.ServerTime(), q.ClockTime(AT)):
        flt = mm.item_claim_filter("t", "p", "m1", 60, time)
        served = serving_indexes(ix.MIGRATION_ITEMS, flt, mm.ITEM_CLAIM_SORT)
        assert served["migration_claim_order_idx"] == ["migrationId", "state"]
    flt = q.claim_filter("t", "p", 60, q.ServerTime())  # the documents' claim, likewise
    served = serving_indexes("documents", flt, q.CLAIM_SORT)
    assert served[ix.CLAIM_ORDER_INDEX] == ["tenantId", "projectId", "ragDirty"]


def test_claim_update_carries_the_token() -> None:
    assert q.claim_update("w-$1", 17, q.ServerTime()) == [
        {
            "$set": {
                "ragClaimedBy": {"$literal": "w-$1"},
                "ragClaimedAt": "$$NOW",
                "ragClaimToken": {"$literal": 17},
                "indexState": {"$literal": "processing"},
            }
        }
    ]
    (stage,) = q.claim_update("w1", 3, q.ClockTime(AT))
    assert stage["$set"]["ragClaimedAt"] == {"$literal": NAIVE_AT}
    assert q.claim_holder(Claim("t", "p", "d", "w")) == {
        "tenantId": "t",
        "projectId": "p",
        "_id": "d",
        "ragClaimedBy": "w",
    }
    assert q.claim_holder(Claim("t", "p", "d", "w"), 9)["ragClaimToken"] == 9
    for pipeline in (
        q.mark_clean_update(CleanMark("t", "p", "d", "w", 1, IndexState.INDEXED), q.ServerTime()),
        q.release_update(_release("e", 1, 3), q.ServerTime()),
    ):
        assert pipeline[-1]["$set"]["ragClaimToken"] == {"$literal": None}


def _release(error: str, retry_delay_s: float, max_attempts: int) -> Release:
    return Release("t", "p", "d", "w", error, retry_delay_s, max_attempts)


def test_release_update_on_both_clocks() -> None:
    server = q.release_update(_release("boom" * 1000, 30, 3), q.ServerTime())
    assert server[0] == {
        "$set": {"indexAttempts": {"$add": [{"$ifNull": ["$indexAttempts", 0]}, 1]}}
    }
    second = server[1]["$set"]
    gave_up = {"$gte": ["$indexAttempts", 3]}
    assert second["indexNextAttemptAt"] == {
        "$cond": [gave_up, {"$literal": None}, {"$add": ["$$NOW", 30_000]}]
    }
    assert second["indexState"]["$cond"][0] == gave_up
    assert second["ragClaimedBy"] == {"$literal": None}
    assert len(second["indexLastError"]["$literal"]) == 2000
    clock = q.release_update(_release("boom", 30, 3), q.ClockTime(AT))[1]["$set"]
    assert clock["indexNextAttemptAt"]["$cond"][2] == {"$literal": NAIVE_AT + timedelta(seconds=30)}


def test_mark_clean_and_dirty_documents() -> None:
    (clean,) = q.mark_clean_update(
        CleanMark("t", "p", "d", "w", 7, IndexState.INDEXED, "h1"), q.ServerTime()
    )
    s = clean["$set"]
    assert s["indexedAt"] == "$$NOW" and s["ragIndexedHash"] == {"$literal": "h1"}
    assert s["ragDirty"] == {
        "$cond": [{"$eq": ["$ragVersion", 7]}, {"$literal": False}, {"$literal": True}]
    }
    assert s["indexState"]["$cond"][1:] == [{"$literal": "indexed"}, {"$literal": "pending"}]
    dirty = q.dirty_stage()["$set"]
    assert dirty["ragVersion"] == {"$add": [{"$ifNull": ["$ragVersion", 0]}, 1]}
    # a claimed document keeps its state (its worker re-queues it on mark_rag_clean)
    assert dirty["indexState"]["$cond"][2] == "$indexState"


def test_written_values_are_literals() -> None:
    """A path like ``$HOME/x`` must be stored as text, not read as a field reference."""
    doc = NewDocument("t", "p", "$HOME/x.md", "text/plain", "$content", summary="$s")
    (stage,) = q.new_document_update(doc, "hash", q.ServerTime())
    values = stage["$set"]
    assert values["path"] == {"$literal": "$HOME/x.md"}
    assert values["content"] == {"$literal": "$content"}
    assert values["createdAt"] == values["updatedAt"] == "$$NOW"
    assert values["ragVersion"] == {"$literal": 1}
    (upd,) = q.document_update(DocumentChanges.of(DocumentChange(path="$x")), time=q.ServerTime())
    assert upd["$set"] == {"path": {"$literal": "$x"}, "updatedAt": "$$NOW"}
    assert len(q.document_update(DocumentChanges({}, mark_dirty=True), time=q.ServerTime())) == 2
    (proj,) = q.project_upsert(ProjectStatus.RUNNING, "$node", q.ServerTime())
    assert proj["$set"]["homeNode"] == {"$literal": "$node"}
    assert proj["$set"]["createdAt"] == {"$ifNull": ["$createdAt", "$$NOW"]}


def test_bson_times_are_utc_milliseconds() -> None:
    assert q.to_bson_time(datetime(2027, 1, 1, 12, 0, 0, 999_999, tzinfo=UTC)) == datetime(
        2027, 1, 1, 12, 0, 0, 999_000
    )
    assert q.from_bson_time(NAIVE_AT) == AT
    assert q.from_bson_time(None) is None
    assert q.ms_instant(1_800_000_000.1234567).microsecond == 123_000


# -- URI handling ----------------------------------------------------------------------------


def test_database_name_from_the_uri() -> None:
    assert database_from_uri("mongodb://localhost") == "vancetope_rag"
    assert database_from_uri("mongodb://localhost/") == "vancetope_rag"
    assert database_from_uri("mongodb://h1:1,h2:2/ragdb?replicaSet=rs0") == "ragdb"
    assert database_from_uri("mongodb+srv://u:p@cluster.example.net/prod_rag") == "prod_rag"
    with pytest.raises(StoreError):
        database_from_uri("mongodb://localhost/bad.name")


def test_uri_passwords_are_redacted() -> None:
    assert redact_uri("mongodb+srv://app:s3cret@c.example.net/db?x=1") == (
        "mongodb+srv://app:***@c.example.net/db?x=1"
    )
    assert redact_uri("mongodb://localhost/db") == "mongodb://localhost/db"


def test_the_client_gets_an_overall_timeout_unless_the_uri_sets_one() -> None:
    assert client_options("mongodb+srv://c.example.net/db") == {
        "appname": "vancetope-rag",
        "timeoutMS": 30_000,
    }
    assert "timeoutMS" not in client_options("mongodb://h/db?timeoutMS=5000")
    assert "timeoutMS" not in client_options("mongodb://h/db?replicaSet=rs&TIMEOUTMS=0")
