"""Pure builders for asking Atlas Search whether it sees a whole RAG yet.

A rebuild's shadow becomes live only when search sees the newest chunk version of every one of
its sources (readers would otherwise switch to a generation search shows in part). The
primary says what was written (:func:`chunk_version_counts_pipeline`); probes filtered to groups
of sources ask ``$vectorSearch`` (exact, any query vector ranks every match) and ``$search``
what they see (:func:`scope_probe_pipelines`); :func:`sees_all` compares. A group holds at
most :data:`~.mongo.builders.queries.MAX_NUM_CANDIDATES` chunks, Atlas's largest answer.

A large RAG is not probed whole: :func:`sample_sources` keeps the sources of the newest chunk
versions up to :data:`PROBE_SAMPLE_CHUNKS` chunks (two probes of each kind at the most). mongot
applies a collection's writes in the order of its change stream, so a node that shows the
newest versions written shows the older ones too; the fingerprint of the whole RAG (every
source's newest version and count) still restarts the grace when anything changes. At 1M
chunks an attempt asked about 200 probes and 2M document lookups; it now asks at most 4
probes of 10,000 chunks each — run once per switch attempt, never by a query.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vancetope_rag.store.mongo.builders.queries import (
    MAX_NUM_CANDIDATES,
    scope_match,
    vector_search_filter,
)
from vancetope_rag.store.mongo.builders.text import scope_clauses
from vancetope_rag.store.mongo.indexes import TEXT_INDEX, VECTOR_FIELD, VECTOR_INDEX
from vancetope_rag.store.port.types import RagScope

#: Per source: (newest chunk version, its chunk count, chunks of every chunk version).
Written = Mapping[str, tuple[int, int, int]]


def chunk_version_counts_pipeline(scope: RagScope) -> list[dict[str, Any]]:
    """Chunks per source and chunk version of a scope, as written (read on the primary)."""
    return [
        {"$match": scope_match(scope)},
        {"$group": {"_id": {"s": "$sourceRef", "g": "$gen"}, "n": {"$sum": 1}}},
    ]


def written(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """:data:`Written` from the rows of :func:`chunk_version_counts_pipeline`."""
    found: dict[str, tuple[int, int, int]] = {}
    for row in rows:
        source, version, n = row["_id"]["s"], int(row["_id"]["g"]), int(row["n"])
        newest, count, total = found.get(source, (version, 0, 0))
        if version > newest:
            newest, count = version, n
        elif version == newest:
            count = n
        found[source] = (newest, count, total + n)
    return found


def fingerprint(rows: Iterable[Mapping[str, Any]]) -> str:
    """A digest of what a scope holds (newest chunk version and its chunk count per source),
    from the rows of :func:`chunk_version_counts_pipeline`: when it changes, search has not
    yet been seen to show what is written now for as long as the grace asks."""
    digest = hashlib.sha256()
    for source, (newest, count, _) in sorted(written(rows).items()):
        digest.update(json.dumps([source, newest, count]).encode())
    return digest.hexdigest()


#: The most chunks a switch attempt's visibility probes ask about (newest versions first).
PROBE_SAMPLE_CHUNKS = 2 * MAX_NUM_CANDIDATES


def sample_sources(by_source: Written, limit: int = PROBE_SAMPLE_CHUNKS) -> dict[str, Any]:
    """The sources whose newest chunk versions were written last, while their chunks (every
    version, as a probe filters them) fit ``limit``; at least one source."""
    newest_first = sorted(by_source, key=lambda s: (-by_source[s][0], s))
    kept: dict[str, Any] = {}
    size = 0
    for source in newest_first:
        n = by_source[source][2]
        if kept and size + n > limit:
            break
        kept[source] = by_source[source]
        size += n
    return kept


def source_groups(by_source: Written, limit: int = MAX_NUM_CANDIDATES) -> list[list[str]]:
    """Sources in groups whose chunks (every chunk version) fit one probe's answer."""
    groups: list[list[str]] = []
    size = 0
    for source in sorted(by_source):
        n = by_source[source][2]
        if not groups or size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(source)
        size += n
    return groups


def scope_probe_pipelines(
    scope: RagScope, sources: Sequence[str], limit: int, *, text: bool
) -> list[list[dict[str, Any]]]:
    """The ``$vectorSearch`` (and with ``text`` the ``$search``) probe of a source group,
    each returning ``sourceRef`` and ``gen`` of up to ``limit`` chunks it sees."""
    limit = max(1, min(limit, MAX_NUM_CANDIDATES))
    vector = {
        "index": VECTOR_INDEX,
        "path": VECTOR_FIELD,
        "queryVector": [1.0] * scope.dimension,
        "exact": True,
        "limit": limit,
        "filter": {
            "$and": [
                *vector_search_filter(scope, None)["$and"],
                {"sourceRef": {"$in": list(sources)}},
            ]
        },
    }
    fields: dict[str, Any] = {"$project": {"_id": 0, "sourceRef": 1, "gen": 1}}
    probes: list[list[dict[str, Any]]] = [[{"$vectorSearch": vector}, fields]]
    if text:
        clauses = [*scope_clauses(scope), {"in": {"path": "sourceRef", "value": list(sources)}}]
        probes.append(
            [
                {"$search": {"index": TEXT_INDEX, "compound": {"filter": clauses}}},
                {"$limit": limit},
                fields,
            ]
        )
    return probes


def sees_all(by_source: Written, sources: Sequence[str], seen: Iterable[Mapping[str, Any]]) -> bool:
    """Does a probe's answer hold every chunk of the newest chunk version of each source?"""
    counts: dict[tuple[str, int], int] = {}
    for row in seen:
        key = (row["sourceRef"], int(row.get("gen", 0)))
        counts[key] = counts.get(key, 0) + 1
    for source in sources:
        newest, count, _ = by_source[source]
        if counts.get((source, newest), 0) < min(count, MAX_NUM_CANDIDATES):
            return False
    return True
