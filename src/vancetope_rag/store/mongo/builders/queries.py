"""Pure builders for the MongoDB chunk store: filters, search pipelines, chunk versions, codecs.

No I/O here; :mod:`vancetope_rag.store.mongo.chunks` sends what these functions build and
passes what the server answers back through them. Everything is tested without a database.

Chunk versions: every chunk carries ``gen``, the chunk version of its source it was written in
(:mod:`.mongo.chunks` explains the swap). A search answer may hold two chunk versions of a
source while the newer one is becoming visible; :func:`newest_chunk_version` keeps, per source,
only the newest chunk version *among the rows the search returned* and one row per chunk id.

Vectors are stored as BSON binary vectors (float32, :func:`encode_vector`); stores written by
earlier versions hold arrays of doubles, and :func:`decode_vector` reads both.

Scores: Atlas reports cosine similarity as ``(1 + cos) / 2``; :func:`atlas_score_to_cosine`
turns it back into the cosine similarity the port (and the SQLite adapter) returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from bson.binary import Binary, BinaryVectorDtype

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store.mongo.errors import check_bson_size
from vancetope_rag.store.mongo.indexes import (
    ID_FILTER_FIELD,
    MAX_TOKEN_CHARS,
    VECTOR_FIELD,
    VECTOR_INDEX,
)
from vancetope_rag.store.port.shared import checked_vector, foreign_chunk_error, iter_filter
from vancetope_rag.store.port.types import ChunkFilter, RagScope

#: Atlas caps ``numCandidates`` (and so ``limit``) at 10,000.
MAX_NUM_CANDIDATES = 10_000
#: Atlas advises 10-20× ``limit`` candidates for a good ANN recall.
CANDIDATE_FACTOR = 20
#: Exact (ENN) search when a scope holds at most this many chunks…
EXACT_MAX_CHUNKS = 10_000
#: …or at most this share of its collection, up to :data:`EXACT_MAX_SELECTIVE` chunks (Atlas
#: recommends ENN for selective pre-filters, where ANN's recall drops). The cap is a setting
#: (``VANCETOPE_RAG_MONGO_EXACT_MAX_CHUNKS``): an exact search reads every vector of the scope
#: on the search node, and 100,000 of them per query took mongot's CPU from every other query.
EXACT_MAX_SHARE = 0.05
EXACT_MAX_SELECTIVE = 20_000

#: Fields a query returns besides the vector.
HIT_FIELDS = (
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
)

_FLOAT32_VECTOR_TAG = 0x27  # BinaryVectorDtype.FLOAT32, the first byte of such a vector


# -- filters ---------------------------------------------------------------------------------


def scope_match(scope: RagScope) -> dict[str, Any]:
    """``find`` filter of one RAG's chunks."""
    return {"tenantId": scope.tenant_id, "projectId": scope.project_id, "ragId": scope.rag_id}


def source_refs_pipeline(scope: RagScope) -> list[dict[str, Any]]:
    """The distinct source refs of one RAG as rows ``{_id: ref}``: a cursor, not one reply
    document (``distinct`` fails past 16 MB, about 350k refs), walking the scope's index."""
    return [
        {"$match": scope_match(scope)},
        {"$group": {"_id": "$sourceRef"}},
    ]


def translate_filters(filters: ChunkFilter | None) -> dict[str, Any]:
    """A :data:`ChunkFilter` as an MQL filter valid in both ``find`` and ``$vectorSearch``.

    ``{"kind": "summary", "!path": ["a.md", "b.md"]}`` →
    ``{"$and": [{"kind": {"$eq": "summary"}}, {"path": {"$nin": ["a.md", "b.md"]}}]}``.
    Unknown keys raise :class:`InvalidInputError`.
    """
    clauses: list[dict[str, Any]] = []
    for key, negated, values in iter_filter(filters):
        if len(values) == 1:
            clauses.append({key: {"$ne" if negated else "$eq": values[0]}})
        else:
            clauses.append({key: {"$nin" if negated else "$in": values}})
    if not clauses:
        return {}
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def chunk_match(
    scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
) -> dict[str, Any]:
    """``find`` filter of a RAG's chunks narrowed by chunk ids and a ChunkFilter."""
    flt = {**scope_match(scope), **translate_filters(filters)}
    if chunk_ids is not None:
        flt["chunkId"] = {"$in": list(chunk_ids)}
    return flt


def source_part(filters: ChunkFilter | None) -> dict[str, Any]:
    """The ``sourceRef`` conditions of a filter alone: safe to apply before the newest
    chunk version of each source is found (the other keys are not — see :func:`count_pipeline`)."""
    return dict(
        translate_filters(
            {k: v for k, v in (filters or {}).items() if k.lstrip("!") == "sourceRef"}
        )
    )


def filter_expression(filters: ChunkFilter | None) -> dict[str, Any]:
    """A ChunkFilter as an aggregation expression (true when a chunk matches)."""
    terms: list[dict[str, Any]] = []
    for key, negated, values in iter_filter(filters):
        test: dict[str, Any] = {"$in": [f"${key}", values]}
        # {$eq: [test, false]} rather than $not: the same on a server, and mongomock's $not
        # expression is broken
        terms.append({"$eq": [test, False]} if negated else test)
    return {"$and": terms} if terms else {"$literal": True}


def vector_search_filter(scope: RagScope, filters: ChunkFilter | None) -> dict[str, Any]:
    """The ``$vectorSearch`` pre-filter: always tenant, project and RAG, then the filters."""
    clauses: list[dict[str, Any]] = [
        {"tenantId": {"$eq": scope.tenant_id}},
        {"projectId": {"$eq": scope.project_id}},
        {"ragId": {"$eq": scope.rag_id}},
    ]
    extra = translate_filters(filters)
    if "$and" in extra:
        clauses += extra["$and"]
    elif extra:
        clauses.append(extra)
    return {"$and": clauses}


# -- vectors and writes ------------------------------------------------------------------------


def encode_vector(vector: npt.NDArray[np.float32]) -> Binary:
    """A BSON binary vector of float32 (what Atlas Vector Search indexes directly)."""
    return Binary.from_vector(vector.astype(np.float32).tolist(), BinaryVectorDtype.FLOAT32)


def decode_vector(value: Any) -> npt.NDArray[np.float32] | None:
    """A stored vector as float32: a binary float32 vector or (older stores) an array."""
    if isinstance(value, Binary | bytes) and len(value) >= 2:
        raw = bytes(value)
        if raw[0] == _FLOAT32_VECTOR_TAG and (len(raw) - 2) % 4 == 0:
            return np.frombuffer(raw, dtype="<f4", offset=2).astype(np.float32)
        return None
    if isinstance(value, list | tuple):
        return np.asarray(value, dtype=np.float32)
    return None


def check_token_lengths(ch: Chunk) -> None:
    """Refuse a chunk whose filter fields Atlas would cut: a ``token`` (and a ``filter``)
    field indexes at most :data:`MAX_TOKEN_CHARS` characters, so a longer path or source ref
    would be stored whole and indexed cut, and no filter on it — the scope of a removal, the
    sweep's probe, a ``path`` filter — would ever match it again."""
    for name, value in (("source ref", ch.source_ref), ("path", ch.path), ("chunk id", ch.id)):
        if value is not None and len(value) > MAX_TOKEN_CHARS:
            raise InvalidInputError(
                f"the {name} of chunk {ch.id[:80]!r} is {len(value):,} characters long; Atlas "
                f"Search indexes at most {MAX_TOKEN_CHARS:,} characters of a filter field, so "
                "the MongoDB store refuses it: shorten it (e.g. a shorter document path)"
            )


def chunk_documents(scope: RagScope, chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
    """Validated chunk documents (``gen`` still to set); raises before anything is written."""
    docs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for order, ch in enumerate(chunks):
        if ch.rag_id != scope.rag_id:
            raise foreign_chunk_error()
        check_token_lengths(ch)
        if ch.id in seen:
            raise InvalidInputError(f"chunk id {ch.id!r} appears twice in one write")
        seen.add(ch.id)
        doc = {
            **scope_match(scope),
            "chunkId": ch.id,
            "sourceRef": ch.source_ref,
            "kind": ch.kind,
            "path": ch.path,
            "text": ch.text,
            "metadata": json.loads(json.dumps(ch.metadata, default=str)),
            VECTOR_FIELD: encode_vector(checked_vector(ch.embedding, scope.dimension)),
            "gen": 0,
            "ord": order,
        }
        check_bson_size(doc, f"chunk {ch.id!r}", rag_id=scope.rag_id)
        docs.append(doc)
    return docs


# -- Atlas Vector Search ---------------------------------------------------------------------


def fetch_limit(top_k: int) -> int:
    """Rows to ask the search for: room for a second chunk version of some sources (dropped
    after the search) without shrinking the answer below ``top_k``; capped by Atlas."""
    return min(MAX_NUM_CANDIDATES, top_k * 2 + 8)


def num_candidates_for(limit: int, *, factor: int = CANDIDATE_FACTOR, minimum: int = 100) -> int:
    """HNSW candidates to consider for ``limit`` results: ``factor`` × ``limit``, capped."""
    return min(MAX_NUM_CANDIDATES, max(minimum, limit * factor, limit))


def prefer_exact(
    scope_chunks: int, collection_chunks: int, *, max_selective: int = EXACT_MAX_SELECTIVE
) -> bool:
    """Should a query of a scope holding ``scope_chunks`` of ``collection_chunks`` use
    Atlas's exact (ENN) search? Small scopes: exhaustive search costs little and is exact;
    selective ones (≤ 5 % of the collection, up to ``max_selective`` chunks): ANN with a
    selective pre-filter loses recall."""
    if scope_chunks <= EXACT_MAX_CHUNKS:
        return True
    share = scope_chunks / max(collection_chunks, 1)
    return share <= EXACT_MAX_SHARE and scope_chunks <= max_selective


def query_vector(vector: Sequence[float] | npt.NDArray[np.float32]) -> Binary:
    """The query vector as Atlas takes it cheapest: BSON binary float32 (4 bytes a dimension
    instead of a double's 8 plus its key), the type the stored vectors have."""
    return encode_vector(np.asarray(vector, dtype=np.float32))


def build_vector_search_pipeline(
    scope: RagScope,
    vector: Sequence[float],
    limit: int,
    filters: ChunkFilter | None,
    *,
    exact: bool,
    num_candidates: int | None = None,
) -> list[dict[str, Any]]:
    """``$vectorSearch`` (pre-filtered by scope and filters) + ``$project`` with the score.

    ANN (``exact`` false) needs ``limit <= numCandidates <= 10,000``; ENN takes no
    ``numCandidates``. The projected ``score`` is ``(1 + cos) / 2`` for a cosine index.
    """
    if not 1 <= limit <= MAX_NUM_CANDIDATES:
        raise InvalidInputError(
            f"$vectorSearch returns 1 to {MAX_NUM_CANDIDATES} rows, not {limit}"
        )
    stage: dict[str, Any] = {
        "index": VECTOR_INDEX,
        "path": VECTOR_FIELD,
        "queryVector": query_vector(vector),
        "limit": limit,
        "filter": vector_search_filter(scope, filters),
    }
    if exact:
        stage["exact"] = True
    else:
        candidates = num_candidates if num_candidates is not None else num_candidates_for(limit)
        if not limit <= candidates <= MAX_NUM_CANDIDATES:
            raise InvalidInputError(
                f"$vectorSearch needs limit ({limit}) <= numCandidates ({candidates}) "
                f"<= {MAX_NUM_CANDIDATES}"
            )
        stage["numCandidates"] = candidates
    return [
        {"$vectorSearch": stage},
        {"$project": {**{name: 1 for name in HIT_FIELDS}, "score": {"$meta": "vectorSearchScore"}}},
    ]


def build_probe_pipeline(
    scope: RagScope, source_ref: str, version: int, count: int, dimension: int
) -> list[dict[str, Any]]:
    """Which chunks of one chunk version of one source does ``$vectorSearch`` see yet?

    An exact search filtered to that source and chunk version (any query vector ranks them
    all), projecting only ``_id``: the sweeper compares the count with the collection's.
    """
    stage = {
        "index": VECTOR_INDEX,
        "path": VECTOR_FIELD,
        "queryVector": query_vector([1.0] * dimension),
        "exact": True,
        "limit": max(1, min(count, MAX_NUM_CANDIDATES)),
        "filter": {
            "$and": [
                *vector_search_filter(scope, None)["$and"],
                {"sourceRef": {"$eq": source_ref}},
                {"gen": {"$eq": version}},
            ]
        },
    }
    return [{"$vectorSearch": stage}, {"$project": {"_id": 1}}]


def build_cosine_pipeline(
    scope: RagScope, vector: Sequence[float], chunk_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """The cosines of a few chunks, by id, in one exact ``$vectorSearch``: what a hybrid query
    needs for the hits only the text search found, without shipping their vectors. ``limit``
    leaves room for an older chunk version of each (the caller keeps the one it was shown)."""
    ids = list(dict.fromkeys(chunk_ids))
    stage = {
        "index": VECTOR_INDEX,
        "path": VECTOR_FIELD,
        "queryVector": query_vector(vector),
        "exact": True,
        "limit": max(1, min(2 * len(ids), MAX_NUM_CANDIDATES)),
        "filter": {
            "$and": [
                *vector_search_filter(scope, None)["$and"],
                {ID_FILTER_FIELD: {"$in": ids}},
            ]
        },
    }
    return [
        {"$vectorSearch": stage},
        {"$project": {"_id": 0, "chunkId": 1, "gen": 1, "score": {"$meta": "vectorSearchScore"}}},
    ]


def with_node_preference(pipeline: Sequence[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    """``pipeline`` with its search stage pinned to the search node ``key`` names (Atlas's
    ``searchNodePreference``): every query and probe of one RAG then reads the same node's
    index, so what a probe saw is what the queries see."""
    ((name, stage),) = pipeline[0].items()
    return [{name: {**stage, "searchNodePreference": {"key": key}}}, *map(dict, pipeline[1:])]


def node_key(rag_id: str, slot: int) -> str:
    """The ``searchNodePreference`` key of one of a RAG's node slots (slot 0: the RAG id, as
    before slots existed)."""
    return rag_id if slot == 0 else f"{rag_id}#{slot}"


def atlas_score_to_cosine(score: float) -> float:
    """Atlas normalises cosine similarity to ``(1 + cos) / 2`` in [0, 1]; undo it."""
    return 2.0 * float(score) - 1.0


# -- chunk versions --------------------------------------------------------------------------


def newest_chunk_version(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows of the newest chunk version of each source among ``rows``, one per chunk id, in the
    order given. Never the best-scored copy: an older chunk version is stale whatever its score."""
    rows = list(rows)
    newest: dict[str, int] = {}
    for row in rows:
        source, version = row["sourceRef"], int(row.get("gen", 0))
        newest[source] = max(version, newest.get(source, version))
    kept: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    for row in rows:
        if int(row.get("gen", 0)) != newest[row["sourceRef"]] or row["chunkId"] in seen:
            continue
        seen.add(row["chunkId"])
        kept.append(row)
    return kept


def atlas_hits(rows: Iterable[Mapping[str, Any]], scope: RagScope) -> list[Hit]:
    """Hits of a ``$vectorSearch`` answer, in its order: in scope, newest chunk version."""
    wanted = (scope.tenant_id, scope.project_id, scope.rag_id)
    # the pre-filter already scopes; re-checking costs nothing and guards isolation
    scoped = [r for r in rows if (r["tenantId"], r["projectId"], r["ragId"]) == wanted]
    return [
        hit_from_bson(r, atlas_score_to_cosine(r["score"])) for r in newest_chunk_version(scoped)
    ]


def newest_chunk_versions_pipeline(
    scope: RagScope, filters: ChunkFilter | None
) -> list[dict[str, Any]]:
    """The newest chunk version written of each source of the scope (``{_id: source, gen}``);
    served by the ``(scope, sourceRef, gen)`` index."""
    return [
        {"$match": {**scope_match(scope), **source_part(filters)}},
        {"$group": {"_id": "$sourceRef", "gen": {"$max": "$gen"}}},
    ]


def count_pipeline(scope: RagScope, filters: ChunkFilter | None) -> list[dict[str, Any]]:
    """Chunks matching ``filters`` in the newest chunk version of each source.

    The newest chunk version is found among *all* of a source's chunks, then the other filter
    keys are counted in it: a summary dropped by the newest chunk version is not counted from
    an older one.
    """
    return [
        {"$match": {**scope_match(scope), **source_part(filters)}},
        {
            "$group": {
                "_id": {"s": "$sourceRef", "g": "$gen"},
                "n": {"$sum": {"$cond": [filter_expression(filters), 1, 0]}},
            }
        },
        {"$sort": {"_id.s": 1, "_id.g": -1}},
        {"$group": {"_id": "$_id.s", "n": {"$first": "$n"}}},
        {"$group": {"_id": None, "n": {"$sum": "$n"}}},
    ]


def source_counts_pipeline(scope: RagScope, source_refs: Sequence[str]) -> list[dict[str, Any]]:
    """Chunks per path in the newest chunk version of each of ``source_refs``: one row per
    source, ``{"_id": ref, "paths": [{"p": path, "n": count}, …]}``
    (:meth:`ChunkStore.source_counts`; the newest version found as in :func:`count_pipeline`)."""
    return [
        {"$match": {**scope_match(scope), "sourceRef": {"$in": list(source_refs)}}},
        {"$group": {"_id": {"s": "$sourceRef", "g": "$gen", "p": "$path"}, "n": {"$sum": 1}}},
        {
            "$group": {
                "_id": {"s": "$_id.s", "g": "$_id.g"},
                "paths": {"$push": {"p": "$_id.p", "n": "$n"}},
            }
        },
        {"$sort": {"_id.s": 1, "_id.g": -1}},
        {"$group": {"_id": "$_id.s", "paths": {"$first": "$paths"}}},
    ]


def keep_newest(
    rows: Iterable[Mapping[str, Any]], written: Mapping[str, int]
) -> list[Mapping[str, Any]]:
    """Rows of a ``find`` that belong to the newest chunk version of their source; ``written``
    is that chunk version as read just before (a newer one seen in ``rows`` wins)."""
    rows = list(rows)
    newest = dict(written)
    for row in rows:
        newest[row["sourceRef"]] = max(int(row.get("gen", 0)), newest.get(row["sourceRef"], 0))
    return [r for r in rows if int(r.get("gen", 0)) == newest[r["sourceRef"]]]


# -- exact ranking ---------------------------------------------------------------------------


def rank_exact(matrix: np.ndarray, query: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the ``top_k`` rows most cosine-similar to ``query``, best first."""
    n = matrix.shape[0]
    k = min(top_k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    scores = (matrix @ (query / np.linalg.norm(query))) / norms
    idx = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return idx, scores[idx]


def rank_rows_exact(
    rows: Sequence[Mapping[str, Any]], query: np.ndarray, top_k: int
) -> list[tuple[Mapping[str, Any], float]]:
    """``(row, cosine)`` of the ``top_k`` rows nearest ``query``, best first; rows of the
    newest chunk version of their source only (rows hold the vector, ``sourceRef`` and ``gen``)."""
    current = newest_chunk_version(rows)
    usable = [(r, v) for r in current if (v := decode_vector(r.get(VECTOR_FIELD))) is not None]
    if not usable:
        return []
    matrix = np.stack([v for _, v in usable])
    idx, scores = rank_exact(matrix, query, top_k)
    return [(usable[i][0], float(s)) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]


def cosine(vector: Any, query: np.ndarray) -> float:
    """Cosine similarity of a stored vector to ``query`` (0 when the vector is unreadable)."""
    v = decode_vector(vector)
    if v is None or v.shape != query.shape or not np.any(v):
        return 0.0
    return float(v @ query / (np.linalg.norm(v) * np.linalg.norm(query)))


# -- codecs ----------------------------------------------------------------------------------


def chunk_from_bson(row: Mapping[str, Any]) -> Chunk:
    """A chunk document (with its ``embedding``) as the :class:`Chunk` it was written as."""
    vector = decode_vector(row.get(VECTOR_FIELD))
    if vector is None:
        raise StoreError(f"chunk {row.get('chunkId')!r} has no readable vector")
    return Chunk(
        id=row["chunkId"],
        rag_id=row["ragId"],
        source_ref=row["sourceRef"],
        text=row["text"],
        embedding=vector.tolist(),
        kind=row["kind"],
        path=row.get("path"),
        metadata=dict(row.get("metadata") or {}),
    )


def hit_from_bson(row: Mapping[str, Any], score: float, lexical: float | None = None) -> Hit:
    return Hit(
        lexical_score=lexical,
        score=score,
        text=row["text"],
        source_ref=row["sourceRef"],
        kind=row["kind"],
        path=row.get("path"),
        rag_id=row["ragId"],
        chunk_id=row["chunkId"],
        metadata=dict(row.get("metadata") or {}),
    )
