"""MongoDB adapter: index definitions, index management and the error mapping, without a
server (index management runs against a scripted ``list_search_indexes``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from pymongo.errors import (
    DocumentTooLarge,
    NetworkTimeout,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import sweep as ms
from vancetope_rag.store.mongo.errors import (
    check_bson_size,
    guard_errors,
    scrub,
    search_unsupported,
    store_error,
)


def index_specs() -> dict[str, dict[str, dict[str, Any]]]:
    models = {**ix.control_index_models(), "chunks_8": ix.chunk_index_models()}
    return {coll: {m.document["name"]: dict(m.document) for m in ms} for coll, ms in models.items()}


def test_btree_index_specs() -> None:
    specs = index_specs()
    unique = {
        (coll, tuple(spec["key"]))
        for coll, by_name in specs.items()
        for spec in by_name.values()
        if spec.get("unique")
    }
    assert unique == {
        ("projects", ("tenantId", "projectId")),
        ("documents", ("tenantId", "projectId", "path")),
        # a name has generations (live, shadow, retired); the live one is the pointer's
        ("rag_names", ("tenantId", "projectId", "name")),
        ("settings", ("tenantId", "projectId", "key")),
        ("embedding_cache", ("modelKey", "textHash")),
        # a chunk id is unique per RAG and generation: a new generation reuses the ids
        ("chunks_8", ("tenantId", "projectId", "ragId", "chunkId", "gen")),
        # one active rebuild per RAG name (partial: ended migrations drop ``active``)
        ("migrations", ("tenantId", "projectId", "ragName")),
        ("migration_items", ("migrationId", "documentId")),
        # one first sighting of each RAG by search (a rebuild's switch waits the grace)
        ("search_visibility", ("tenantId", "projectId", "ragId")),
        # one fencing mark per source (see .mongo.chunks)
        ("source_marks", ("tenantId", "projectId", "ragId", "sourceRef")),
    }
    active = specs[ix.MIGRATIONS]["one_active_migration_uniq"]
    assert active["partialFilterExpression"] == {"active": True}
    source = specs["chunks_8"]["chunks_source_gen_idx"]
    assert list(source["key"]) == ["tenantId", "projectId", "ragId", "sourceRef", "gen"]
    assert list(specs[ix.SWAPS]["swap_source_idx"]["key"]) == [
        "tenantId",
        "projectId",
        "ragId",
        "sourceRef",
    ]
    # the sweeper's due notes: a range on ``at``, pages in (at, _id) order, off one index
    assert list(specs[ix.SWAPS][ix.DUE_INDEX]["key"]) == [key for key, _ in ms.DUE_SORT]
    assert list(ms.due_notes_filter(datetime(2026, 1, 1), None)) == ["at"]


def test_one_collection_per_dimension() -> None:
    assert ix.chunk_collection(384) == "chunks_384"
    assert ix.dimension_of("chunks_1536") == 1536
    assert ix.dimension_of("chunks") is None and ix.dimension_of("chunk_swaps") is None
    for bad in (0, 8193):
        with pytest.raises(StoreError):
            ix.chunk_collection(bad)


def test_vector_index_definition() -> None:
    assert ix.vector_index_definition(384) == {
        "fields": [
            {"type": "vector", "path": "embedding", "numDimensions": 384, "similarity": "cosine"},
            {"type": "filter", "path": "tenantId"},
            {"type": "filter", "path": "projectId"},
            {"type": "filter", "path": "ragId"},
            {"type": "filter", "path": "kind"},
            {"type": "filter", "path": "path"},
            {"type": "filter", "path": "sourceRef"},
            {"type": "filter", "path": "gen"},
            {"type": "filter", "path": "chunkId"},
        ]
    }
    vector, text = (m.document for m in ix.search_index_models(8))
    assert (vector["name"], vector["type"]) == ("vancetope_rag_vectors", "vectorSearch")
    assert vector["definition"] == ix.vector_index_definition(8)
    assert (text["name"], text["type"]) == ("vancetope_rag_text", "search")
    with pytest.raises(StoreError):
        ix.vector_index_definition(0)


def test_text_index_definition() -> None:
    mappings = ix.text_index_definition()["mappings"]
    assert mappings["dynamic"] is False  # only what queries need is indexed
    assert mappings["fields"]["text"] == {
        "type": "string",
        "analyzer": "vancetope_text",
        "searchAnalyzer": "vancetope_text",
    }
    (analyzer,) = ix.text_index_definition()["analyzers"]
    assert analyzer == {
        "name": "vancetope_text",
        "charFilters": [],
        "tokenizer": {"type": "regexSplit", "pattern": r"[^\p{L}\p{M}\p{N}_]+"},
        "tokenFilters": [
            {"type": "lowercase"},
            {"type": "icuFolding"},
            {"type": "snowballStemming", "stemmerName": "porter"},
        ],
    }
    for name in ("tenantId", "projectId", "ragId", "kind", "path", "sourceRef"):
        assert mappings["fields"][name] == {"type": "token"}  # equals/in need token
    assert mappings["fields"]["gen"] == {"type": "number"}


def test_definition_coverage_and_merge() -> None:
    wanted = ix.vector_index_definition(8)
    tuned = {"fields": [{**wanted["fields"][0], "quantization": "scalar"}, *wanted["fields"][1:]]}
    assert ix.definition_covers(tuned, wanted)  # an operator's tuning is not undone
    old = {
        "fields": [
            {**wanted["fields"][0], "quantization": "scalar"},
            {"type": "filter", "path": "tenantId"},
        ]
    }
    assert not ix.definition_covers(old, wanted)
    merged = ix.merge_definition(old, wanted)
    assert ix.definition_covers(merged, wanted)
    assert merged["fields"][0].get("quantization") == "scalar"
    assert len(merged["fields"]) == len(wanted["fields"])
    other_dim = {"fields": [{**wanted["fields"][0], "numDimensions": 16}]}
    fixed = ix.merge_definition(other_dim, wanted)
    assert [f["numDimensions"] for f in fixed["fields"] if f["type"] == "vector"] == [8]

    text = ix.text_index_definition()
    no_gen = {
        "analyzers": text["analyzers"],
        "mappings": {"fields": {k: v for k, v in text["mappings"]["fields"].items() if k != "gen"}},
    }
    assert not ix.definition_covers(no_gen, text)
    assert ix.definition_covers(ix.merge_definition(no_gen, text), text)


def test_an_analyzer_change_reaches_existing_clusters() -> None:
    """The text index of an older version (``lucene.standard``) reads as changed, and the
    merge writes the chunk text's analyzers and the analyzer we own; what an operator set on
    other fields, and analyzers of their own, stay. Server-added empty ``charFilters`` do not
    read as a change."""
    text = ix.text_index_definition()
    fields = text["mappings"]["fields"]
    theirs = {"name": "operator_keywords", "tokenizer": {"type": "keyword"}, "tokenFilters": []}
    old = {
        "analyzers": [theirs],
        "mappings": {
            "dynamic": False,
            "fields": {
                **fields,
                "text": {"type": "string", "analyzer": "lucene.standard"},
                "path": {"type": "token", "normalizer": "lowercase"},
            },
        },
    }
    assert not ix.definition_covers(old, text)
    merged = ix.merge_definition(old, text)
    assert ix.definition_covers(merged, text)
    assert merged["mappings"]["fields"]["text"] == fields["text"]
    assert merged["mappings"]["fields"]["path"] == {"type": "token", "normalizer": "lowercase"}
    assert merged["analyzers"] == [theirs, *text["analyzers"]]
    stale = {**text, "analyzers": [{**text["analyzers"][0], "tokenFilters": []}]}
    assert not ix.definition_covers(stale, text)  # our analyzer itself changed
    assert ix.merge_definition(stale, text)["analyzers"] == text["analyzers"]
    served = {
        **text,
        "analyzers": [{k: v for k, v in text["analyzers"][0].items() if k != "charFilters"}],
    }
    assert ix.definition_covers(served, text)


# -- index management against a scripted collection ------------------------------------------


class ScriptedCollection:
    """Answers ``list_search_indexes`` from a script of index states, one per call."""

    name = "chunks_8"

    def __init__(self, states: list[dict[str, Any] | None]) -> None:
        self.states = states
        self.calls = 0
        self.created: list[Any] = []
        self.updated: list[tuple[str, Any]] = []
        self.create_error: Exception | None = None

    def list_search_indexes(self, name: str | None = None) -> list[dict[str, Any]]:
        state = self.states[min(self.calls, len(self.states) - 1)]
        self.calls += 1
        if state is None:
            return []
        return [{**state, "name": name}] if name else [state]

    def create_search_index(self, model: Any) -> str:
        if self.create_error:
            raise self.create_error
        self.created.append(model)
        return str(model.document["name"])

    def update_search_index(self, name: str, definition: Any) -> None:
        self.updated.append((name, definition))


def entry(status: str, queryable: bool, **extra: Any) -> dict[str, Any]:
    return {
        "status": status,
        "queryable": queryable,
        "latestDefinition": ix.vector_index_definition(8),
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


VECTOR_MODEL = ix.search_index_models(8)[0]


def test_ensure_creates_a_missing_index_and_leaves_a_matching_one() -> None:
    missing = ScriptedCollection([None])
    assert ix.ensure_search_index(missing, VECTOR_MODEL) == "created"
    assert [m.document["name"] for m in missing.created] == ["vancetope_rag_vectors"]
    ready = ScriptedCollection([entry("READY", True)])
    assert ix.ensure_search_index(ready, VECTOR_MODEL) == "unchanged"
    assert ready.created == [] and ready.updated == []


def test_ensure_updates_an_outdated_definition() -> None:
    old = {"fields": ix.vector_index_definition(8)["fields"][:-1]}  # before gen was a filter
    outdated = ScriptedCollection([entry("READY", True, latestDefinition=old)])
    assert ix.ensure_search_index(outdated, VECTOR_MODEL) == "updated"
    ((name, definition),) = outdated.updated
    assert name == "vancetope_rag_vectors"
    assert ix.definition_covers(definition, ix.vector_index_definition(8))


def test_a_concurrent_creator_winning_is_not_an_error() -> None:
    coll = ScriptedCollection([None])
    coll.create_error = OperationFailure("Index already exists", code=68)
    assert ix.ensure_search_index(coll, VECTOR_MODEL) == "unchanged"
    coll.create_error = OperationFailure("not authorized", code=13)
    with pytest.raises(OperationFailure):
        ix.ensure_search_index(coll, VECTOR_MODEL)


def test_a_tier_limit_says_what_to_do() -> None:
    coll = ScriptedCollection([None])
    coll.create_error = OperationFailure(
        "The maximum number of FTS indexes has been reached for this instance size.", code=8
    )
    with pytest.raises(
        StoreError, match=r"Free \(M0\): 3, Flex: 10.*each embedding dimension needs 2"
    ) as e:
        ix.ensure_search_index(coll, VECTOR_MODEL)
    assert "M2" not in e.value.message and "M5" not in e.value.message  # gone from Atlas
    assert "init --prune" in e.value.message


def test_a_missing_privilege_names_the_database_role() -> None:
    message = store_error(OperationFailure("not authorized on db", code=13), "init").message
    # readWrite holds the search-index actions; an Atlas UI role is not a database role
    assert "readWrite on the whole database" in message
    assert "Project Search Index Editor" not in message


def test_wait_until_ready_wants_ready_not_merely_queryable() -> None:
    """After a definition update Atlas answers queryable (the old definition) while
    BUILDING the new one: waiting stops only at READY."""
    coll = ScriptedCollection([entry("BUILDING", True)] * 4 + [entry("READY", True)])
    t = FakeTime()
    statuses = ix.wait_until_ready(
        [coll], timeout_s=60, poll_s=2, sleep=t.sleep, monotonic=t.monotonic
    )
    assert t.slept == [2, 2] and all(s.ready for s in statuses)
    assert {s.name for s in statuses} == {"vancetope_rag_vectors", "vancetope_rag_text"}


def test_wait_times_out_with_a_clear_error() -> None:
    coll = ScriptedCollection([entry("BUILDING", False)])
    t = FakeTime()
    with pytest.raises(StoreError, match=r"not READY after 10s.*BUILDING.*init --wait"):
        ix.wait_until_ready([coll], timeout_s=10, poll_s=1, sleep=t.sleep, monotonic=t.monotonic)
    assert t.now == pytest.approx(10)


def test_wait_reports_a_failed_or_missing_index() -> None:
    failed = ScriptedCollection([entry("FAILED", False, message="bad numDimensions")])
    with pytest.raises(StoreError, match="FAILED: bad numDimensions"):
        ix.wait_until_ready([failed], sleep=lambda s: None)
    with pytest.raises(StoreError, match="MISSING"):
        ix.wait_until_ready([ScriptedCollection([None])], sleep=lambda s: None)


def test_is_ready() -> None:
    assert ix.is_ready({"status": "READY", "queryable": True})
    for status, queryable in (("BUILDING", True), ("STALE", True), ("PENDING", False)):
        assert not ix.is_ready({"status": status, "queryable": queryable})
    assert not ix.is_ready(None)


# -- errors ----------------------------------------------------------------------------------


def test_only_the_search_not_supported_answers_count_as_no_search() -> None:
    assert search_unsupported(OperationFailure("SearchNotEnabled", code=31082))
    assert search_unsupported(OperationFailure("Unrecognized pipeline stage", code=40324))
    assert search_unsupported(OperationFailure("x", details={"codeName": "SearchNotEnabled"}))
    for other in (
        OperationFailure("not authorized", code=13),
        OperationFailure("x", code=8),
        NetworkTimeout("timed out"),
        ValueError("x"),
    ):
        assert not search_unsupported(other)


@pytest.mark.parametrize(
    ("exc", "hint"),
    [
        (ServerSelectionTimeoutError("no server"), "could not be reached"),
        (NetworkTimeout("read timed out"), "timeoutMS"),
        (OperationFailure("operation exceeded time limit", code=50), "timeoutMS"),
        (OperationFailure("not authorized on db", code=13), "readWrite"),
        (OperationFailure("SearchNotEnabled", code=31082), "no Atlas Search"),
        (DocumentTooLarge("too big"), "16 MiB"),
        (OperationFailure("something else", code=2), "retry"),
    ],
)
def test_store_errors_say_what_to_do(exc: Exception, hint: str) -> None:
    error = store_error(exc, "querying")  # type: ignore[arg-type]
    assert isinstance(error, StoreError) and error.code == "STORE_ERROR"
    assert hint in error.message and "querying" in error.message


def test_no_credentials_in_error_messages() -> None:
    text = "connection to mongodb+srv://app:s3cr%40t@c.example.net/db failed; mongodb://u:p@h"
    assert "s3cr" not in scrub(text) and ":p@" not in scrub(text)
    assert "mongodb+srv://app:***@c.example.net" in scrub(text)
    error = store_error(ServerSelectionTimeoutError(text), "opening")
    assert "s3cr" not in error.message


def test_guard_turns_driver_errors_into_store_errors() -> None:
    @guard_errors
    class Adapter:
        def fails(self) -> None:
            raise OperationFailure("not authorized", code=13)

        def refuses(self) -> None:
            raise InvalidInputError("bad input")

        def _private(self) -> None:
            raise OperationFailure("raw", code=2)

    with pytest.raises(StoreError, match=r"Adapter\.fails"):
        Adapter().fails()
    with pytest.raises(InvalidInputError):  # our own errors pass through unchanged
        Adapter().refuses()
    with pytest.raises(OperationFailure):
        Adapter()._private()


def test_a_document_over_16_mib_is_refused_before_the_driver() -> None:
    check_bson_size({"text": "x" * (15 * 2**20)}, "chunk")
    with pytest.raises(InvalidInputError, match=r"16\.0 MiB|16 MiB"):
        check_bson_size({"text": "x" * (16 * 2**20)}, "chunk 'c1'")


def test_a_collection_not_created_yet_has_no_search_index() -> None:
    class Raising(ScriptedCollection):
        def __init__(self, error: Exception) -> None:
            super().__init__([None])
            self.error = error

        def list_search_indexes(self, name: str | None = None) -> list[dict[str, Any]]:
            raise self.error

    assert ix.find_search_index(Raising(OperationFailure("ns missing", code=26)), "x") is None
    status = ix.index_status(Raising(OperationFailure("ns missing", code=26)), "x", "search")
    assert (status.status, status.ready) == ("MISSING", False)
    with pytest.raises(OperationFailure):
        ix.find_search_index(Raising(OperationFailure("not authorized", code=13)), "x")


def node(host: str, version: int, status: str = "READY", *, staged: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {
        "hostname": host,
        "status": status,
        "queryable": status in ("READY", "STALE"),
        "mainIndex": {"status": status, "definitionVersion": {"version": version}},
    }
    if staged:
        found["stagedIndex"] = {"status": "BUILDING", "definitionVersion": {"version": version + 1}}
    return found


def test_ready_means_every_search_process_serves_the_latest_definition() -> None:
    """The top-level status may read READY while a search node still serves an older
    definition version or builds the new one (``statusDetail``): not READY yet."""
    top = {"status": "READY", "queryable": True, "latestDefinitionVersion": {"version": 2}}
    assert ix.is_ready({**top, "statusDetail": [node("a", 2), node("b", 2)]})
    assert ix.is_ready(top)  # a server that lists no statusDetail: the top-level status
    behind = {**top, "statusDetail": [node("a", 2), node("b", 1)]}
    assert not ix.is_ready(behind)
    assert ix.lagging_node(behind) == ("BUILDING", "b serves definition version 1, not 2 yet")
    assert not ix.is_ready({**top, "statusDetail": [node("a", 2, staged=True)]})
    assert ix.lagging_node({**top, "statusDetail": [node("a", 2), node("b", 2, "STALE")]}) == (
        "STALE",
        "b is STALE",
    )
    status = ix.index_status(ScriptedCollection([behind]), ix.VECTOR_INDEX, "vectorSearch")
    assert (status.status, status.ready) == ("BUILDING", False) and "b serves" in status.detail
    ready = {**top, "statusDetail": [node("a", 2), node("b", 2)]}
    coll = ScriptedCollection([behind] * 4 + [ready])  # two indexes a poll: waits twice
    t = FakeTime()
    statuses = ix.wait_until_ready(
        [coll], timeout_s=60, poll_s=2, sleep=t.sleep, monotonic=t.monotonic
    )
    assert t.slept == [2, 2] and all(s.ready and s.status == "READY" for s in statuses)


def test_wait_fails_fast_on_a_stale_index() -> None:
    """STALE never becomes READY by waiting: fail at the first poll, saying what to do."""
    coll = ScriptedCollection([entry("STALE", True)])
    t = FakeTime()
    with pytest.raises(StoreError, match=r"is STALE.*no longer follows the writes.*Atlas UI"):
        ix.wait_until_ready([coll], timeout_s=600, poll_s=2, sleep=t.sleep, monotonic=t.monotonic)
    assert t.slept == []
