"""Index management of the MongoDB store: B-tree indexes and Atlas Vector Search indexes.

The definitions are pure data (tested without a server); the functions that talk to the server
are thin: create, wait until queryable. What a unique index's refusal means to the adapters
(a duplicate key, an upsert race) is read here too.

Vectors of each dimension live in their own field (``embedding_<dim>``, see
:func:`vector_path`) with their own ``vectorSearch`` index (``vancetope_rag_vectors_<dim>``):
an Atlas vector index has one fixed ``numDimensions``, so two embedding models of different
sizes never share a vector field.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pymongo import ASCENDING, IndexModel
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure
from pymongo.operations import SearchIndexModel

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

#: Name of the claim index the spec asks for (§3.2).
CLAIM_INDEX = "tenant_project_rag_claim_idx"

#: Fields a ``$vectorSearch`` may pre-filter on (indexed as ``filter`` in every vector index).
VECTOR_FILTER_FIELDS: tuple[str, ...] = (
    "tenantId",
    "projectId",
    "ragId",
    "kind",
    "path",
    "sourceRef",
)

#: Server error codes meaning "index already exists" (a concurrent creator won the race).
_ALREADY_EXISTS = frozenset({68, 85, 86})

#: Server error code of a write a unique index refused.
DUPLICATE_KEY = 11000

T = TypeVar("T")


def _model(keys: list[str], name: str, **options: Any) -> IndexModel:
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
        ],
        "rags": [
            _model(["tenantId", "projectId", "name"], "tenant_project_name_uniq", unique=True),
        ],
        "settings": [
            _model(["tenantId", "projectId", "key"], "tenant_project_key_uniq", unique=True),
        ],
        "embedding_cache": [
            _model(["modelKey", "textHash"], "model_text_hash_uniq", unique=True),
        ],
    }


def chunk_index_models() -> list[IndexModel]:
    """B-tree indexes of ``chunks``.

    Chunk ids are unique per RAG among *live* chunks only: ``replace_source`` first writes the
    new chunks as staged (``live: false``, outside the unique index, so they may reuse the old
    ids), removes the old ones, then flips the new ones live.
    """
    return [
        _model(["tenantId", "projectId", "ragId", "sourceRef", "seq"], "chunks_scope_source_idx"),
        _model(
            ["tenantId", "projectId", "ragId", "chunkId"],
            "chunks_live_id_uniq",
            unique=True,
            partialFilterExpression={"live": True},
        ),
    ]


def _create(collection: Any, models: list[IndexModel]) -> None:
    # One create_index per model rather than create_indexes: mongomock's create_indexes
    # drops partialFilterExpression. Runs once per open, so the extra round trips are moot.
    for model in models:
        options = dict(model.document)
        keys = list(options.pop("key").items())
        collection.create_index(keys, **options)


def ensure_indexes(database: Any) -> None:
    """Create every B-tree index (idempotent: existing indexes are left as they are)."""
    for collection, models in control_index_models().items():
        _create(database[collection], models)
    _create(database["chunks"], chunk_index_models())


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


# -- Atlas Vector Search ---------------------------------------------------------------------


def vector_path(dim: int) -> str:
    """The field holding vectors of ``dim`` floats."""
    return f"embedding_{dim}"


def vector_index_name(dim: int) -> str:
    return f"vancetope_rag_vectors_{dim}"


def vector_index_definition(dim: int) -> dict[str, Any]:
    """The ``vectorSearch`` index of one dimension: cosine vectors plus the filter fields."""
    if not 1 <= dim <= 8192:
        raise StoreError(f"unsupported embedding dimension {dim}")
    fields: list[dict[str, Any]] = [
        {"type": "vector", "path": vector_path(dim), "numDimensions": dim, "similarity": "cosine"}
    ]
    fields += [{"type": "filter", "path": name} for name in VECTOR_FILTER_FIELDS]
    return {"fields": fields}


def vector_index_model(dim: int) -> SearchIndexModel:
    return SearchIndexModel(
        definition=vector_index_definition(dim), name=vector_index_name(dim), type="vectorSearch"
    )


def _find_search_index(collection: Any, name: str) -> Mapping[str, Any] | None:
    for info in collection.list_search_indexes(name):
        if info.get("name") == name:
            return dict(info)
    return None


def _field_key(field: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(field.get(k) for k in ("type", "path", "numDimensions", "similarity"))


def _fields(definition: Any) -> list[Mapping[str, Any]]:
    fields = definition.get("fields", []) if isinstance(definition, Mapping) else []
    return [f for f in fields if isinstance(f, Mapping)]


def definition_covers(existing: Any, wanted: Mapping[str, Any]) -> bool:
    """Does an index definition already hold every field of ``wanted``?

    Compared field by field (type, path, dimensions, similarity), so options the server adds
    or an operator tuned (quantization…) never trigger a rebuild on every start.
    """
    have = {_field_key(f) for f in _fields(existing)}
    return all(_field_key(f) in have for f in _fields(wanted))


def merge_definition(existing: Any, wanted: Mapping[str, Any]) -> dict[str, Any]:
    """``existing`` plus the fields of ``wanted`` it lacks; an existing field on the same path
    that does not match (another dimension or similarity) is replaced."""
    merged = dict(existing) if isinstance(existing, Mapping) else {}
    have = {_field_key(f) for f in _fields(existing)}
    missing = [dict(f) for f in _fields(wanted) if _field_key(f) not in have]
    replaced = {(f["type"], f["path"]) for f in missing}
    kept = [dict(f) for f in _fields(existing) if (f.get("type"), f.get("path")) not in replaced]
    merged["fields"] = kept + missing
    return merged


def is_queryable(info: Mapping[str, Any] | None) -> bool:
    """An index entry of ``$listSearchIndexes`` that ``$vectorSearch`` can use now."""
    return bool(info and info.get("queryable"))


def create_vector_search_index(collection: Any, dim: int) -> bool:
    """Create the index of ``dim`` unless it exists; update it when its definition differs.

    Returns True when this call created or updated the index. A concurrent creator winning the
    race is not an error.
    """
    name = vector_index_name(dim)
    wanted = vector_index_definition(dim)
    info = _find_search_index(collection, name)
    if info is None:
        try:
            collection.create_search_index(vector_index_model(dim))
        except OperationFailure as exc:
            if exc.code not in _ALREADY_EXISTS and "already exists" not in str(exc).lower():
                raise
            return False
        log.info("created Atlas vector search index %s on %s", name, collection.name)
        return True
    existing = info.get("latestDefinition") or info.get("definition") or {}
    if not definition_covers(existing, wanted):
        collection.update_search_index(name, merge_definition(existing, wanted))
        log.info("updated Atlas vector search index %s on %s", name, collection.name)
        return True
    return False


def wait_until_queryable(
    collection: Any,
    dim: int,
    *,
    timeout_s: float = 300.0,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Poll ``list_search_indexes`` until the index of ``dim`` is queryable.

    Raises:
        StoreError: the index failed, vanished, or was not queryable within ``timeout_s``.
    """
    name = vector_index_name(dim)
    deadline = monotonic() + timeout_s
    while True:
        info = _find_search_index(collection, name)
        if is_queryable(info):
            return
        status = str(info.get("status", "")) if info else "MISSING"
        if status == "FAILED":
            raise StoreError(
                f"Atlas vector search index {name!r} on {collection.name!r} failed to build: "
                f"{info.get('message', 'no reason given') if info else ''}; check it in the "
                "Atlas UI, drop it and let vancetope-rag create it again"
            )
        if monotonic() >= deadline:
            raise StoreError(
                f"Atlas vector search index {name!r} on {collection.name!r} is not queryable "
                f"after {timeout_s:.0f}s (status {status}); the cluster may still be building "
                "it — retry later or raise the index timeout"
            )
        sleep(poll_s)


def ensure_vector_search_index(
    collection: Any,
    dim: int,
    *,
    wait: bool = True,
    timeout_s: float = 300.0,
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Create the index of ``dim`` if needed and (``wait``) block until it is queryable."""
    create_vector_search_index(collection, dim)
    if wait:
        wait_until_queryable(
            collection, dim, timeout_s=timeout_s, poll_s=poll_s, sleep=sleep, monotonic=monotonic
        )
