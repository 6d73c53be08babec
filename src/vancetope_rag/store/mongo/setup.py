"""Schema versions, ``init`` and the schema upgrade from the single ``chunks`` collection.

Schema versions of the MongoDB store:

1. One ``chunks`` collection for every dimension: vectors as arrays of doubles in
   ``embedding_<dim>``, a write sequence ``seq``, staged copies flagged ``live: false``, one
   vector search index per dimension on that collection.
2. One ``chunks_<dim>`` collection per dimension: binary float32 ``embedding``, chunk
   versions ``gen``, a vector and a text search index per collection (see
   :mod:`.mongo.indexes`).
3. Generations of a RAG name (rebuilds without downtime): ``rags`` loses its unique name
   index, ``rag_names`` points at the live generation of each name (see
   :mod:`.mongo.catalog`), ``migrations`` and ``migration_items`` record rebuilds. Done on
   open (:func:`~.mongo.catalog.upgrade_catalog`): every existing RAG gets its pointer.
4. Documents carry the metadata the host saved with them (``metadata``: JSON object text, as
   in the SQL stores, since a host's keys may hold ``.`` or ``$``, which BSON field names may
   not). Nothing is rewritten: a document written before has no such field and reads as
   ``{}``; the version keeps an older package, which would drop it, from opening the store.
5. Documents carry ``importOrigin`` (the import a document came from; its sync prunes by
   it) and ``extractionError`` (why the last read of its file failed), absent on older
   documents (read as none), and the partial ``tenant_project_attention_idx`` on
   ``extractionError`` (created on open, like every control index).

6. RAG entries pin a model profile (``embeddingProfile``; absent on older entries).
7. The ``workers`` collection: one heartbeat per indexer worker (``_id``: the worker id,
   ``nodeId``, ``version``, ``intervalS``, ``startedAt``, ``lastTick``, ``stoppedAt``),
   written by the workers themselves; nothing older is rewritten.

A ``rags`` document may hold ``calibration`` (the ``minScore: auto`` noise floor, see
:mod:`vancetope_rag.domain.retrieval.calibration`); one without it reads as not calibrated, so the
field needs no schema upgrade, and a store an older release opens keeps working.

Opening a version-1 store that holds chunks does not strand them: the control plane works,
chunk operations fail with a :class:`StoreError` that says to run ``init``, and ``init``
(:func:`initialize`) copies every chunk into its ``chunks_<dim>`` collection (``seq`` becomes
``gen``, so a half-finished old swap resolves to its newer side), raises the sequence counter
(stored as ``generation``) past every ``seq``, then drops the old collection. Copies keep their
``_id``, so an interrupted schema upgrade is simply run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from pymongo.errors import BulkWriteError

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders.queries import decode_vector, encode_vector
from vancetope_rag.store.mongo.catalog import upgrade_catalog
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.port import StoreSetup
from vancetope_rag.store.port.shared import check_schema_version

log = get_logger(__name__)

#: Version of the document shapes in the database; a newer one is refused on open.
#: 6: RAG entries pin a model profile (``embeddingProfile``; absent on older entries).
#: 7: the ``workers`` collection holds the indexer workers' heartbeats (:mod:`.heartbeats`).
SCHEMA_VERSION = 7
SCHEMA_ID = "vancetope_rag"
LEGACY_CHUNKS = "chunks"
_BATCH = 500


def schema_version(database: Any) -> int:
    found = database["schema"].find_one({"_id": SCHEMA_ID})
    return int(found["version"]) if found else 0


def set_schema_version(database: Any) -> None:
    database["schema"].update_one(
        {"_id": SCHEMA_ID}, {"$max": {"version": SCHEMA_VERSION}}, upsert=True
    )


def has_legacy_chunks(database: Any) -> bool:
    if LEGACY_CHUNKS not in database.list_collection_names():
        return False
    return database[LEGACY_CHUNKS].find_one({}, {"_id": 1}) is not None


def open_schema(database: Any, shown_uri: str, chunks: MongoChunkStore) -> None:
    """Check the schema on open: refuse a newer one, note chunks waiting for a schema upgrade."""
    version = schema_version(database)
    check_schema_version(shown_uri, version, SCHEMA_VERSION)
    if version < 3:
        upgrade_catalog(database)  # before the indexes: it drops one they would conflict with
    ix.ensure_control_indexes(database)
    if version < SCHEMA_VERSION:
        if has_legacy_chunks(database):
            chunks.legacy_chunks = True
            log.warning(
                "store %s holds chunks of schema version %s; run `vancetope-rag --store … init` "
                "to upgrade them",
                shown_uri,
                version,
            )
        else:
            set_schema_version(database)


def upgraded_document(doc: dict[str, Any]) -> dict[str, Any] | None:
    """A version-1 chunk as a version-2 one (None when its vector is unreadable)."""
    dim = int(doc["dim"])
    vector = decode_vector(doc.get(f"embedding_{dim}"))
    if vector is None or vector.shape != (dim,):
        return None
    return {
        "_id": doc["_id"],
        **{
            k: doc.get(k)
            for k in (
                "tenantId",
                "projectId",
                "ragId",
                "chunkId",
                "sourceRef",
                "kind",
                "path",
                "text",
                "metadata",
                "ord",
            )
        },
        "gen": int(doc.get("seq", 0)),
        ix.VECTOR_FIELD: encode_vector(vector),
    }


def upgrade_legacy_chunks(database: Any) -> dict[int, int]:
    """Move every version-1 chunk to its ``chunks_<dim>`` collection; chunks moved per dim."""
    legacy = database[LEGACY_CHUNKS]
    moved: dict[int, int] = {}
    highest = 0
    batches: dict[int, list[dict[str, Any]]] = {}

    def flush(dim: int) -> None:
        batch = batches.pop(dim, [])
        if not batch:
            return
        try:
            database[ix.chunk_collection(dim)].insert_many(batch, ordered=False)
        except BulkWriteError as exc:  # copied by an interrupted earlier run: fine
            if not ix.all_duplicate_keys(ix.write_errors(exc)):
                raise
        moved[dim] = moved.get(dim, 0) + len(batch)

    for doc in legacy.find({}):
        new = upgraded_document(doc)
        if new is None:
            log.warning("skipped chunk %s: its vector cannot be read", doc.get("_id"))
            continue
        dim = int(doc["dim"])
        if dim not in moved and dim not in batches:
            ix.ensure_collection(database, ix.chunk_collection(dim))
            ix.create_btree_indexes(database[ix.chunk_collection(dim)], ix.chunk_index_models())
        highest = max(highest, new["gen"])
        batches.setdefault(dim, []).append(new)
        if len(batches[dim]) >= _BATCH:
            flush(dim)
    for dim in list(batches):
        flush(dim)
    database["counters"].update_one({"_id": "generation"}, {"$max": {"seq": highest}}, upsert=True)
    database.drop_collection(LEGACY_CHUNKS)  # its search indexes go with it
    log.info("upgraded chunks to per-dimension collections: %s", moved)
    return moved


def rag_dimensions(database: Any) -> set[int]:
    """Every embedding dimension a RAG of the catalog uses (any generation: live, a
    rebuild's shadow, a retired one still serving readers)."""
    return {int(d) for d in database["rags"].distinct("embeddingDimension") if d}


def collection_dimensions(database: Any) -> set[int]:
    """The dimensions of the existing chunk collections."""
    return {d for n in database.list_collection_names() if (d := ix.dimension_of(n))}


def catalog_dimensions(database: Any) -> set[int]:
    """Every embedding dimension of the RAG catalog and of existing chunk collections."""
    return rag_dimensions(database) | collection_dimensions(database)


def prune_search_indexes(chunks: MongoChunkStore, dims: Iterable[int]) -> list[IndexStatus]:
    """Drop the search indexes of the chunk collections of ``dims`` (dimensions no RAG
    uses): on Free and Flex clusters every one counts against the tier's few. The
    collections stay (a RAG of that dimension made later gets its indexes again)."""
    dropped: list[IndexStatus] = []
    for dim in sorted(dims):
        collection = chunks.search.collection(dim)
        for name, kind in ((ix.VECTOR_INDEX, "vectorSearch"), (ix.TEXT_INDEX, "search")):
            if ix.find_search_index(collection, name) is None:
                continue
            collection.drop_search_index(name)
            log.info("dropped Atlas search index %s on %s: no RAG uses it", name, collection.name)
            why = f"no RAG uses dimension {dim}: dropped (init --prune)"
            dropped.append(IndexStatus(collection.name, name, kind, "DROPPED", True, why))
        chunks.search.forget(dim)
    return dropped


def shard_chunk_collections(database: Any, dims: Iterable[int]) -> list[IndexStatus]:
    """On a sharded cluster, each chunk collection's shard (:func:`~.indexes.shard_chunks`)."""
    if not ix.is_sharded(database):
        return []
    return [ix.shard_chunks(database, ix.chunk_collection(dim)) for dim in sorted(dims)]


def initialize(
    database: Any,
    chunks: MongoChunkStore,
    setup: StoreSetup,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> list[IndexStatus]:
    """Collections, B-tree and search indexes for every dimension; upgrade version 1; with
    ``wait``, block until every search index is READY; with ``prune``, drop the search
    indexes of dimensions no RAG uses (nor ``dimensions`` names) instead of keeping them
    up to date. Idempotent."""
    ix.ensure_control_indexes(database)
    if has_legacy_chunks(database):
        upgrade_legacy_chunks(database)
    chunks.legacy_chunks = False
    set_schema_version(database)
    wanted = rag_dimensions(database) | setup.dimensions
    unused = collection_dimensions(database) - wanted
    dims = sorted(wanted if setup.prune else wanted | unused)
    for dim in dims:
        chunks.search.forget(dim)
        chunks.prepare_dimension(dim)
    collections = [chunks.search.collection(dim) for dim in dims]
    sharding = shard_chunk_collections(database, dims)
    if not chunks.uses_atlas():
        return sharding + [
            IndexStatus(
                c.name,
                "-",
                "exact",
                "NO_SEARCH",
                True,
                "no Atlas Search on this server: queries rank vectors exactly",
            )
            for c in collections
        ]
    dropped = prune_search_indexes(chunks, unused) if setup.prune else []
    if setup.wait:
        return (
            sharding
            + dropped
            + ix.wait_until_ready(
                collections, timeout_s=setup.timeout_s, sleep=sleep, monotonic=monotonic
            )
        )
    return sharding + dropped + [s for c in collections for s in ix.search_index_statuses(c)]
