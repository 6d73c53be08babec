"""The probes behind a rebuild's switch on Atlas (pure): what was written per source, groups
that fit one answer, the pipelines sent, and the comparison."""

from __future__ import annotations

from atlas_search_sim import check_vector_stage

from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders.probes import (
    chunk_version_counts_pipeline,
    scope_probe_pipelines,
    sees_all,
    source_groups,
    written,
)
from vancetope_rag.store.mongo.builders.queries import MAX_NUM_CANDIDATES
from vancetope_rag.store.port.types import RagScope

SCOPE = RagScope("tenant-a", "proj-1", "rag-a", 4)


def test_written_keeps_the_newest_generation_and_counts_all() -> None:
    rows = [
        {"_id": {"s": "a", "g": 3}, "n": 2},
        {"_id": {"s": "a", "g": 5}, "n": 4},
        {"_id": {"s": "b", "g": 1}, "n": 1},
    ]
    assert written(rows) == {"a": (5, 4, 6), "b": (1, 1, 1)}
    assert written(reversed(rows)) == {"a": (5, 4, 6), "b": (1, 1, 1)}
    assert chunk_version_counts_pipeline(SCOPE)[0] == {
        "$match": {"tenantId": "tenant-a", "projectId": "proj-1", "ragId": "rag-a"}
    }


def test_sources_are_grouped_to_fit_one_answer() -> None:
    by_source = {f"s{i:02}": (1, 3000, 3000) for i in range(7)}
    groups = source_groups(by_source)
    assert groups == [["s00", "s01", "s02"], ["s03", "s04", "s05"], ["s06"]]
    assert all(sum(by_source[s][2] for s in g) <= MAX_NUM_CANDIDATES for g in groups)
    assert source_groups({"huge": (1, 20_000, 20_000)}) == [["huge"]]
    assert source_groups({}) == []


def test_probe_pipelines_are_exact_scoped_and_use_declared_filter_fields() -> None:
    vector, text = scope_probe_pipelines(SCOPE, ["a", "b"], 20_000, text=True)
    stage = vector[0]["$vectorSearch"]
    assert next(iter(vector[0])) == "$vectorSearch"
    assert stage["exact"] is True and "numCandidates" not in stage
    assert stage["limit"] == MAX_NUM_CANDIDATES  # capped at Atlas's largest answer
    assert stage["filter"]["$and"][:3] == [
        {"tenantId": {"$eq": "tenant-a"}},
        {"projectId": {"$eq": "proj-1"}},
        {"ragId": {"$eq": "rag-a"}},
    ]
    assert stage["filter"]["$and"][3] == {"sourceRef": {"$in": ["a", "b"]}}
    check_vector_stage(stage, ix.vector_index_definition(4))  # Atlas would accept it
    assert vector[1] == {"$project": {"_id": 0, "sourceRef": 1, "gen": 1}}
    assert next(iter(text[0])) == "$search"
    assert text[0]["$search"]["compound"]["filter"][-1] == {
        "in": {"path": "sourceRef", "value": ["a", "b"]}
    }
    assert text[1] == {"$limit": MAX_NUM_CANDIDATES}
    assert len(scope_probe_pipelines(SCOPE, ["a"], 3, text=False)) == 1


def test_every_chunk_of_the_newest_generation_must_be_seen() -> None:
    by_source = {"a": (5, 2, 3), "b": (1, 1, 1)}
    seen = [
        {"sourceRef": "a", "gen": 5},
        {"sourceRef": "a", "gen": 5},
        {"sourceRef": "a", "gen": 4},
        {"sourceRef": "b", "gen": 1},
    ]
    assert sees_all(by_source, ["a", "b"], seen)
    assert not sees_all(by_source, ["a", "b"], seen[1:])  # one of a's new chunks missing
    old_only = [{"sourceRef": "a", "gen": 4}, {"sourceRef": "a", "gen": 4}]
    assert not sees_all(by_source, ["a"], old_only)  # the old generation does not count
