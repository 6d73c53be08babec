"""Engine configuration: how this process runs (store, indexer, retrieval defaults, API secret).

Read from the environment with the ``VANCETOPE_RAG_`` prefix; the ``RAG_*`` names operators of
similar systems know (``RAG_INDEXER_BATCH``, ``RAG_CHUNK_SIZE``, ``RAG_RETRIEVAL_TOP_K``, …) are
accepted as aliases. Per-tenant and per-project behaviour lives in cascade settings instead
(:mod:`vancetope_rag.domain.settings.registry`).
"""

from __future__ import annotations

import os
import socket
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from vancetope_rag.domain import limits
from vancetope_rag.domain.retrieval.calibration import AUTO, MinScore, parse_min_score
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.errors import InvalidInputError


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


def _default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class EngineConfig(BaseSettings):
    """Process-wide configuration. Pass it explicitly; nothing below reads the environment."""

    model_config = SettingsConfigDict(
        env_prefix="VANCETOPE_RAG_", extra="ignore", populate_by_name=True
    )

    store: str = Field(
        default="sqlite:///vancetope-rag.db",
        description="Store URI: sqlite:///path/rag.db, postgresql://… or mongodb://… / "
        "mongodb+srv://…",
    )
    node_id: str = Field(
        default_factory=_default_node_id,
        description="This process's node name: scheduler serves projects homed here.",
    )
    rag_enabled: bool = Field(
        default=True,
        validation_alias=_env("VANCETOPE_RAG_RAG_ENABLED", "RAG_ENABLED"),
        description="Global switch for chat-time injection (AutoInject).",
    )
    indexer_enabled: bool = Field(
        description="Run the background indexer (scheduler); explicit `index` runs work "
        "either way.",
        default=True,
        validation_alias=_env("VANCETOPE_RAG_INDEXER_ENABLED", "RAG_INDEXER_ENABLED"),
    )
    indexer_interval_s: float = Field(
        description="Seconds between indexer ticks.",
        default=30.0,
        gt=0,
        validation_alias=_env("VANCETOPE_RAG_INDEXER_INTERVAL_S", "RAG_INDEXER_POLL_SECONDS"),
    )
    indexer_wake_delay_s: float = Field(
        description="A saved document wakes the indexer early: it ticks this many seconds "
        "after the wake-up (saves meanwhile join that tick), so never sooner than this after "
        "its last tick ended. 0: at once.",
        default=0.25,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_INDEXER_WAKE_DELAY_S"),
    )
    indexer_initial_delay_s: float = Field(
        description=(
            "Seconds after the background indexer starts (`app.scheduler.start()`, `worker`, "
            "`serve --with-indexer`) before its first tick: documents saved meanwhile wait "
            "for it. `index` runs and `scheduler.run_until_idle()` are not delayed."
        ),
        default=60.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S"),
    )
    indexer_batch_size: int = Field(
        description="Documents claimed per project per tick.",
        default=10,
        ge=1,
        le=1000,
        validation_alias=_env("VANCETOPE_RAG_INDEXER_BATCH_SIZE", "RAG_INDEXER_BATCH"),
    )
    turn_workers: int = Field(
        description="Threads that run async chat turns (RagApp.apre_turn), apart from the "
        "event loop's default executor; raise it for remote embedding providers, whose "
        "turns mostly wait.",
        default=8,
        ge=1,
        le=256,
        validation_alias=_env("VANCETOPE_RAG_TURN_WORKERS"),
    )
    claim_ttl_s: float = Field(
        description="Seconds a worker's claim on a document lasts; then another worker may "
        "take it.",
        default=600.0,
        gt=0,
        validation_alias=_env("VANCETOPE_RAG_CLAIM_TTL_S"),
    )
    store_busy_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        validation_alias=_env("VANCETOPE_RAG_STORE_BUSY_TIMEOUT_S"),
        description="SQLite: how long a statement waits for another process's lock before "
        "it fails (a store error).",
    )
    postgres_schema: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$",
        validation_alias=_env("VANCETOPE_RAG_POSTGRES_SCHEMA"),
        description="PostgreSQL: the schema the store lives in (its `search_path`), where "
        "the store URI has no `schema=`. Unset: the role's `search_path`.",
    )
    postgres_pool_size: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        validation_alias=_env("VANCETOPE_RAG_POSTGRES_POOL_SIZE"),
        description="PostgreSQL: connections this process opens at most, where the store "
        "URI has no `pool_size=`. Unset: 8.",
    )
    postgres_statement_timeout_ms: int | None = Field(
        default=None,
        ge=1,
        validation_alias=_env("VANCETOPE_RAG_POSTGRES_STATEMENT_TIMEOUT_MS"),
        description="PostgreSQL: a statement running longer is cancelled (a store error), "
        "where the store URI has no `statement_timeout_ms=`. Unset: 60,000.",
    )
    postgres_sslmode: (
        Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None
    ) = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_POSTGRES_SSLMODE"),
        description="PostgreSQL: libpq's `sslmode`, where the store URI has none. Unset: "
        "libpq's default (`prefer`).",
    )
    postgres_vector_index: Literal["hnsw", "none"] | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_POSTGRES_VECTOR_INDEX"),
        description="PostgreSQL: `hnsw` builds an HNSW index per chunk table, `none` ranks "
        "every scope by an exact scan; where the store URI has no `vector_index=`. Unset: "
        "`hnsw`.",
    )
    mongo_search_grace_s: float = Field(
        default=10.0,
        ge=0,
        le=86_400,
        validation_alias=_env("VANCETOPE_RAG_MONGO_SEARCH_GRACE_S"),
        description="MongoDB Atlas: seconds search must have shown a write before what it "
        "replaces goes (a replaced chunk version is swept, a rebuilt generation goes live): "
        "the lag allowed between the search node probed and the nodes queries read. With "
        "Dedicated Search Nodes use 60 or more.",
    )
    mongo_search_node_preference: bool = Field(
        default=True,
        validation_alias=_env("VANCETOPE_RAG_MONGO_SEARCH_NODE_PREFERENCE"),
        description="MongoDB Atlas: route a RAG's searches with `searchNodePreference`: a "
        "chat turn reads one search node, a RAG's turns are spread over two, and the sweep's "
        "probes ask both, so a node lagging past the grace never shows a source with no "
        "chunks. A no-op without Search Nodes; a cluster that refuses the field is searched "
        "without it.",
    )
    mongo_exact_max_chunks: int = Field(
        default=20_000,
        ge=10_000,
        le=1_000_000,
        validation_alias=_env("VANCETOPE_RAG_MONGO_EXACT_MAX_CHUNKS"),
        description="MongoDB Atlas: a RAG holding at most 5% of its dimension's chunks is "
        "searched exactly (ENN: the recall of approximate search drops behind a selective "
        "filter) up to this many chunks; larger ones approximately. An exact search reads "
        "every vector of the RAG on the search node. RAGs of at most 10,000 chunks are always "
        "searched exactly.",
    )
    max_store_failures: int = Field(
        default=5,
        ge=1,
        le=10_000,
        validation_alias=_env("VANCETOPE_RAG_MAX_STORE_FAILURES"),
        description="Consecutive indexer ticks the store may fail before the background "
        "indexer stops (`worker` then exits with status 1, for its supervisor to see), and "
        "before `index --until-idle` gives up (status 1 as well).",
    )
    max_attempts: int = Field(
        description="Indexing attempts of one document version before it is marked failed.",
        default=5,
        ge=1,
        le=100,
        validation_alias=_env("VANCETOPE_RAG_MAX_ATTEMPTS"),
    )
    retry_backoff_s: float = Field(
        description="First wait before a failed document is retried (doubles each attempt).",
        default=30.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_RETRY_BACKOFF_S"),
    )
    retry_backoff_max_s: float = Field(
        description="Longest wait between retries of a failed document.",
        default=3600.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_RETRY_BACKOFF_MAX_S"),
    )
    provider_retry_s: float = Field(
        description="An embedding provider found down (connection refused, timeout, 5xx, "
        "429) is tried again after this many seconds, doubling while it stays down; its "
        "projects' indexing pauses meanwhile and no document spends an attempt. A "
        "Retry-After header asking for longer is honoured.",
        default=2.0,
        gt=0,
        validation_alias=_env("VANCETOPE_RAG_PROVIDER_RETRY_S"),
    )
    provider_retry_max_s: float = Field(
        description="Longest wait between tries of an embedding provider that is down: "
        "indexing resumes at most this long after it is back.",
        default=30.0,
        gt=0,
        validation_alias=_env("VANCETOPE_RAG_PROVIDER_RETRY_MAX_S"),
    )
    retired_grace_s: float = Field(
        default=300.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_RETIRED_GRACE_S"),
        description="How long a generation a rebuild replaced keeps its chunks: a reader "
        "that looked the RAG up just before the switch still finds them.",
    )
    chunk_size: int | None = Field(
        default=None,
        ge=16,
        validation_alias=_env("VANCETOPE_RAG_CHUNK_SIZE", "RAG_CHUNK_SIZE"),
        description="Chunk size in the model's tokens; default: fits the model's window.",
    )
    chunk_overlap: int | None = Field(
        description="Tokens shared by neighbouring chunks; default: what suits the model.",
        default=None,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_CHUNK_OVERLAP", "RAG_CHUNK_OVERLAP"),
    )
    retrieval_top_k: int = Field(
        description="Hits per query when neither a recipe nor rag.topK says.",
        default=5,
        ge=1,
        le=limits.TOP_K_MAX,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_TOP_K", "RAG_RETRIEVAL_TOP_K"),
    )
    retrieval_min_score: MinScore = Field(
        # A number means one thing for one model only (docs/benchmarks.md, "minScore: auto"):
        # auto is each RAG's own calibrated noise floor.
        default=AUTO,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_MIN_SCORE", "RAG_RETRIEVAL_MIN_SCORE"),
        description="Cosine threshold when neither a recipe nor rag.minScore says: auto (the "
        "threshold calibrated for each RAG's model and chunks) or a number from -1 to 1.",
    )
    retrieval_max_per_doc: int = Field(
        description="Hits per document when neither a recipe nor rag.maxPerDocument says.",
        default=2,
        ge=1,
        le=limits.MAX_PER_DOCUMENT_MAX,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_MAX_PER_DOC", "RAG_RETRIEVAL_MAX_PER_DOC"),
    )
    retrieval_rrf_k: float = Field(
        # SciFact (docs/benchmarks.md, "Hybrid retrieval"): nDCG@10 varies by < 0.005 over
        # k = 10..30; 20 sits in the middle of that plateau.
        default=20.0,
        gt=0,
        le=1000,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_RRF_K"),
        description="Reciprocal-rank fusion constant k of hybrid retrieval.",
    )
    retrieval_rrf_dense_weight: float = Field(
        description="Weight of the dense (vector) list in hybrid fusion.",
        default=1.0,
        ge=0,
        le=100,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_RRF_DENSE_WEIGHT"),
    )
    retrieval_rrf_lexical_weight: float = Field(
        description="Weight of the lexical (BM25) list in hybrid fusion.",
        default=1.0,
        ge=0,
        le=100,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_RRF_LEXICAL_WEIGHT"),
    )
    retrieval_hybrid_depth: int = Field(
        default=100,
        ge=1,
        le=1000,
        validation_alias=_env("VANCETOPE_RAG_RETRIEVAL_HYBRID_DEPTH"),
        description="Candidates each side of a hybrid query returns at least.",
    )
    turn_deadline_s: float = Field(
        default=5.0,
        gt=0,
        le=300,
        validation_alias=_env("VANCETOPE_RAG_TURN_DEADLINE_S"),
        description="Seconds a chat turn's retrieval (AutoInject's pre-turn step) may spend "
        "in the store; a search still running then is abandoned and the block skipped, the "
        "turn goes on (MongoDB: each operation gets the time left instead of the client's "
        "30 s timeout).",
    )
    autoinject_max_tokens: int = Field(
        default=limits.AUTOINJECT_MAX_TOKENS,
        ge=limits.AUTOINJECT_MAX_TOKENS_MIN,
        le=limits.AUTOINJECT_MAX_TOKENS_MAX,
        validation_alias=_env("VANCETOPE_RAG_AUTOINJECT_MAX_TOKENS"),
        description="Default token budget of the <rag-context> block (cl100k_base tokens).",
    )
    max_text_chars: int = Field(
        default=limits.MAX_TEXT_CHARS,
        ge=limits.MAX_TEXT_CHARS_MIN,
        le=limits.HARD_MAX_TEXT_CHARS,  # no text is ever held longer than that
        validation_alias=_env("VANCETOPE_RAG_MAX_TEXT_CHARS", "VANCETOPE_RAG_EXTRACT_MAX_CHARS"),
        description="The longest text taken anywhere, in characters: the rag_* tools and the "
        "REST API refuse longer text; a longer document (document_saved, import) is indexed "
        "up to it and marked truncated. VANCETOPE_RAG_EXTRACT_MAX_CHARS is an alias.",
    )
    doc_vision_fallback_enabled: bool = Field(
        default=False,
        validation_alias=_env(
            "VANCETOPE_RAG_DOC_VISION_FALLBACK_ENABLED", "DOC_VISION_FALLBACK_ENABLED"
        ),
        description="Vision fallback for tenants and projects that leave "
        "rag.extract.vision.fallback empty: scans the local reading leaves without text go "
        "to the vision model.",
    )
    doc_vision_model: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_DOC_VISION_MODEL", "DOC_VISION_MODEL"),
        description="Vision model for tenants and projects that leave "
        "rag.extract.vision.model empty.",
    )
    rag_embedding_model: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_EMBEDDING_MODEL", "RAG_EMBEDDING_MODEL"),
        description="Legacy: the embedding model of a provider that needs one (openai, "
        "gemini) when ai.embedding.model is set at no scope; a final fallback beneath the "
        "cascade, shown as such by `settings get`.",
    )
    extract_retry_s: float = Field(
        default=60.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_EXTRACT_RETRY_S"),
        description="A file whose read failed for the machine's sake (the tesseract program "
        "missing, the vision model unreachable, the time limit) is read again from its "
        "import's folder after this many seconds, doubling each time, by the background "
        "indexer; any import of the folder reads it again at once.",
    )
    extract_retry_max_s: float = Field(
        default=3600.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_EXTRACT_RETRY_MAX_S"),
        description="Longest wait between two background reads of such a file.",
    )
    extract_retry_max_attempts: int = Field(
        default=10,
        ge=0,
        le=1000,
        validation_alias=_env("VANCETOPE_RAG_EXTRACT_RETRY_MAX_ATTEMPTS"),
        description="Background reads of such a file at most; then only an import reads it "
        "again (a file that always hits the time limit stops costing a worker).",
    )
    bridge_max_chars: int | None = Field(
        default=None,
        ge=1,
        validation_alias=_env("VANCETOPE_RAG_BRIDGE_MAX_CHARS", "MM_BRIDGE_MAX_CHARS"),
        description="Characters one files_visualize answer returns where rag.bridge.maxChars "
        "is not set. Unset: 40,000; capped at 120,000 whatever is set.",
    )
    bridge_vision_max_pages: int | None = Field(
        default=None,
        ge=1,
        validation_alias=_env("VANCETOPE_RAG_BRIDGE_VISION_MAX_PAGES", "DOC_VISION_MAX_PAGES"),
        description="Pages or images one files_visualize answer sends to the vision model "
        "where rag.bridge.visionMaxPages is not set. Unset: 2; capped at 6.",
    )
    bridge_max_frames: int | None = Field(
        default=None,
        ge=1,
        validation_alias=_env("VANCETOPE_RAG_BRIDGE_MAX_FRAMES", "MM_BRIDGE_MAX_FRAMES"),
        description="Video frames one files_visualize answer describes where "
        "rag.bridge.maxFrames is not set. Unset: 6; capped at 12.",
    )
    bridge_cache_dir: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_BRIDGE_CACHE_DIR"),
        description="Folder of files_visualize's result cache (by file hash and effective "
        "configuration: a repeated call pays no vision call). Unset: beside a SQLite store "
        "file (<store>.bridge), else ~/.cache/vancetope-rag/bridge.",
    )
    workspaces_dir: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_WORKSPACES_DIR"),
        description="Folder holding <tenant>/<project>/ workspaces for rag_add_workspace_file.",
    )
    torch_threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        validation_alias=_env("VANCETOPE_RAG_TORCH_THREADS"),
        description="Threads for the in-process model; 1 when several processes share a "
        "small host (oversubscribed threads make a query embedding 15-28x slower).",
    )
    embedded_backend: Literal["auto", "torch", "onnx"] = Field(
        default="auto",
        validation_alias=_env("VANCETOPE_RAG_EMBEDDED_BACKEND"),
        description="What computes the embedded model's embeddings: onnx (ONNX Runtime, the "
        "'onnx' extra), torch, or auto, which measures both once per machine and keeps the "
        "faster for queries (and for indexing batches when 1.2x faster); auto and onnx also "
        "micro-batch concurrent query embeddings where one call of 16 queries is 1.2x "
        "faster than 16 calls (a forced torch does not). Vectors are the same either way (an "
        "export is checked against torch).",
    )
    embedded_cache_dir: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_EMBEDDED_CACHE_DIR"),
        description="Folder of the embedded model's ONNX export and the auto choice; unset = "
        "~/.cache/vancetope-rag/embedded.",
    )
    kernel_cache_dir: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_KERNEL_CACHE_DIR"),
        description="Folder of the SQLite vector cache's kernel choice, measured once per "
        "machine (CPU, threads, versions) and vector dimension; unset = "
        "~/.cache/vancetope-rag/kernels.",
    )
    embedded_cache_readonly_dir: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_EMBEDDED_CACHE_READONLY_DIR"),
        description="A folder read before the cache folder and never written, e.g. one that "
        "`vancetope-rag prepare` filled when the image was built.",
    )
    plugins: str | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_PLUGINS"),
        description="Comma-separated entry-point names of plugins to load; unset = all.",
    )
    jwt_secret: SecretStr | None = Field(
        description="HS256 secret of the REST API's bearer tokens (at least 32 random bytes); "
        "the API refuses to start without one.",
        default=None,
        validation_alias=_env("VANCETOPE_RAG_JWT_SECRET"),
    )
    api_writes_per_minute: int = Field(
        default=60,
        ge=0,
        le=1_000_000,
        validation_alias=_env("VANCETOPE_RAG_API_WRITES_PER_MINUTE"),
        description="Requests per minute one token subject may send to the REST API's write "
        "routes of one project (reindex, rebuild cancel, document override, test query), in "
        "bursts of up to a minute's worth; more answer 429 with Retry-After. 0: no limit.",
    )
    metrics_token: SecretStr | None = Field(
        default=None,
        validation_alias=_env("VANCETOPE_RAG_METRICS_TOKEN"),
        description="When set, GET /metrics needs 'Authorization: Bearer <token>'.",
    )
    metrics_state_ttl_s: float = Field(
        default=10.0,
        ge=0,
        validation_alias=_env("VANCETOPE_RAG_METRICS_STATE_TTL_S"),
        description="Seconds a scrape's document and rebuild counts (read from the store) "
        "are reused by the next scrapes: scrapes stay cheap however often they come.",
    )

    def store_uri_defaults(self) -> dict[str, str]:
        """Query parameters the store URI gets from these settings where it has none."""
        if urlparse(self.store).scheme not in ("postgresql", "postgres"):
            return {}
        given = {
            "schema": self.postgres_schema,
            "pool_size": self.postgres_pool_size,
            "statement_timeout_ms": self.postgres_statement_timeout_ms,
            "sslmode": self.postgres_sslmode,
            "vector_index": self.postgres_vector_index,
        }
        return {k: str(v) for k, v in given.items() if v is not None}

    def mongo_options(self) -> dict[str, Any]:
        """Keyword options of :func:`~vancetope_rag.store.mongo.client.open_mongo_store`."""
        return {
            "search_grace_s": self.mongo_search_grace_s,
            "search_node_preference": self.mongo_search_node_preference,
            "exact_max_chunks": self.mongo_exact_max_chunks,
        }

    def fusion(self) -> FusionParams:
        """The hybrid retrieval's fusion parameters."""
        return FusionParams(
            k=self.retrieval_rrf_k,
            dense_weight=self.retrieval_rrf_dense_weight,
            lexical_weight=self.retrieval_rrf_lexical_weight,
            depth=self.retrieval_hybrid_depth,
        )

    def provider_options(self) -> dict[str, object]:
        """The settings embedding providers take (see ``EmbeddingRegistry.configure``)."""
        return {
            "embedded_backend": self.embedded_backend,
            "embedded_cache_dir": self.embedded_cache_dir,
            "embedded_cache_readonly_dir": self.embedded_cache_readonly_dir,
            "torch_threads": self.torch_threads,
        }

    def bridge_environment(self) -> dict[str, int | None]:
        """The files_visualize budgets' environment defaults, by their spec names."""
        return {
            "MM_BRIDGE_MAX_CHARS": self.bridge_max_chars,
            "DOC_VISION_MAX_PAGES": self.bridge_vision_max_pages,
            "MM_BRIDGE_MAX_FRAMES": self.bridge_max_frames,
        }

    def allowed_plugins(self) -> list[str] | None:
        if self.plugins is None:
            return None
        return [p.strip() for p in self.plugins.split(",") if p.strip()]

    @field_validator("retrieval_min_score", mode="before")
    @classmethod
    def _min_score(cls, value: object) -> object:
        try:
            return parse_min_score(value, "RAG_RETRIEVAL_MIN_SCORE")
        except InvalidInputError as exc:
            raise ValueError(exc.message) from None

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if (
            self.chunk_size is not None
            and self.chunk_overlap is not None
            and self.chunk_overlap >= self.chunk_size
        ):
            raise ValueError("RAG_CHUNK_OVERLAP must be smaller than RAG_CHUNK_SIZE")
        return self
