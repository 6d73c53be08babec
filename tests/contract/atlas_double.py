"""A test double of MongoDB Atlas with Atlas Search, over mongomock.

``AtlasCluster(clock=…, lag_s=…)`` holds what one simulated cluster shares: its clock, the
search lag, the search indexes and their build states, the write history of every collection,
and a log of every read with the read preference and read concern it ran under.
``cluster.client()`` is what the adapter receives in place of a ``MongoClient``.

What it simulates (from Atlas's documentation):

* **Eventual consistency.** ``$vectorSearch`` and ``$search`` find documents in the collection
  *as it was* ``lag_s`` seconds ago (ids and indexed field values: filter fields, vectors,
  text), then look the hits up in the collection *as it is now*: a deleted document vanishes
  from the answer, returned fields are current. The write history is recorded per document.
* **Search nodes.** ``search_nodes`` gives each search node's lag (default: one node lagging
  ``lag_s``), ``text_lag_s`` an extra lag of every node's text index (mongot replicates each
  index on its own). A search stage with ``searchNodePreference: {key}`` goes to the node
  :meth:`AtlasCluster.node_for` that key names, always the same one; a stage without goes to
  the node ``pick()`` chooses (round robin unless a test sets it), as mongod picks any.
  ``node_preference=False`` makes a cluster that refuses the field.
* **Index lifecycle.** ``create_search_index`` → ``PENDING``, ``BUILDING``, then ``READY``
  (queryable) after ``build_s``; ``update_search_index`` keeps serving the old definition
  (``queryable`` stays true, status ``BUILDING``) until the rebuild ends; ``fail_index`` marks
  one ``FAILED``, ``stale_index`` one ``STALE`` (queryable, no longer replicating).
  ``statusDetail`` lists each search node's state of the index: node ``i`` ends a build
  ``build_delays[i]`` later than ``build_s``, and serves the older definition meanwhile; the
  top-level ``status`` follows the first node only. A search on an index that does not exist
  or is not queryable returns no documents — Atlas's documented behaviour, not an error.
* **Refusals.** A filter on a field not declared ``filter`` in the served definition,
  ``numCandidates`` over 10,000 or under ``limit``, ``exact: true`` with ``numCandidates``
  (see ``atlas_search_sim``); a search index past the tier's limit (``max_search_indexes``:
  3 on M0); a user without a privilege (``denied``); a server without Atlas Search
  (``search_supported=False``: code 31082, as a community ``mongod`` answers).
* **Sharded clusters.** ``sharded=True``: ``hello`` answers as mongos does (``isdbgrid``),
  ``client.admin.command("shardCollection", "db.coll", key=…)`` shards a collection (refused
  without the privilege: ``denied={"shardCollection"}``), and a write to a sharded collection
  is refused as mongos refuses it (the rules of MongoDB before 7.1, the strictest): an insert
  must hold every shard key field, an upsert must match each by equality, a single-document
  update, replace, delete or find-and-modify must match the whole shard key or ``_id`` by
  equality; ``*_many`` writes may broadcast.
* **Document size.** ``distinct`` answers in one BSON document and fails past
  ``max_bson_size`` (16 MiB), as the server does.
* **Slow search.** ``search_latency_s``: each search stage takes that long (of the cluster's
  clock). The driver's time budget (``pymongo.timeout``'s time left, else the client's
  30 s ``timeoutMS``) is recorded in ``timeouts``; a stage slower than it fails as the
  server's ``maxTimeMS`` expiring does (``ExecutionTimeout``, code 50).

The adapter must use only public pymongo API on it; tests move the clock to let time pass.
"""

from __future__ import annotations

import copy
import itertools
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
import mongomock
from atlas_search_sim import (
    apply_stages,
    check_vector_stage,
    failure,
    text_search,
    vector_search,
)
from pymongo import _csot
from pymongo.errors import BulkWriteError, ExecutionTimeout, OperationFailure

SEARCH_NOT_ENABLED = failure(
    "Using Atlas Search Database Commands and the $listSearchIndexes aggregation stage "
    "requires additional configuration. Please connect to Atlas or an AtlasCLI local "
    "deployment to enable.",
    31082,
    "SearchNotEnabled",
)
#: The adapter's client-wide ``timeoutMS`` (``client.DEFAULT_TIMEOUT_MS``), in seconds.
CLIENT_TIMEOUT_S = 30.0
TOO_MANY_INDEXES = "The maximum number of FTS indexes has been reached for this instance size."


@dataclass
class SearchIndex:
    """One search index: its definitions over time (the newest may still be building)."""

    name: str
    type: str
    created_at: float
    versions: list[tuple[float, dict[str, Any]]]
    failed: str | None = None
    stale: bool = False

    def served_version(self, now: float, build_s: float) -> int | None:
        """The version queries use now: the newest whose build has ended."""
        ready = [i for i, (t, _) in enumerate(self.versions) if t + build_s <= now]
        return ready[-1] if ready else None

    def served(self, now: float, build_s: float) -> dict[str, Any] | None:
        """The definition queries use now: the newest whose build has ended."""
        version = self.served_version(now, build_s)
        return None if version is None else self.versions[version][1]

    def _state(self, now: float, build_s: float) -> tuple[str, bool]:
        latest_at, _ = self.versions[-1]
        queryable = self.failed is None and self.served(now, build_s) is not None
        if self.failed is not None:
            status = "FAILED"
        elif self.stale:
            status = "STALE"
        elif now < self.created_at + build_s / 4:
            status = "PENDING"
        elif now < latest_at + build_s:
            status = "BUILDING"
        else:
            status = "READY"
        return status, queryable

    def info(self, now: float, build_s: float, delays: Sequence[float] = (0.0,)) -> dict[str, Any]:
        _, latest = self.versions[-1]
        status, queryable = self._state(now, build_s + delays[0])
        detail = []
        for i, delay in enumerate(delays):
            node_status, node_queryable = self._state(now, build_s + delay)
            served = self.served_version(now, build_s + delay)
            main = {"status": node_status, "queryable": node_queryable}
            if served is not None:
                main["definitionVersion"] = {"version": served}
                main["definition"] = copy.deepcopy(self.versions[served][1])
            entry: dict[str, Any] = {
                "hostname": f"search-node-{i}",
                "status": node_status,
                "queryable": node_queryable,
                "mainIndex": main,
            }
            if served != len(self.versions) - 1:
                entry["stagedIndex"] = {
                    "status": "BUILDING",
                    "queryable": False,
                    "definitionVersion": {"version": len(self.versions) - 1},
                }
            detail.append(entry)
        return {
            "id": f"id-{self.name}",
            "name": self.name,
            "type": self.type,
            "status": status,
            "queryable": queryable,
            "latestDefinitionVersion": {"version": len(self.versions) - 1},
            "latestDefinition": copy.deepcopy(latest),
            "statusDetail": detail,
            **({"message": self.failed} if self.failed else {}),
        }


@dataclass
class Read:
    """One read the adapter sent, with the options it ran under."""

    collection: str
    method: str
    read_preference: str | None
    read_concern: str | None
    pipeline: list[dict[str, Any]] | None = None


@dataclass
class AtlasCluster:
    """Shared state of one simulated Atlas cluster (see the module docstring)."""

    clock: Callable[[], float]
    lag_s: float = 0.05
    build_s: float = 0.2
    max_search_indexes: int | None = None
    search_supported: bool = True
    denied: frozenset[str] = frozenset()
    #: Lag of each search node (empty: one node lagging ``lag_s``).
    search_nodes: tuple[float, ...] = ()
    #: Extra lag of the text index on every node.
    text_lag_s: float = 0.0
    #: Extra build time of each search node (default: none).
    build_delays: tuple[float, ...] = ()
    #: False: the cluster refuses ``searchNodePreference`` (an older mongot).
    node_preference: bool = True
    #: Which node a search stage without ``searchNodePreference`` goes to.
    pick: Callable[[], int] | None = None
    #: The node of every search stage sent, in order.
    routes: list[int] = field(default_factory=list)
    mongo: Any = field(default_factory=mongomock.MongoClient)
    indexes: dict[tuple[str, str], dict[str, SearchIndex]] = field(default_factory=dict)
    history: dict[tuple[str, str], dict[Any, list[tuple[float, Any]]]] = field(default_factory=dict)
    reads: list[Read] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    #: How long each search stage takes (moves the clock); see the module docstring.
    search_latency_s: float = 0.0
    #: The driver's time budget of every search stage sent, in seconds.
    timeouts: list[float] = field(default_factory=list)
    #: Called after every recorded write with the collection name (tests interleave here).
    on_write: Callable[[str], None] | None = None
    #: The largest BSON document: ``distinct`` answers in one, and fails past it (code 17217).
    max_bson_size: int = 16 * 1024 * 1024
    #: A sharded cluster (behind mongos): see the module docstring.
    sharded: bool = False
    #: (database, collection) → its shard key, as ``shardCollection`` set it.
    shard_keys: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pick is None:
            turns: Iterator[int] = itertools.cycle(range(len(self.lags())))
            self.pick = lambda: next(turns)

    def client(self) -> AtlasClient:
        return AtlasClient(self)

    def lags(self) -> tuple[float, ...]:
        return self.search_nodes or (self.lag_s,)

    def delays(self) -> tuple[float, ...]:
        return tuple(
            self.build_delays[i] if i < len(self.build_delays) else 0.0
            for i in range(len(self.lags()))
        )

    def node_for(self, key: str) -> int:
        """The search node a ``searchNodePreference`` key routes to (always the same)."""
        return zlib.crc32(key.encode()) % len(self.lags())

    def settle(self) -> None:
        """Let every write reach the search indexes and every build end (moves the clock)."""
        wait = max(max(self.lags()) + self.text_lag_s, self.build_s + max(self.delays()))
        self.clock.advance(wait + 0.001)  # type: ignore[attr-defined]

    def stale_index(self, database: str, collection: str, name: str) -> None:
        self.indexes[(database, collection)][name].stale = True

    def fail_index(self, database: str, collection: str, name: str, message: str) -> None:
        self.indexes[(database, collection)][name].failed = message

    def deny(self, *actions: str) -> None:
        self.denied = self.denied | set(actions)

    def index_count(self) -> int:
        return sum(len(v) for v in self.indexes.values())


def _option(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "level"):  # ReadConcern
        return str(value.level)
    return str(getattr(value, "mongos_mode", value))  # ReadPreference: "primary", …


class AtlasClient:
    def __init__(self, cluster: AtlasCluster) -> None:
        self.cluster = cluster

    def get_database(self, name: str, **options: Any) -> AtlasDatabase:
        return AtlasDatabase(self, name, options)

    def __getitem__(self, name: str) -> AtlasDatabase:
        return self.get_database(name)

    @property
    def admin(self) -> AtlasDatabase:
        return self.get_database("admin")

    def drop_database(self, name: str) -> None:
        self.cluster.mongo.drop_database(name)

    def close(self) -> None:
        """Nothing to release."""


class AtlasDatabase:
    def __init__(self, client: AtlasClient, name: str, options: Mapping[str, Any]) -> None:
        self.client = client
        self.name = name
        self.options = dict(options)
        self._inner = client.cluster.mongo[name]

    def with_options(self, **options: Any) -> AtlasDatabase:
        return AtlasDatabase(self.client, self.name, {**self.options, **options})

    def get_collection(self, name: str, **options: Any) -> AtlasCollection:
        return AtlasCollection(self, name, {**self.options, **options})

    def __getitem__(self, name: str) -> AtlasCollection:
        return self.get_collection(name)

    def list_collection_names(self, **kwargs: Any) -> list[str]:
        return list(self._inner.list_collection_names())

    def create_collection(self, name: str, **kwargs: Any) -> AtlasCollection:
        self._inner.create_collection(name, **kwargs)
        return self.get_collection(name)

    def drop_collection(self, name: str) -> None:
        self._inner.drop_collection(name)
        self.client.cluster.indexes.pop((self.name, name), None)
        self.client.cluster.history.pop((self.name, name), None)

    def command(self, name: str, *args: Any, **kwargs: Any) -> Any:
        cluster = self.client.cluster
        if name == "hello" and cluster.sharded:
            return {"ok": 1.0, "msg": "isdbgrid"}
        if name in ("ping", "hello"):
            return {"ok": 1.0}
        if name == "shardCollection" and self.name == "admin":
            if not cluster.sharded:
                raise failure("sharding not enabled for this cluster", 203, "ShardingNotEnabled")
            if "shardCollection" in cluster.denied:
                raise failure(
                    f"not authorized on admin to execute command {{ shardCollection: {args[0]} }}",
                    13,
                    "Unauthorized",
                )
            database, _, collection = str(args[0]).partition(".")
            cluster.shard_keys[(database, collection)] = dict(kwargs["key"])
            return {"ok": 1.0, "collectionsharded": args[0]}
        return self._inner.command(name, *args, **kwargs)


_WRITES_BY_FILTER = (
    "update_one",
    "update_many",
    "replace_one",
    "delete_one",
    "delete_many",
    "find_one_and_update",
    "find_one_and_replace",
    "find_one_and_delete",
)
_READS = ("find", "find_one", "count_documents", "estimated_document_count", "distinct")


class AtlasCollection:
    """A collection whose search stages see the past (see the module docstring)."""

    def __init__(self, database: AtlasDatabase, name: str, options: Mapping[str, Any]) -> None:
        self.database = database
        self.name = name
        self.options = dict(options)
        self.cluster = database.client.cluster
        self._inner = database._inner[name]
        self._key = (database.name, name)

    def with_options(self, **options: Any) -> AtlasCollection:
        return AtlasCollection(self.database, self.name, {**self.options, **options})

    # -- plain reads and writes ----------------------------------------------------------

    def _log(self, method: str, pipeline: list[dict[str, Any]] | None = None) -> None:
        self.cluster.reads.append(
            Read(
                self.name,
                method,
                _option(self.options.get("read_preference")),
                _option(self.options.get("read_concern")),
                pipeline,
            )
        )

    def _record(self, ids: Iterable[Any]) -> None:
        now = self.cluster.clock()
        versions = self.cluster.history.setdefault(self._key, {})
        for oid in dict.fromkeys(ids):
            current = self._inner.find_one({"_id": oid})
            versions.setdefault(oid, []).append((now, copy.deepcopy(current)))
        if self.cluster.on_write is not None:
            self.cluster.on_write(self.name)

    def distinct(self, key: str, flt: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        """Answers in one BSON document, as the server does: past ``max_bson_size`` it fails."""
        self._log("distinct")
        values = self._inner.distinct(key, flt, **kwargs)
        if len(bson.encode({"values": values})) > self.cluster.max_bson_size:
            raise failure("distinct too big, 16mb cap", 17217)
        return values

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if name in _READS:

            def read(*args: Any, **kwargs: Any) -> Any:
                self._log(name)
                return method(*args, **kwargs)

            return read
        if name in _WRITES_BY_FILTER:

            def write(flt: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
                self._check_shard_key(name, flt, upsert=bool(kwargs.get("upsert")))
                before = [d["_id"] for d in self._inner.find(flt, {"_id": 1})]
                result = method(flt, *args, **kwargs)
                after = [getattr(result, "upserted_id", None)]
                if isinstance(result, Mapping):
                    after.append(result.get("_id"))
                self._record([*before, *(i for i in after if i is not None)])
                return result

            return write
        return method

    def _shard_key(self) -> dict[str, Any] | None:
        return self.cluster.shard_keys.get(self._key)

    def _check_shard_key(self, method: str, flt: Mapping[str, Any], *, upsert: bool) -> None:
        """Refuse a write mongos would refuse (see the module docstring)."""
        key = self._shard_key()
        if key is None or method.endswith("_many"):
            return
        matched = {k for k, v in flt.items() if not isinstance(v, Mapping) or "$eq" in v}
        if upsert and not set(key) <= matched:
            raise failure(
                f"Failed to target upsert by query :: could not extract exact shard key from "
                f"{dict(flt)} for shard key {key}",
                61,
                "ShardKeyNotFound",
            )
        if not set(key) <= matched and "_id" not in matched:
            raise failure(
                f"A single {method} on a sharded collection must contain an exact match on "
                f"_id (and have the collection default collation) or contain the shard key "
                f"{key}: {dict(flt)}",
                72,
                "InvalidOptions",
            )

    def _check_inserted(self, documents: Iterable[Mapping[str, Any]]) -> None:
        key = self._shard_key()
        for document in documents if key is not None else ():
            if not set(key) <= set(document):
                raise failure(f"document {document.get('_id')} lacks the shard key {key}", 61)

    def insert_one(self, document: dict[str, Any], **kwargs: Any) -> Any:
        self._check_inserted([document])
        try:
            return self._inner.insert_one(document, **kwargs)
        finally:
            self._record([document["_id"]] if "_id" in document else [])

    def insert_many(self, documents: list[dict[str, Any]], **kwargs: Any) -> Any:
        self._check_inserted(documents)
        try:
            return self._inner.insert_many(documents, **kwargs)
        except BulkWriteError:
            raise
        finally:
            self._record([d["_id"] for d in documents if "_id" in d])

    def bulk_write(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Atlas double does not record bulk_write; use the plain calls")

    # -- search indexes ------------------------------------------------------------------

    def _allowed(self, action: str) -> None:
        if not self.cluster.search_supported:
            raise SEARCH_NOT_ENABLED
        if action in self.cluster.denied:
            raise failure(
                f"not authorized on {self.database.name} to execute command "
                f'{{ {action}: "{self.name}" }}',
                13,
                "Unauthorized",
            )

    def _indexes(self) -> dict[str, SearchIndex]:
        return self.cluster.indexes.setdefault(self._key, {})

    def create_search_index(self, model: Any) -> str:
        self._allowed("createSearchIndexes")
        spec = model.document if hasattr(model, "document") else dict(model)
        name = spec.get("name", "default")
        if self.name not in self.database.list_collection_names():
            raise failure(
                f"Collection '{self.database.name}.{self.name}' does not exist.",
                26,
                "NamespaceNotFound",
            )
        if name in self._indexes():
            raise failure(
                f"Duplicate Index: an index named {name} already exists", 68, "IndexAlreadyExists"
            )
        limit = self.cluster.max_search_indexes
        if limit is not None and self.cluster.index_count() >= limit:
            raise failure(TOO_MANY_INDEXES)
        now = self.cluster.clock()
        self._indexes()[name] = SearchIndex(
            name, spec.get("type", "search"), now, [(now, copy.deepcopy(spec["definition"]))]
        )
        return str(name)

    def create_search_indexes(self, models: list[Any]) -> list[str]:
        return [self.create_search_index(m) for m in models]

    def update_search_index(self, name: str, definition: Mapping[str, Any]) -> None:
        self._allowed("updateSearchIndex")
        index = self._indexes().get(name)
        if index is None:
            raise failure(f"Index {name} not found", 27, "IndexNotFound")
        index.versions.append((self.cluster.clock(), copy.deepcopy(dict(definition))))

    def drop_search_index(self, name: str) -> None:
        self._allowed("dropSearchIndex")
        self._indexes().pop(name, None)

    def list_search_indexes(self, name: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        self._allowed("listSearchIndexes")
        self._log("list_search_indexes")
        now = self.cluster.clock()
        return [
            index.info(now, self.cluster.build_s, self.cluster.delays())
            for index in self._indexes().values()
            if name in (None, index.name)
        ]

    # -- aggregation: search stages see the lagged collection ------------------------------

    def lagged_docs(self, lag_s: float | None = None) -> list[dict[str, Any]]:
        """The collection as a search index sees it: as it was ``lag_s`` ago."""
        at = self.cluster.clock() - (self.cluster.lag_s if lag_s is None else lag_s)
        versions = self.cluster.history.get(self._key, {})
        docs = [d for d in self._inner.find({}) if d["_id"] not in versions]  # written unseen
        for history in versions.values():
            seen = [doc for t, doc in history if t <= at]
            if seen and seen[-1] is not None:
                docs.append(seen[-1])
        return docs

    def aggregate(self, pipeline: list[dict[str, Any]], **kwargs: Any) -> Any:
        self._log("aggregate", pipeline)
        names = [next(iter(stage)) for stage in pipeline]
        for i, stage_name in enumerate(names):
            if stage_name in ("$vectorSearch", "$search") and i > 0:
                raise failure(f"{stage_name} is only valid as the first stage in a pipeline", 40602)
        if not names or names[0] not in ("$vectorSearch", "$search"):
            return iter(self._inner.aggregate(pipeline, **kwargs))
        self._allowed("search")
        self._spend_search_time()
        stage = dict(pipeline[0][names[0]])
        self.cluster.searches.append({names[0]: copy.deepcopy(stage)})
        node = self._route(names[0], stage.pop("searchNodePreference", None))
        lag = self.cluster.lags()[node]
        build_s = self.cluster.build_s + self.cluster.delays()[node]
        index = self._indexes().get(stage.get("index", "default"))
        definition = index.served(self.cluster.clock(), build_s) if index else None
        if index is None or index.failed is not None or definition is None:
            return iter([])  # Atlas answers a missing or unbuilt index with no documents
        kind = "vectorSearch" if names[0] == "$vectorSearch" else "search"
        if index.type != kind:
            raise failure(f"index {index.name} is of type {index.type}, not {kind}")
        if kind == "vectorSearch":
            check_vector_stage(stage, definition)
            found = vector_search(stage, self.lagged_docs(lag))
            meta_name = "vectorSearchScore"
        else:
            found = text_search(stage, definition, self.lagged_docs(lag + self.cluster.text_lag_s))
            meta_name = "searchScore"
        rows, metas = [], []
        for oid, score in found:  # the lookup phase reads the collection as it is now
            current = self._inner.find_one({"_id": oid})
            if current is not None:
                rows.append(current)
                metas.append({meta_name: score})
        return iter(apply_stages(rows, metas, pipeline[1:]))

    def _spend_search_time(self) -> None:
        """Take ``search_latency_s`` of the clock, or fail past the driver's budget."""
        left = _csot.remaining()
        budget = CLIENT_TIMEOUT_S if left is None else left
        self.cluster.timeouts.append(budget)
        latency = self.cluster.search_latency_s
        if not latency:
            return
        self.cluster.clock.advance(min(latency, budget))  # type: ignore[attr-defined]
        if latency > budget:
            raise ExecutionTimeout(
                "operation exceeded time limit",
                50,
                {"ok": 0.0, "code": 50, "codeName": "MaxTimeMSExpired"},
            )

    def _route(self, stage_name: str, preference: Any) -> int:
        """The search node a stage runs on (see the module docstring)."""
        if preference is None:
            assert self.cluster.pick is not None
            node = self.cluster.pick() % len(self.cluster.lags())
        elif not self.cluster.node_preference:
            raise failure(f'"{stage_name}.searchNodePreference" is unrecognized', 40415)
        elif not (
            isinstance(preference, Mapping)
            and set(preference) == {"key"}
            and isinstance(preference["key"], str)
        ):
            raise failure(f'"{stage_name}.searchNodePreference" must be {{key: <string>}}', 9)
        else:
            node = self.cluster.node_for(preference["key"])
        self.cluster.routes.append(node)
        return node


__all__ = ["SEARCH_NOT_ENABLED", "TOO_MANY_INDEXES", "AtlasCluster", "OperationFailure", "Read"]
