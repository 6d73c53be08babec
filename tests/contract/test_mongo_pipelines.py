"""MongoDB adapter, pure parts: pipelines, filters, claim documents, index definitions.

Everything here is checked without a server (and without mongomock): what the adapter would
send to MongoDB/Atlas, and the index-wait logic against a scripted collection.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from pymongo.errors import OperationFailure

from vancetope_rag.domain.records import Chunk, IndexState, ProjectStatus
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store import mongo_indexes as ix
from vancetope_rag.store import mongo_updates as q
from vancetope_rag.store.mongo import database_from_uri, redact_uri
from vancetope_rag.store.mongo_queries import (
    MAX_NUM_CANDIDATES,
    atlas_hits,
    atlas_score_to_cosine,
    build_vector_search_pipeline,
    chunk_documents,
    chunk_match,
    num_candidates_for,
    rank_exact,
    rank_rows_exact,
    scope_match,
    translate_filters,
    vector_search_filter,
)
from vancetope_rag.store.shared import DocumentChanges
from vancetope_rag.store.types import NewDocument, RagScope

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
        build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 3, bad, "idx", 100)


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


def test_vector_search_pipeline_shape() -> None:
    pipeline = build_vector_search_pipeline(
        SCOPE, np.array([0.5, 0.0, 0.0, 1.0], dtype=np.float32), 5, {"kind": "content"},
        "vancetope_rag_vectors_4", 100,
    )  # fmt: skip
    assert len(pipeline) == 2
    search = pipeline[0]["$vectorSearch"]
    assert search == {
        "index": "vancetope_rag_vectors_4",
        "path": "embedding_4",
        "queryVector": [0.5, 0.0, 0.0, 1.0],
        "numCandidates": 100,
        "limit": 5,
        "filter": {"$and": [*SCOPE_CLAUSES, {"kind": {"$eq": "content"}}]},
    }
    assert all(type(x) is float for x in search["queryVector"])  # BSON doubles, not numpy
    project = pipeline[1]["$project"]
    assert project["score"] == {"$meta": "vectorSearchScore"}
    for field in ["chunkId", "tenantId", "projectId", "ragId", "sourceRef", "kind", "path",
                  "text", "metadata"]:  # fmt: skip
        assert project[field] == 1
    assert "embedding_4" not in project  # vectors never travel back


def test_vector_search_pipeline_scope_without_filters() -> None:
    (stage, _) = build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], 1, None, "i", 100)
    assert stage["$vectorSearch"]["filter"] == {"$and": SCOPE_CLAUSES}


@pytest.mark.parametrize(
    ("top_k", "candidates"), [(0, 100), (101, 100), (5, MAX_NUM_CANDIDATES + 1)]
)
def test_vector_search_pipeline_limits(top_k: int, candidates: int) -> None:
    with pytest.raises(InvalidInputError):
        build_vector_search_pipeline(SCOPE, [1.0, 0, 0, 0], top_k, None, "i", candidates)


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


def _row(chunk_id: str, *, score: float = 0.9, seq: int = 1, rag: str = "rag-a") -> dict[str, Any]:
    return {"chunkId": chunk_id, "tenantId": "tenant-a", "projectId": "proj-1", "ragId": rag,
            "sourceRef": "d1", "kind": "content", "path": "a.md", "text": chunk_id,
            "metadata": {"n": 1}, "seq": seq, "score": score}  # fmt: skip


def test_atlas_hits_keep_scope_and_one_copy_per_chunk() -> None:
    rows = [_row("c1", score=1.0), _row("x", score=0.99, rag="rag-b"), _row("c1", score=0.75),
            _row("c2", score=0.5)]  # fmt: skip
    hits = atlas_hits(rows, SCOPE)
    assert [(h.chunk_id, h.score) for h in hits] == [("c1", 1.0), ("c2", 0.0)]
    assert hits[0].metadata == {"n": 1} and hits[0].rag_id == "rag-a"


def test_rank_rows_exact_counts_a_staged_copy_once() -> None:
    rows = [
        {"_id": 1, "chunkId": "a", "embedding_4": [1.0, 0.0, 0.0, 0.0]},
        {"_id": 2, "chunkId": "a", "embedding_4": [1.0, 0.0, 0.0, 0.0]},  # staged copy
        {"_id": 3, "chunkId": "b", "embedding_4": [0.0, 1.0, 0.0, 0.0]},
        {"_id": 4, "chunkId": "c", "embedding_4": [1.0, 1.0, 0.0, 0.0]},
    ]
    query = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    chosen = rank_rows_exact(rows, "embedding_4", query, 2)
    assert [oid for oid, _ in chosen] in ([1, 4], [2, 4])
    assert [round(score, 4) for _, score in chosen] == [1.0, round(float(np.sqrt(0.5)), 4)]
    assert len(rank_rows_exact(rows, "embedding_4", query, 10)) == 3
    assert rank_rows_exact([], "embedding_4", query, 3) == []


def test_chunk_documents_are_validated_before_any_write() -> None:
    ok = Chunk("c1", "rag-a", "d1", "text", [1.0, 0.0, 0.0, 0.0], metadata={"when": "x"})
    (doc,) = chunk_documents(SCOPE, [ok], seq=7, live=False)
    assert doc["embedding_4"] == [1.0, 0.0, 0.0, 0.0] and doc["dim"] == 4
    assert (doc["seq"], doc["ord"], doc["live"]) == (7, 0, False)
    assert {k: doc[k] for k in ("tenantId", "projectId", "ragId")} == scope_match(SCOPE)
    with pytest.raises(InvalidInputError, match="another RAG"):
        chunk_documents(SCOPE, [Chunk("c", "rag-b", "d", "t", [1.0, 0, 0, 0])], seq=1, live=True)
    with pytest.raises(InvalidInputError, match="appears twice"):
        chunk_documents(SCOPE, [ok, ok], seq=1, live=True)
    assert chunk_match(SCOPE, ["c1"], {"kind": "summary"}) == {
        **scope_match(SCOPE), "kind": {"$eq": "summary"}, "chunkId": {"$in": ["c1"]}
    }  # fmt: skip


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


def test_claim_filter_equality_prefix_matches_the_spec_index() -> None:
    (claim_index,) = [
        m for m in ix.control_index_models()["documents"] if m.document["name"] == ix.CLAIM_INDEX
    ]
    keys = list(claim_index.document["key"])
    assert keys == ["tenantId", "projectId", "ragDirty", "ragClaimedBy"]
    flt = q.claim_filter("t", "p", 60, q.ServerTime())
    assert [k for k in keys if k in flt] == keys[:3]  # equality prefix, claimedBy in the $or
    assert q.CLAIM_SORT == [("updatedAt", 1), ("_id", 1)]


def test_claim_update() -> None:
    assert q.claim_update("w-$1", q.ServerTime()) == [
        {
            "$set": {
                "ragClaimedBy": {"$literal": "w-$1"},
                "ragClaimedAt": "$$NOW",
                "indexState": {"$literal": "processing"},
            }
        }
    ]
    (stage,) = q.claim_update("w1", q.ClockTime(AT))
    assert stage["$set"]["ragClaimedAt"] == {"$literal": NAIVE_AT}


def test_release_update_on_both_clocks() -> None:
    server = q.release_update("boom" * 1000, 30, 3, q.ServerTime())
    assert server[0] == {"$set": {"indexAttempts": {"$add": [{"$ifNull": ["$indexAttempts", 0]},
                                                              1]}}}  # fmt: skip
    second = server[1]["$set"]
    gave_up = {"$gte": ["$indexAttempts", 3]}
    assert second["indexNextAttemptAt"] == {
        "$cond": [gave_up, {"$literal": None}, {"$add": ["$$NOW", 30_000]}]
    }
    assert second["indexState"]["$cond"][0] == gave_up
    assert second["ragClaimedBy"] == {"$literal": None}
    assert len(second["indexLastError"]["$literal"]) == 2000
    clock = q.release_update("boom", 30, 3, q.ClockTime(AT))[1]["$set"]["indexNextAttemptAt"]
    assert clock["$cond"][2] == {"$literal": NAIVE_AT + timedelta(seconds=30)}


def test_mark_clean_and_dirty_documents() -> None:
    (clean,) = q.mark_clean_update(7, IndexState.INDEXED, "h1", q.ServerTime())
    s = clean["$set"]
    assert s["indexedAt"] == "$$NOW" and s["ragIndexedHash"] == {"$literal": "h1"}
    assert s["ragDirty"] == {"$cond": [{"$eq": ["$ragVersion", 7]}, {"$literal": False},
                                       {"$literal": True}]}  # fmt: skip
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
    (upd,) = q.document_update(DocumentChanges.from_args(path="$x"), time=q.ServerTime())
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


# -- index specs -----------------------------------------------------------------------------


def index_specs() -> dict[str, dict[str, dict[str, Any]]]:
    models = {**ix.control_index_models(), "chunks": ix.chunk_index_models()}
    return {coll: {m.document["name"]: dict(m.document) for m in ms} for coll, ms in models.items()}


def test_btree_index_specs() -> None:
    specs = index_specs()
    claim = specs["documents"]["tenant_project_rag_claim_idx"]
    assert list(claim["key"].items()) == [
        ("tenantId", 1), ("projectId", 1), ("ragDirty", 1), ("ragClaimedBy", 1)
    ]  # fmt: skip
    unique = {
        (coll, tuple(spec["key"])) for coll, by_name in specs.items()
        for spec in by_name.values() if spec.get("unique")
    }  # fmt: skip
    assert unique == {
        ("projects", ("tenantId", "projectId")),
        ("documents", ("tenantId", "projectId", "path")),
        ("rags", ("tenantId", "projectId", "name")),
        ("settings", ("tenantId", "projectId", "key")),
        ("embedding_cache", ("modelKey", "textHash")),
        ("chunks", ("tenantId", "projectId", "ragId", "chunkId")),
    }
    live = specs["chunks"]["chunks_live_id_uniq"]
    assert live["partialFilterExpression"] == {"live": True}


def test_vector_index_definition() -> None:
    assert ix.vector_index_definition(384) == {
        "fields": [
            {"type": "vector", "path": "embedding_384", "numDimensions": 384,
             "similarity": "cosine"},
            {"type": "filter", "path": "tenantId"},
            {"type": "filter", "path": "projectId"},
            {"type": "filter", "path": "ragId"},
            {"type": "filter", "path": "kind"},
            {"type": "filter", "path": "path"},
            {"type": "filter", "path": "sourceRef"},
        ]
    }  # fmt: skip
    model = ix.vector_index_model(8).document
    assert model["name"] == "vancetope_rag_vectors_8" and model["type"] == "vectorSearch"
    assert model["definition"] == ix.vector_index_definition(8)
    with pytest.raises(StoreError):
        ix.vector_index_definition(0)
    # every key a ChunkFilter may use, and the scope, is a pre-filter field
    filter_paths = {f["path"] for f in ix.vector_index_definition(8)["fields"][1:]}
    assert filter_paths >= {"tenantId", "projectId", "ragId", "kind", "path", "sourceRef"}


def test_definition_coverage_and_merge() -> None:
    wanted = ix.vector_index_definition(8)
    tuned = {"fields": [{**wanted["fields"][0], "quantization": "scalar"}, *wanted["fields"][1:]]}
    assert ix.definition_covers(tuned, wanted)  # an operator's tuning is not undone
    old = {"fields": [{**wanted["fields"][0], "quantization": "scalar"},
                      {"type": "filter", "path": "tenantId"}]}  # fmt: skip
    assert not ix.definition_covers(old, wanted)
    merged = ix.merge_definition(old, wanted)
    assert ix.definition_covers(merged, wanted)
    assert merged["fields"][0].get("quantization") == "scalar"
    assert len(merged["fields"]) == len(wanted["fields"])


# -- index management against a scripted collection ------------------------------------------


class ScriptedCollection:
    """Answers ``list_search_indexes`` from a script of index states, one per call."""

    name = "chunks"

    def __init__(self, states: list[dict[str, Any] | None]) -> None:
        self.states = states
        self.calls = 0
        self.created: list[Any] = []
        self.updated: list[tuple[str, Any]] = []
        self.create_error: Exception | None = None

    def list_search_indexes(self, name: str | None = None) -> list[dict[str, Any]]:
        state = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        return [] if state is None else [state]

    def create_search_index(self, model: Any) -> str:
        if self.create_error:
            raise self.create_error
        self.created.append(model)
        return str(model.document["name"])

    def update_search_index(self, name: str, definition: Any) -> None:
        self.updated.append((name, definition))


def entry(status: str, queryable: bool, dim: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "name": ix.vector_index_name(dim),
        "status": status,
        "queryable": queryable,
        "latestDefinition": ix.vector_index_definition(dim),
        **extra,
    }


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_ensure_creates_then_waits_until_queryable() -> None:
    coll = ScriptedCollection([None, entry("PENDING", False), entry("BUILDING", False),
                               entry("READY", True)])  # fmt: skip
    t = FakeTime()
    ix.ensure_vector_search_index(coll, 8, timeout_s=60, poll_s=2, sleep=t.sleep,
                                  monotonic=t.monotonic)  # fmt: skip
    assert [m.document["name"] for m in coll.created] == ["vancetope_rag_vectors_8"]
    assert t.slept == [2, 2]


def test_ensure_leaves_a_matching_index_alone_and_updates_an_outdated_one() -> None:
    ready = ScriptedCollection([entry("READY", True)])
    assert ix.create_vector_search_index(ready, 8) is False
    assert ready.created == [] and ready.updated == []

    outdated = ScriptedCollection(
        [entry("READY", True, latestDefinition={"fields": [{"type": "vector",
         "path": "embedding_8", "numDimensions": 8, "similarity": "cosine"}]})]
    )  # fmt: skip
    assert ix.create_vector_search_index(outdated, 8) is True
    ((name, definition),) = outdated.updated
    assert name == "vancetope_rag_vectors_8"
    assert ix.definition_covers(definition, ix.vector_index_definition(8))


def test_a_concurrent_creator_winning_is_not_an_error() -> None:
    coll = ScriptedCollection([None])
    coll.create_error = OperationFailure("Index already exists", code=68)
    assert ix.create_vector_search_index(coll, 8) is False
    coll.create_error = OperationFailure("not authorized", code=13)
    with pytest.raises(OperationFailure):
        ix.create_vector_search_index(coll, 8)


def test_wait_times_out_with_a_clear_error() -> None:
    coll = ScriptedCollection([entry("BUILDING", False)])
    t = FakeTime()
    with pytest.raises(StoreError, match=r"not queryable after 10s \(status BUILDING\)"):
        ix.wait_until_queryable(coll, 8, timeout_s=10, poll_s=1, sleep=t.sleep,
                                monotonic=t.monotonic)  # fmt: skip
    assert t.now == pytest.approx(10)


def test_wait_reports_a_failed_build() -> None:
    coll = ScriptedCollection([entry("FAILED", False, message="bad numDimensions")])
    with pytest.raises(StoreError, match="failed to build: bad numDimensions"):
        ix.wait_until_queryable(coll, 8, sleep=lambda s: None)


def test_a_stale_but_queryable_index_serves_queries() -> None:
    """Atlas marks an index being rebuilt STALE yet queryable: no need to wait."""
    coll = ScriptedCollection([entry("STALE", True)])
    ix.wait_until_queryable(coll, 8, sleep=lambda s: pytest.fail("should not wait"))


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
