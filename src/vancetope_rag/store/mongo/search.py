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
* **Which search node?** With ``node_preference``, every search stage of a RAG carries
  ``searchNodePreference`` keyed by the RAG id (:meth:`SearchSupport.aggregate`), so its
  probes and its queries read the same node (Dedicated Search Nodes lag each other). A
  cluster that refuses the field is told once in the log and asked without it from then on.

Index creation lives in :mod:`.mongo.indexes`; it runs from ``init`` and when a RAG of a new
dimension is created (:meth:`SearchSupport.prepare`), never from a query.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


class SearchSupport:
    """Atlas Search facts of one database, cached for the process (thread-safe).

    Args:
        database: reads on the primary (counts, collection names).
        search_database: where search stages run (the URI's read preference; read concern
            ``local`` is set per collection).
        mode: ``atlas``, ``exact`` or ``auto``.
        estimate_ttl_s: how long a scope's size estimate is trusted.
        node_preference: route each RAG's search stages to one search node.
        exact_max_chunks: the largest selective scope searched exactly.
        queryable_ttl_s: how long an index found queryable is trusted.
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
        exact_max_chunks: int = mq.EXACT_MAX_SELECTIVE,
        queryable_ttl_s: float = 60.0,
    ) -> None:
        if mode not in ("atlas", "exact", "auto"):
            raise StoreError(f"vector_search must be atlas, exact or auto, not {mode!r}")
        self.db = database
        self.search_db = search_database
        self.mode: VectorSearchMode = mode
        self.estimate_ttl_s = estimate_ttl_s
        self.node_preference = node_preference
        self.exact_max_chunks = exact_max_chunks
        self.queryable_ttl_s = queryable_ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        #: (dimension, index) → until when "queryable" is trusted
        self._queryable: dict[tuple[int, str], float] = {}
        self._ready: set[int] = set()
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

    def aggregate(self, scope: RagScope, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run a search pipeline of ``scope`` (on its search node with ``node_preference``)."""
        search = self.search_collection(scope.dimension)
        if not self.node_preference:
            return list(search.aggregate(pipeline))
        try:
            return list(search.aggregate(mq.with_node_preference(pipeline, scope.rag_id)))
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
        if self.uses_atlas():
            for model in ix.search_index_models(dim):
                ix.ensure_search_index(collection, model)
        with self._lock:
            self._prepared.add(dim)

    def ready(self, dim: int) -> bool:
        """Are both search indexes of ``dim`` READY (or is there no Atlas Search to wait for)?"""
        if dim in self._ready or not self.uses_atlas():
            return True
        ready = all(s.ready for s in ix.search_index_statuses(self.collection(dim)))
        if ready:
            with self._lock:
                self._ready.add(dim)
        return ready

    def forget(self, dim: int) -> None:
        """Drop what is cached about ``dim`` (after init changed its indexes)."""
        with self._lock:
            self._ready.discard(dim)
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
            return all(len(self.aggregate(scope, p)) >= want for p in probes)
        except OperationFailure as exc:
            # e.g. the index still serves a definition without ``gen`` as a filter field
            log.info("cannot probe chunk version %s of %s yet: %s", version, source_ref, exc)
            return False

    def sees_scope(self, scope: RagScope, collection: Any) -> bool:
        """Do ``$vectorSearch`` (and ``$search``, when its index serves) see the newest
        chunk version of every source of the scope, as written to ``collection``? A probe per
        group of sources (:mod:`.mongo.builders.probes`); always true without Atlas Search."""
        if not self.uses_atlas():
            return True
        by_source = mp.written(collection.aggregate(mp.chunk_version_counts_pipeline(scope)))
        if not by_source:
            return True
        text = self.text_serves(scope.dimension)
        try:
            for group in mp.source_groups(by_source):
                limit = sum(by_source[s][2] for s in group)
                for pipeline in mp.scope_probe_pipelines(scope, group, limit, text=text):
                    if not mp.sees_all(by_source, group, self.aggregate(scope, pipeline)):
                        return False
        except OperationFailure as exc:
            log.info("cannot probe %s yet: %s", scope.rag_id, exc)
            return False
        return True
