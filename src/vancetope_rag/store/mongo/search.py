"""What the chunk store knows about the server's Atlas Search, and what it asks of it.

:class:`SearchSupport` answers, once per process where it can:

* **Is there Atlas Search at all?** ``auto`` probes ``$listSearchIndexes`` once. Only the
  specific "search not supported" answer (:func:`~.mongo.errors.search_unsupported`)
  switches the process to client-side exact ranking; an authorization error or a timeout is
  a :class:`StoreError` and is asked again next time.
* **Can this dimension be queried?** A ``$vectorSearch`` on a missing or unbuilt index returns
  no documents — Atlas's documented behaviour, indistinguishable from an empty RAG — so a
  query checks the index is queryable and otherwise fails fast, telling the user to run
  ``init``. A check is trusted ``queryable_ttl_s`` (60 s), and forgotten at once when a
  ``$vectorSearch`` of a scope that holds matching chunks answers empty
  (:meth:`SearchSupport.recheck_empty`; a text search finding none of the query's words is
  normal, so its index relies on the TTL): an index an operator dropped, or one that failed,
  is noticed at the next query instead of answering ``[]`` for the process's life. Queries
  never create or wait for an index.
* **Exact or approximate?** :func:`~.mongo.builders.queries.prefer_exact` on the scope's size
  against its collection's (selective scopes up to ``exact_max_chunks``), counted at most
  every ``estimate_ttl_s`` per scope.
* **Does search see a chunk version yet?** The sweeper's probe (see :mod:`.mongo.chunks`):
  ``$vectorSearch``, and ``$search`` whenever the dimension's text index serves queries
  (asked of the server, not of what this process happened to query before).
* **Which search node?** With ``node_preference`` (the default; a no-op without Search
  Nodes), every search stage of a RAG carries ``searchNodePreference`` keyed by one of the
  RAG's ``node_spread`` slots (:func:`~.mongo.builders.queries.node_key`). A query reads the
  slot its chat turn drew (:meth:`SearchSupport.turn`: every search of one turn reads one
  node, so a turn never mixes what two nodes show), spreading one large RAG's load over up to
  ``node_spread`` nodes; a visibility probe asks every slot (:meth:`SearchSupport.everywhere`),
  so the sweep deletes an old chunk version only once each node queries may read shows the
  new one (Dedicated Search Nodes lag each other). A cluster that refuses the field is told
  once in the log and asked without it from then on; a cluster with several search nodes
  searched without it is warned about once (a node lagging past the grace can show a source
  with no chunks).

Index creation lives in :mod:`.mongo.indexes`; it runs from ``init`` and when a RAG of a new
dimension is created (:meth:`SearchSupport.prepare`), never from a query.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import probes as mp
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.builders.text import build_text_probe_pipeline
from vancetope_rag.store.mongo.errors import search_unsupported, store_error
from vancetope_rag.store.port.types import RagScope

log = get_logger(__name__)

VectorSearchMode = Literal["atlas", "exact", "auto"]

#: The node slot the current chat turn drew (None outside a turn: each search draws one).
_TURN_SLOT: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "vancetope_rag_search_node_slot", default=None
)
#: How many search nodes one RAG's queries are spread over by default.
DEFAULT_NODE_SPREAD = 2


class SearchSupport:
    """Atlas Search facts of one database, cached for the process (thread-safe).

    Args:
        database: reads on the primary (counts, collection names).
        search_database: where search stages run (the URI's read preference; read concern
            ``local`` is set per collection).
        mode: ``atlas``, ``exact`` or ``auto``.
        estimate_ttl_s: how long a scope's size estimate is trusted.
        node_preference: route each RAG's search stages to its search nodes.
        node_spread: over how many node slots a RAG's queries are spread (probes ask all).
        exact_max_chunks: the largest selective scope searched exactly.
        queryable_ttl_s: how long an index found queryable is trusted.
        probe_chunks: the most chunks a scope's visibility probes ask about (a sample of the
            newest chunk versions, :func:`~.mongo.builders.probes.sample_sources`).
        ready_ttl_s: how long a dimension found ready for indexing is trusted.
        node_hold_s: the longest one search node that lags the others (building after a
            scale-out or an index update) holds the dimension's indexing.
    """

    def __init__(
        self,
        database: Any,
        search_database: Any,
        *,
        mode: VectorSearchMode = "auto",
        estimate_ttl_s: float = 600.0,
        monotonic: Callable[[], float] = time.monotonic,
        node_preference: bool = False,
        node_spread: int = DEFAULT_NODE_SPREAD,
        exact_max_chunks: int = mq.EXACT_MAX_SELECTIVE,
        queryable_ttl_s: float = 60.0,
        probe_chunks: int = mp.PROBE_SAMPLE_CHUNKS,
        ready_ttl_s: float = 60.0,
        node_hold_s: float = 300.0,
    ) -> None:
        if mode not in ("atlas", "exact", "auto"):
            raise StoreError(f"vector_search must be atlas, exact or auto, not {mode!r}")
        self.db = database
        self.search_db = search_database
        self.mode: VectorSearchMode = mode
        self.estimate_ttl_s = estimate_ttl_s
        self.node_preference = node_preference
        self.node_spread = max(1, node_spread)
        self._warned_nodes = False
        self.exact_max_chunks = exact_max_chunks
        self.queryable_ttl_s = queryable_ttl_s
        self.probe_chunks = probe_chunks
        self.ready_ttl_s = ready_ttl_s
        self.node_hold_s = node_hold_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        #: (dimension, index) → until when "queryable" is trusted
        self._queryable: dict[tuple[int, str], float] = {}
        #: dimension → until when "ready for indexing" is trusted
        self._ready: dict[int, float] = {}
        #: (dimension, index, node) → when this process first saw that node lag the others
        self._lagging_since: dict[tuple[int, str, str], float] = {}
        self._prepared: set[int] = set()
        self._estimates: dict[tuple[str, str, str], tuple[float, bool]] = {}

    # -- the server ------------------------------------------------------------------------

    def collection(self, dim: int) -> Any:
        """The chunk collection of ``dim`` for plain reads and writes (primary)."""
        return self.db[ix.chunk_collection(dim)]

    def search_collection(self, dim: int) -> Any:
        """The chunk collection of ``dim`` for search stages: read concern ``local`` (search
        results come from mongot, which already lags; majority would only add latency)."""
        return self.search_db.get_collection(
            ix.chunk_collection(dim), read_concern=ReadConcern("local")
        )

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Every search inside reads one node slot of its RAG (drawn at random): one chat
        turn sees what one node shows."""
        token = _TURN_SLOT.set(random.randrange(self.node_spread))
        try:
            yield
        finally:
            _TURN_SLOT.reset(token)

    def aggregate(
        self, scope: RagScope, pipeline: list[dict[str, Any]], *, slot: int | None = None
    ) -> list[dict[str, Any]]:
        """Run a search pipeline of ``scope`` (with ``node_preference``, on the node of
        ``slot``, else of the turn's slot, else of one drawn now)."""
        search = self.search_collection(scope.dimension)
        if not self.node_preference:
            return list(search.aggregate(pipeline))
        if slot is None:
            slot = _TURN_SLOT.get()
        if slot is None:
            slot = random.randrange(self.node_spread)
        key = mq.node_key(scope.rag_id, slot % self.node_spread)
        try:
            return list(search.aggregate(mq.with_node_preference(pipeline, key)))
        except OperationFailure as exc:
            if "searchnodepreference" not in str(exc).lower():
                raise
            log.warning(
                "this cluster refuses searchNodePreference (%s); searching without it (set "
                "VANCETOPE_RAG_MONGO_SEARCH_NODE_PREFERENCE=false to stop trying)",
                exc,
            )
            self.node_preference = False
        return list(search.aggregate(pipeline))

    def everywhere(self, scope: RagScope, pipeline: list[dict[str, Any]]) -> Iterator[list[Any]]:
        """A probe's answer from every node slot queries of ``scope`` may read (one answer
        without ``node_preference``), lazily: a caller stops at the first that lacks."""
        for slot in range(self.node_spread if self.node_preference else 1):
            yield self.aggregate(scope, pipeline, slot=slot)

    def warn_unpinned(self, info: Any) -> None:
        """Once: several search nodes, searched without ``searchNodePreference``."""
        nodes = len((info or {}).get("statusDetail") or [])
        if nodes > 1 and not self.node_preference and not self._warned_nodes:
            self._warned_nodes = True
            log.warning(
                "this cluster has %s search nodes and searchNodePreference is off: a query on "
                "a node lagging past the search grace can show a source with no chunks; set "
                "VANCETOPE_RAG_MONGO_SEARCH_NODE_PREFERENCE=true",
                nodes,
            )

    def text_serves(self, dim: int) -> bool:
        """Does the text index of ``dim`` serve queries (so a probe must ask it too)?"""
        try:
            self.require_queryable(dim, ix.TEXT_INDEX)
        except StoreError:  # no text index (yet): nothing to wait for there
            return False
        return True

    def uses_atlas(self) -> bool:
        """Resolve ``auto`` once: does this server have Atlas Search?"""
        if self.mode == "auto":
            try:
                # the schema collection exists once the store is open
                list(self.db["schema"].list_search_indexes())
                mode: VectorSearchMode = "atlas"
            except OperationFailure as exc:
                if exc.code == 26:  # NamespaceNotFound: the stage itself is understood
                    mode = "atlas"
                elif search_unsupported(exc):
                    log.warning("no Atlas Search on this server (%s); ranking exactly", exc)
                    mode = "exact"
                else:
                    raise store_error(exc, "checking for Atlas Search") from exc
            except (NotImplementedError, TypeError, AttributeError) as exc:
                # a client without the API (mongomock, an old pymongo) or a bug: never a
                # reason to rank every query in the client (open_mongo_store picks exact
                # for mongomock itself)
                raise StoreError(
                    "cannot tell whether this MongoDB server has Atlas Search: the client "
                    f"failed to list search indexes ({type(exc).__name__}: {exc}); use "
                    "pymongo 4.10 or later (pip install 'vancetope-rag[mongodb]'), or pass "
                    "vector_search='exact' to rank without Atlas Search"
                ) from exc
            self.mode = mode
        return self.mode == "atlas"

    # -- indexes ---------------------------------------------------------------------------

    def require_queryable(self, dim: int, index: str) -> None:
        """Fail fast (no wait) unless ``index`` of ``dim`` can serve queries (asked of the
        server at most every ``queryable_ttl_s``)."""
        key = (dim, index)
        if self._queryable.get(key, float("-inf")) > self._monotonic():
            return
        collection = self.collection(dim)
        info = ix.find_search_index(collection, index)
        if info is None:
            raise StoreError(
                f"the Atlas search index {index!r} on {collection.name!r} does not exist; run "
                "`vancetope-rag --store <uri> init --wait` once (it creates the collections "
                "and search indexes for every embedding dimension)"
            )
        if not info.get("queryable"):
            raise StoreError(
                f"the Atlas search index {index!r} on {collection.name!r} is still being built "
                f"(status {info.get('status', 'unknown')}); queries work once it is READY — "
                "`vancetope-rag --store <uri> init --wait` waits for it"
            )
        with self._lock:
            self._queryable[key] = self._monotonic() + self.queryable_ttl_s

    def recheck_empty(self, scope: RagScope, index: str, match: dict[str, Any]) -> None:
        """A search of ``scope`` answered nothing: if chunks ``match`` there (on the primary),
        ask the server again whether ``index`` serves (raises when it no longer does). Chunks
        written moments ago that search does not show yet pass: the index is queryable."""
        if self.collection(scope.dimension).find_one(match, {"_id": 1}) is None:
            return
        with self._lock:
            self._queryable.pop((scope.dimension, index), None)
        self.require_queryable(scope.dimension, index)

    def prepare(self, dim: int) -> None:
        """Create the collection, B-tree and search indexes of ``dim`` if missing (no wait)."""
        if dim in self._prepared:
            return
        name = ix.chunk_collection(dim)
        ix.ensure_collection(self.db, name)
        collection = self.collection(dim)
        ix.create_btree_indexes(collection, ix.chunk_index_models())
        if ix.is_sharded(self.db):  # a RAG of a new dimension on a sharded cluster
            ix.shard_chunks(self.db, name)
        if self.uses_atlas():
            for model in ix.search_index_models(dim):
                ix.ensure_search_index(collection, model)
        with self._lock:
            self._prepared.add(dim)

    def ready(self, dim: int) -> bool:
        """May the indexer write chunks of ``dim``? Both search indexes serve queries, and
        every search node serves their latest definition READY — or the nodes that do not
        have lagged for :attr:`node_hold_s` already (as this process saw them): a search node
        building after a scale-out or an index update then degrades the queries it serves
        (the sweep's probes wait for what it lacks), not every tenant's indexing. A verdict
        of ready is trusted :attr:`ready_ttl_s`, then asked of the server again."""
        if not self.uses_atlas():
            return True
        now = self._monotonic()
        if self._ready.get(dim, float("-inf")) > now:
            return True
        collection = self.collection(dim)
        verdicts = [  # both asked: each index's lagging node is timed from the same tick
            self._serves(dim, name, ix.find_search_index(collection, name), now)
            for name in (ix.VECTOR_INDEX, ix.TEXT_INDEX)
        ]
        ready = all(verdicts)
        if ready:
            with self._lock:
                self._ready[dim] = now + self.ready_ttl_s
        return ready

    def _serves(self, dim: int, name: str, info: Any, now: float) -> bool:
        """One index's part of :meth:`ready`."""
        self.warn_unpinned(info)
        if ix.is_ready(info):
            for key in [k for k in self._lagging_since if k[:2] == (dim, name)]:
                del self._lagging_since[key]
            return True
        status = str((info or {}).get("status", "DOES_NOT_EXIST"))
        if not info or not info.get("queryable") or status in ("FAILED", "STALE"):
            return False  # not built anywhere yet, or broken: nothing to index for
        lagging = ix.lagging_node(info) or (status, f"the index is {status}")
        key = (dim, name, lagging[1].split(" ", 1)[0])
        with self._lock:
            since = self._lagging_since.setdefault(key, now)
        if now - since < self.node_hold_s:
            return False
        log.warning(
            "search index %s of dimension %s: %s for %.0f s; indexing goes on (queries that "
            "node serves may miss the newest chunks until it catches up)",
            name,
            dim,
            lagging[1],
            now - since,
        )
        return True

    def forget(self, dim: int) -> None:
        """Drop what is cached about ``dim`` (after init changed its indexes)."""
        with self._lock:
            self._ready.pop(dim, None)
            self._prepared.discard(dim)
            for key in [k for k in self._queryable if k[0] == dim]:
                del self._queryable[key]

    # -- queries ---------------------------------------------------------------------------

    def prefer_exact(self, scope: RagScope) -> bool:
        """Exact (ENN) for this scope? Estimated from counts, cached ``estimate_ttl_s``."""
        key = (scope.tenant_id, scope.project_id, scope.rag_id)
        now = self._monotonic()
        cached = self._estimates.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        collection = self.collection(scope.dimension)
        total = int(collection.estimated_document_count())
        # counting stops past the ENN threshold: only "small or not" matters
        limit = max(mq.EXACT_MAX_CHUNKS, self.exact_max_chunks) + 1
        in_scope = int(collection.count_documents(mq.scope_match(scope), limit=limit))
        exact = mq.prefer_exact(in_scope, total, max_selective=self.exact_max_chunks)
        with self._lock:
            self._estimates[key] = (now + self.estimate_ttl_s, exact)
        return exact

    def visible(self, scope: RagScope, source_ref: str, version: int) -> bool:
        """Does ``$vectorSearch`` (and ``$search``, when its index serves) see every chunk of
        chunk version ``version`` of a source yet?"""
        collection = self.collection(scope.dimension)
        count = int(
            collection.count_documents(
                {**mq.scope_match(scope), "sourceRef": source_ref, "gen": version}
            )
        )
        if count == 0 or not self.uses_atlas():
            return True
        want = min(count, mq.MAX_NUM_CANDIDATES)
        probes = [mq.build_probe_pipeline(scope, source_ref, version, count, scope.dimension)]
        if self.text_serves(scope.dimension):
            probes.append(build_text_probe_pipeline(scope, source_ref, version, count))
        try:
            return all(len(rows) >= want for p in probes for rows in self.everywhere(scope, p))
        except OperationFailure as exc:
            # e.g. the index still serves a definition without ``gen`` as a filter field
            log.info("cannot probe chunk version %s of %s yet: %s", version, source_ref, exc)
            return False

    def sees_scope(self, scope: RagScope, collection: Any) -> bool:
        """Do ``$vectorSearch`` (and ``$search``, when its index serves) see the newest
        chunk version of the sources of the scope written last, as written to ``collection``?
        A probe per group of a bounded sample of sources (:mod:`.mongo.builders.probes`);
        always true without Atlas Search."""
        if not self.uses_atlas():
            return True
        by_source = mp.written(collection.aggregate(mp.chunk_version_counts_pipeline(scope)))
        if not by_source:
            return True
        text = self.text_serves(scope.dimension)
        sampled = mp.sample_sources(by_source, self.probe_chunks)
        try:
            for group in mp.source_groups(sampled):
                limit = sum(by_source[s][2] for s in group)
                for pipeline in mp.scope_probe_pipelines(scope, group, limit, text=text):
                    for rows in self.everywhere(scope, pipeline):
                        if not mp.sees_all(by_source, group, rows):
                            return False
        except OperationFailure as exc:
            log.info("cannot probe %s yet: %s", scope.rag_id, exc)
            return False
        return True
