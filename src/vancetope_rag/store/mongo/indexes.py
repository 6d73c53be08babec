"""Index management of the MongoDB store: B-tree indexes and Atlas Search indexes.

The definitions are pure data (tested without a server); the functions that talk to the server
are thin: create or update, list statuses, wait until READY. What a unique index's refusal
means to the adapters (a duplicate key, an upsert race) is read here too.

Chunks of each embedding dimension live in their own collection (:func:`chunk_collection`,
``chunks_<dim>``) with two search indexes: :data:`VECTOR_INDEX` (``vectorSearch``: the
``embedding`` field with that collection's fixed ``numDimensions``, plus the pre-filter
fields) and :data:`TEXT_INDEX` (``search``: the chunk text for BM25 with our own analyzer,
the same fields as ``token`` filters). Nothing here runs in the request path:
:mod:`.mongo.setup` calls it from ``init`` and when a RAG of a new dimension is created.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, PyMongoError
from pymongo.operations import SearchIndexModel

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.mongo.builders.analysis import ANALYZER_NAME, analyzer_definition

log = get_logger(__name__)

#: Name of the claim index the spec asks for (§3.2).
CLAIM_INDEX = "tenant_project_rag_claim_idx"
#: The index that serves the claim query: equality fields, then the sort (ESR order).
CLAIM_ORDER_INDEX = "tenant_project_dirty_claim_order_idx"
CLAIM_ORDER_KEYS = ("tenantId", "projectId", "ragDirty", "updatedAt", "_id")

VECTOR_INDEX = "vancetope_rag_vectors"
TEXT_INDEX = "vancetope_rag_text"
VECTOR_FIELD = "embedding"
TEXT_FIELD = "text"
#: Pending chunk version swaps the sweeper works through (see :mod:`.mongo.chunks`).
SWAPS = "chunk_swaps"
#: The index of the sweeper's due-notes query (a range on ``at``, pages in ``(at, _id)`` order).
DUE_INDEX = "swap_due_idx"
DUE_INDEX_KEYS = ("at", "_id")
#: The index of one dimension's due notes (the sweep is leased per dimension).
DIM_DUE_INDEX = "swap_dim_due_idx"
DIM_DUE_INDEX_KEYS = ("dim", "at", "_id")
#: The shard key of a ``chunks_<dim>`` collection on a sharded cluster. Never constant within
#: a RAG (one large RAG splits over shards by chunk id), a prefix of the unique index
#: ``chunks_id_gen_uniq`` (a sharded collection's unique indexes must start with its shard
#: key), and a RAG's scope is its prefix, so plain reads of one RAG are targeted. Every
#: chunk write holds it: inserts carry every field, the rest are ``delete_many`` by scope.
CHUNK_SHARD_KEY = {"tenantId": 1, "projectId": 1, "ragId": 1, "chunkId": 1}
#: One lease per dimension: which worker sweeps its notes (see :mod:`.mongo.chunks`).
SWEEP_LEASES = "sweep_leases"
#: When search was first seen to show a RAG's chunks as written (a rebuild's switch waits).
VISIBILITY = "search_visibility"
#: Per-source high-water marks of chunk versions written or removed (fencing: .mongo.chunks).
SOURCE_MARKS = "source_marks"
#: The keys of one source of one RAG (swap notes and marks are looked up by them).
SOURCE_KEYS = ("tenantId", "projectId", "ragId", "sourceRef")
#: One document per live RAG name: which generation readers use (switched in one write).
RAG_NAMES = "rag_names"
MIGRATIONS = "migrations"
MIGRATION_ITEMS = "migration_items"
#: The unique name index of schema 2 (a name had one RAG); schema 3 drops it.
LEGACY_RAG_NAME_INDEX = "tenant_project_name_uniq"

#: Fields a search stage may pre-filter on: ``filter`` fields of the vector index, ``token``
#: fields of the text index. ``gen`` lets the sweeper probe one chunk version of one source.
FILTER_FIELDS: tuple[str, ...] = ("tenantId", "projectId", "ragId", "kind", "path", "sourceRef")
#: A chunk's chunk version; the stored field keeps its old name ``gen``.
CHUNK_VERSION_FIELD = "gen"
#: A ``filter`` field of the vector index only: a hybrid query asks the cosines of the hits
#: only the text search found by their ids (:func:`~.builders.queries.build_cosine_pipeline`).
ID_FILTER_FIELD = "chunkId"
#: Atlas Search indexes at most this many characters of a ``token`` field (and a vector
#: index's string ``filter`` field) and cuts longer strings, so no filter would match them.
MAX_TOKEN_CHARS = 8181

#: Server error codes meaning "index already exists" (a concurrent creator won the race).
_ALREADY_EXISTS = frozenset({68, 85, 86})
#: Namespace already exists (a concurrent ``create_collection``).
_NAMESPACE_EXISTS = 48

#: Server error code of a write a unique index refused.
DUPLICATE_KEY = 11000

T = TypeVar("T")


def _model(keys: Sequence[str], name: str, **options: Any) -> IndexModel:
    return IndexModel([(k, ASCENDING) for k in keys], name=name, **options)


def control_index_models() -> dict[str, list[IndexModel]]:
    """B-tree indexes of the control-plane collections, by collection name."""
    return {
        "projects": [
            _model(["tenantId", "projectId"], "tenant_project_uniq", unique=True),
            _model(["status", "homeNode"], "status_home_node_idx"),
        ],
        "documents": [
            _model(["tenantId", "projectId", "path"], "tenant_project_path_uniq", unique=True),
            _model(["tenantId", "projectId", "ragDirty", "ragClaimedBy"], CLAIM_INDEX),
            _model(CLAIM_ORDER_KEYS, CLAIM_ORDER_INDEX),
            _model(["tenantId", "projectId", "indexedAt"], "tenant_project_indexed_at_idx"),
            _model(
                ["tenantId", "projectId", "path"],
                "tenant_project_attention_idx",
                partialFilterExpression={"extractionError": {"$type": "string"}},
            ),
        ],
        "rags": [
            # a name has several generations (live, shadow, retired): uniqueness of the live
            # one is the rag_names pointer's
            _model(["tenantId", "projectId", "name", "generation"], "tenant_project_name_idx"),
            _model(["embeddingDimension"], "embedding_dimension_idx"),
        ],
        RAG_NAMES: [
            _model(["tenantId", "projectId", "name"], "tenant_project_name_uniq", unique=True),
        ],
        MIGRATIONS: [
            _model(
                ["tenantId", "projectId", "ragName"],
                "one_active_migration_uniq",
                unique=True,
                partialFilterExpression={"active": True},
            ),
            _model(["tenantId", "projectId", "ragName", "createdAt"], "migration_history_idx"),
        ],
        MIGRATION_ITEMS: [
            _model(["migrationId", "documentId"], "migration_document_uniq", unique=True),
            _model(["migrationId", "state", "nextAttemptAt"], "migration_claim_idx"),
            # the claim query's equality fields then its sort (ESR): no sort per claim
            _model(["migrationId", "state", "documentId"], "migration_claim_order_idx"),
            _model(["tenantId", "projectId", "documentId"], "migration_item_document_idx"),
            _model(["migrationId", "completedAt"], "migration_activity_idx"),
        ],
        "settings": [
            _model(["tenantId", "projectId", "key"], "tenant_project_key_uniq", unique=True),
        ],
        "embedding_cache": [
            _model(["modelKey", "textHash"], "model_text_hash_uniq", unique=True),
        ],
        SWAPS: [
            _model(SOURCE_KEYS, "swap_source_idx"),
            _model(DUE_INDEX_KEYS, DUE_INDEX),
            _model(DIM_DUE_INDEX_KEYS, DIM_DUE_INDEX),
        ],
        SOURCE_MARKS: [
            _model(SOURCE_KEYS, "mark_source_uniq", unique=True),
            _model(["at"], "mark_age_idx"),
        ],
        VISIBILITY: [
            _model(["tenantId", "projectId", "ragId"], "tenant_project_rag_uniq", unique=True)
        ],
    }


def chunk_index_models() -> list[IndexModel]:
    """B-tree indexes of a ``chunks_<dim>`` collection.

    A chunk id is unique per RAG *and chunk version*: a replacement writes the new chunk version
    beside the old one (which may reuse the ids) and the old one goes later.
    """
    return [
        _model(["tenantId", "projectId", "ragId", "sourceRef", "gen"], "chunks_source_gen_idx"),
        _model(
            ["tenantId", "projectId", "ragId", "chunkId", "gen"], "chunks_id_gen_uniq", unique=True
        ),
    ]


def chunk_collection(dim: int) -> str:
    """The collection of chunks whose vectors have ``dim`` dimensions."""
    if not 1 <= dim <= 8192:
        raise StoreError(f"unsupported embedding dimension {dim} (Atlas indexes 1 to 8192)")
    return f"chunks_{dim}"


def dimension_of(collection_name: str) -> int | None:
    """``chunks_384`` → 384; any other name → None."""
    prefix, _, rest = collection_name.partition("_")
    return int(rest) if prefix == "chunks" and rest.isdigit() else None


def is_sharded(database: Any) -> bool:
    """Is this a sharded cluster (are we talking to mongos)?"""
    try:
        return bool(database.command("hello").get("msg") == "isdbgrid")
    except (PyMongoError, NotImplementedError):  # mongomock has no ``hello``
        return False


def shard_command(database: Any, collection: str) -> str:
    """The ``mongosh`` command that shards a chunk collection (shown when we may not)."""
    key = ", ".join(f"{k}: {v}" for k, v in CHUNK_SHARD_KEY.items())
    return f'sh.shardCollection("{database.name}.{collection}", {{ {key} }})'


def shard_chunks(database: Any, name: str) -> IndexStatus:
    """Shard the chunk collection ``name`` on :data:`CHUNK_SHARD_KEY` (a collection sharded
    already is left alone); without the privilege, say which command to run. Control
    collections stay unsharded, on the database's primary shard (docs/stores.md)."""
    command = shard_command(database, name)
    try:
        database.client.admin.command(
            "shardCollection", f"{database.name}.{name}", key=dict(CHUNK_SHARD_KEY)
        )
    except OperationFailure as exc:
        if exc.code == 13:  # Unauthorized
            log.warning("cannot shard %s (%s); run as a cluster admin: %s", name, exc, command)
            why = f"not sharded (no shardCollection privilege); run as a cluster admin: {command}"
            return IndexStatus(name, "shard key", "shard", "NOT_SHARDED", False, why)
        if exc.code != 20 and "already sharded" not in str(exc).lower():
            raise
    log.info("sharded %s: %s", name, command)
    return IndexStatus(name, "shard key", "shard", "SHARDED", True, command)


def create_btree_indexes(collection: Any, models: Iterable[IndexModel]) -> None:
    """Create B-tree indexes (idempotent: an existing index of that name is left alone)."""
    # One create_index per model rather than create_indexes: mongomock's create_indexes
    # drops partialFilterExpression. Runs in init and on open only.
    for model in models:
        options = dict(model.document)
        keys = list(options.pop("key").items())
        collection.create_index(keys, **options)


def ensure_control_indexes(database: Any) -> None:
    for collection, models in control_index_models().items():
        create_btree_indexes(database[collection], models)


def ensure_collection(database: Any, name: str) -> None:
    """Create a collection if missing (a search index needs an existing collection)."""
    if name in database.list_collection_names():
        return
    try:
        database.create_collection(name)
    except OperationFailure as exc:  # created by a concurrent process meanwhile
        if exc.code != _NAMESPACE_EXISTS:
            raise
    except Exception as exc:  # mongomock raises CollectionInvalid
        if "already exists" not in str(exc):
            raise


# -- unique-index refusals ------------------------------------------------------------------


def write_errors(exc: Exception) -> list[Mapping[str, Any]]:
    """The per-document errors of a failed bulk write (none for a single write's error)."""
    return list(exc.details.get("writeErrors", [])) if isinstance(exc, BulkWriteError) else []


def all_duplicate_keys(errors: Iterable[Mapping[str, Any]]) -> bool:
    """Did a unique index refuse every one of these writes (nothing else went wrong)?"""
    return all(e.get("code") == DUPLICATE_KEY for e in errors)


def upsert_racing(upsert: Callable[[], T]) -> T:
    """Run an upsert; run it once more when a concurrent first upsert of the same key won
    the race (the loser's insert hits the unique index; run again, it updates instead)."""
    try:
        return upsert()
    except DuplicateKeyError:
        return upsert()


def next_sequence(counters: Any) -> int:
    """The next number of the store's one increasing sequence: chunk versions and claim
    tokens both come from it, so a claim's token exceeds every chunk version written before."""
    found = upsert_racing(
        lambda: counters.find_one_and_update(
            {"_id": "generation"},  # the stored counter keeps its old name
            {"$inc": {"seq": 1}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
    )
    return int(found["seq"])


def claim_each(collection: Any, flt: Any, update: Any, sort: Any, n: int) -> list[Any]:
    """Up to ``n`` documents claimed one ``find_one_and_update`` each, in ``sort`` order and
    as updated; fewer when ``flt`` matches no more."""
    after = ReturnDocument.AFTER
    claim = collection.find_one_and_update
    tries = (claim(flt, update, sort=sort, return_document=after) for _ in range(n))
    return list(itertools.takewhile(lambda found: found is not None, tries))


# -- Atlas Search index definitions ------------------------------------------------------------


def vector_index_definition(dim: int) -> dict[str, Any]:
    """The ``vectorSearch`` index of ``chunks_<dim>``: cosine vectors plus filter fields."""
    chunk_collection(dim)  # validates the dimension
    fields: list[dict[str, Any]] = [
        {"type": "vector", "path": VECTOR_FIELD, "numDimensions": dim, "similarity": "cosine"}
    ]
    filters = (*FILTER_FIELDS, CHUNK_VERSION_FIELD, ID_FILTER_FIELD)
    fields += [{"type": "filter", "path": name} for name in filters]
    return {"fields": fields}


def text_index_definition() -> dict[str, Any]:
    """The ``search`` index of a chunk collection: BM25 over the text with our own analyzer
    (the SQLite store's terms: :mod:`.mongo.builders.analysis`), filter fields as ``token``."""
    text = {"type": "string", "analyzer": ANALYZER_NAME, "searchAnalyzer": ANALYZER_NAME}
    fields: dict[str, Any] = {TEXT_FIELD: text}
    fields.update({name: {"type": "token"} for name in FILTER_FIELDS})
    fields[CHUNK_VERSION_FIELD] = {"type": "number"}
    return {"analyzers": [analyzer_definition()], "mappings": {"dynamic": False, "fields": fields}}


def search_index_models(dim: int) -> list[SearchIndexModel]:
    return [
        SearchIndexModel(
            definition=vector_index_definition(dim), name=VECTOR_INDEX, type="vectorSearch"
        ),
        SearchIndexModel(definition=text_index_definition(), name=TEXT_INDEX, type="search"),
    ]


def _vector_fields(definition: Any) -> dict[tuple[Any, Any], tuple[Any, ...]]:
    fields = definition.get("fields", []) if isinstance(definition, Mapping) else []
    return {
        (f.get("type"), f.get("path")): tuple(f.get(k) for k in ("numDimensions", "similarity"))
        for f in fields
        if isinstance(f, Mapping)
    }


#: What of the text field is ours to compare and write (any other field: its type only).
_TEXT_FIELD_KEYS = ("type", "analyzer", "searchAnalyzer")


def _text_fields(definition: Any) -> dict[str, Any]:
    mappings = definition.get("mappings", {}) if isinstance(definition, Mapping) else {}
    fields = mappings.get("fields", {}) if isinstance(mappings, Mapping) else {}
    return {
        k: tuple(v.get(key) for key in _TEXT_FIELD_KEYS) if k == TEXT_FIELD else v.get("type")
        for k, v in fields.items()
        if isinstance(v, Mapping)
    }


def _our_analyzer(definition: Any) -> dict[str, Any] | None:
    """The analyzer named :data:`ANALYZER_NAME` in a definition, as compared (an empty
    ``charFilters`` the server may leave out counts as given)."""
    analyzers = definition.get("analyzers", []) if isinstance(definition, Mapping) else []
    for found in analyzers if isinstance(analyzers, list) else []:
        if isinstance(found, Mapping) and found.get("name") == ANALYZER_NAME:
            return {"charFilters": [], **found}
    return None


def definition_covers(existing: Any, wanted: Mapping[str, Any]) -> bool:
    """Does an index definition already hold every field of ``wanted``?

    Compared field by field (vector: type, path, dimensions, similarity; text: path and
    type, and for the chunk text its analyzers and the analyzer we own), so options the
    server adds or an operator tuned (quantization, analyzers of other fields…) never trigger
    a rebuild on every start, while a change of our analyzer reaches existing clusters.
    """
    if "mappings" in wanted:
        have = _text_fields(existing)
        if _our_analyzer(existing) != _our_analyzer(wanted):
            return False
        return all(have.get(k) == t for k, t in _text_fields(wanted).items())
    have_v = _vector_fields(existing)
    return all(have_v.get(k) == v for k, v in _vector_fields(wanted).items())


def merge_definition(existing: Any, wanted: Mapping[str, Any]) -> dict[str, Any]:
    """``existing`` plus what ``wanted`` adds; a field of ``wanted`` replaces a field on the
    same path that does not match (another dimension, similarity or type)."""
    merged = dict(existing) if isinstance(existing, Mapping) else {}
    if "mappings" in wanted:
        mappings = dict(merged.get("mappings") or {})
        fields = dict(mappings.get("fields") or {})
        have, need = _text_fields(existing), _text_fields(wanted)
        for path, spec in wanted["mappings"]["fields"].items():
            if have.get(path) != need[path]:
                fields[path] = dict(spec)
        mappings["fields"] = fields
        mappings.setdefault("dynamic", False)
        merged["mappings"] = mappings
        others = [
            dict(a)
            for a in merged.get("analyzers") or []
            if isinstance(a, Mapping) and a.get("name") != ANALYZER_NAME
        ]
        merged["analyzers"] = [*others, *(dict(a) for a in wanted.get("analyzers", []))]
        return merged
    have_vectors = _vector_fields(existing)
    wanted_vectors = _vector_fields(wanted)
    replaced = {key for key, spec in wanted_vectors.items() if have_vectors.get(key) != spec}
    old = [dict(f) for f in merged.get("fields", []) if isinstance(f, Mapping)]
    kept = [f for f in old if (f.get("type"), f.get("path")) not in replaced]
    added = [dict(f) for f in wanted["fields"] if (f["type"], f["path"]) in replaced]
    merged["fields"] = kept + added
    return merged


# -- Atlas Search index management (I/O) ------------------------------------------------------


#: NamespaceNotFound: listing the search indexes of a collection that does not exist yet.
_NO_NAMESPACE = 26


def find_search_index(collection: Any, name: str) -> Mapping[str, Any] | None:
    """The ``$listSearchIndexes`` entry of ``name``; None when it (or the collection) is
    missing."""
    try:
        for info in collection.list_search_indexes(name):
            if info.get("name") == name:
                return dict(info)
    except OperationFailure as exc:
        if exc.code != _NO_NAMESPACE:
            raise
    return None


def lagging_node(info: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(status, why)`` of the first search process (``statusDetail``) that does not serve the
    latest definition version READY yet; None when all do (or the server lists none)."""
    latest = (info.get("latestDefinitionVersion") or {}).get("version")
    for node in info.get("statusDetail") or []:
        host = node.get("hostname") or "a search node"
        status = str(node.get("status", "UNKNOWN"))
        if status != "READY" or not node.get("queryable", True):
            return status, f"{host} is {status}"
        served = ((node.get("mainIndex") or {}).get("definitionVersion") or {}).get("version")
        if node.get("stagedIndex") or (latest is not None and served not in (None, latest)):
            return "BUILDING", f"{host} serves definition version {served}, not {latest} yet"
    return None


def is_ready(info: Mapping[str, Any] | None) -> bool:
    """READY, not merely queryable, on every search process: after a definition update Atlas
    keeps serving the old definition (``queryable`` true) until the rebuild ends, and the
    top-level status may say READY while a search node still builds (``statusDetail``)."""
    return bool(
        info
        and info.get("status") == "READY"
        and info.get("queryable", True)
        and lagging_node(info) is None
    )


def _too_many(exc: OperationFailure) -> bool:
    return "maximum number of fts indexes" in str(exc).lower()


def ensure_search_index(collection: Any, model: SearchIndexModel) -> str:
    """Create the index unless it exists; update it when its definition lacks what we need.

    Returns ``created``, ``updated`` or ``unchanged``. A concurrent creator winning the race
    is not an error; a tier's index limit is a :class:`StoreError` that says what to do.
    """
    spec = model.document
    name, wanted = spec["name"], spec["definition"]
    info = find_search_index(collection, name)
    if info is None:
        try:
            collection.create_search_index(model)
        except OperationFailure as exc:
            if _too_many(exc):
                raise StoreError(
                    f"Atlas refused search index {name!r} on {collection.name!r}: the cluster "
                    "tier's search-index limit is reached (Free (M0): 3, Flex: 10 per "
                    "cluster, vector and text alike; each embedding dimension needs 2). Drop "
                    "the indexes of dimensions no RAG uses (`vancetope-rag init --prune`) or "
                    "others the cluster holds, or move to a dedicated tier (M10+: no fixed "
                    "limit)"
                ) from exc
            if exc.code not in _ALREADY_EXISTS and "already exists" not in str(exc).lower():
                raise
            return "unchanged"
        log.info("created Atlas search index %s on %s", name, collection.name)
        return "created"
    existing = info.get("latestDefinition") or info.get("definition") or {}
    if definition_covers(existing, wanted):
        return "unchanged"
    collection.update_search_index(name, merge_definition(existing, wanted))
    log.info("updated Atlas search index %s on %s", name, collection.name)
    return "updated"


def index_status(collection: Any, name: str, kind: str) -> IndexStatus:
    info = find_search_index(collection, name)
    if info is None:
        return IndexStatus(collection.name, name, kind, "MISSING", False)
    status = str(info.get("status", "UNKNOWN"))
    detail = str(info.get("message") or "")
    lagging = lagging_node(info) if status == "READY" else None
    if lagging is not None:  # READY on top, not yet everywhere
        status, detail = lagging
    return IndexStatus(collection.name, name, kind, status, is_ready(info), detail)


def search_index_statuses(collection: Any) -> list[IndexStatus]:
    return [
        index_status(collection, VECTOR_INDEX, "vectorSearch"),
        index_status(collection, TEXT_INDEX, "search"),
    ]


def wait_until_ready(
    collections: Sequence[Any],
    *,
    timeout_s: float = 600.0,
    poll_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> list[IndexStatus]:
    """Poll until every search index of ``collections`` is READY on every search process.

    Raises:
        StoreError: an index failed, went STALE or vanished (at once, no waiting out the
            timeout), or not everything was READY in time.
    """
    deadline = monotonic() + timeout_s
    while True:
        statuses = [s for c in collections for s in search_index_statuses(c)]
        for s in statuses:
            if s.status == "STALE":
                raise StoreError(
                    f"Atlas search index {s.name!r} on {s.collection!r} is STALE"
                    f"{': ' + s.detail if s.detail else ''}: it answers queries but no longer "
                    "follows the writes (Atlas stops replicating to an index, e.g. when the "
                    "disk fills or the oplog rolled past it); resolve the cause in the Atlas "
                    "UI (it rebuilds the index) and run init --wait again"
                )
            if s.status in ("FAILED", "MISSING", "DOES_NOT_EXIST"):
                raise StoreError(
                    f"Atlas search index {s.name!r} on {s.collection!r} is {s.status}"
                    f"{': ' + s.detail if s.detail else ''}; check it in the Atlas UI, drop it "
                    "if it failed, and run init again"
                )
        if all(s.ready for s in statuses):
            return statuses
        if monotonic() >= deadline:
            waiting = ", ".join(
                f"{s.collection}.{s.name} ({s.status})" for s in statuses if not s.ready
            )
            raise StoreError(
                f"Atlas search indexes not READY after {timeout_s:.0f}s: {waiting}; the "
                "cluster may still be building them — run init --wait again later"
            )
        sleep(poll_s)
