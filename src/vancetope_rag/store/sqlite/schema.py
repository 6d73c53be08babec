"""The SQLite store's schema: its version and the schema upgrades that reach it, in order.

Pure data; :mod:`.sqlite.db` runs them in one transaction when it opens a file.
"""

from __future__ import annotations

SCHEMA_VERSION = 13

#: Ordered schema upgrades; index i brings the schema from version i to i + 1. Never edit a shipped
#: entry: add a new one.
UPGRADES: tuple[str, ...] = (
    """
    CREATE TABLE projects (
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        status TEXT NOT NULL,
        home_node TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (tenant_id, project_id)
    );
    CREATE TABLE documents (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        path TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        content TEXT NOT NULL,
        summary TEXT,
        rag_enabled INTEGER,
        rag_dirty INTEGER NOT NULL DEFAULT 0,
        rag_claimed_by TEXT,
        rag_claimed_at REAL,
        rag_version INTEGER NOT NULL DEFAULT 0,
        index_state TEXT NOT NULL DEFAULT 'none',
        index_attempts INTEGER NOT NULL DEFAULT 0,
        index_last_error TEXT,
        index_next_attempt_at REAL,
        indexed_at REAL,
        content_hash TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        UNIQUE (tenant_id, project_id, path)
    );
    CREATE INDEX tenant_project_rag_claim_idx
        ON documents (tenant_id, project_id, rag_dirty, rag_claimed_by);
    CREATE TABLE rags (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        name TEXT NOT NULL,
        title TEXT,
        description TEXT,
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        embedding_dimension INTEGER NOT NULL,
        chunk_size INTEGER NOT NULL,
        chunk_overlap INTEGER NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (tenant_id, project_id, name)
    );
    CREATE TABLE settings (
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL DEFAULT '',
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (tenant_id, project_id, key)
    );
    CREATE TABLE embedding_cache (
        model_key TEXT NOT NULL,
        text_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (model_key, text_hash)
    ) WITHOUT ROWID;
    CREATE TABLE chunks (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        rag_id TEXT NOT NULL,
        source_ref TEXT NOT NULL,
        kind TEXT NOT NULL,
        path TEXT,
        text TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        dim INTEGER NOT NULL
    );
    CREATE INDEX chunks_scope_idx ON chunks (tenant_id, project_id, rag_id, source_ref);
    -- bumped in the same transaction as every chunk write of a RAG: lets in-process caches
    -- of that RAG's vectors know they are stale with one cheap read.
    CREATE TABLE rag_generations (
        rag_id TEXT PRIMARY KEY,
        generation INTEGER NOT NULL
    );
    """,
    # 2: what a document's chunks were built from (content, summary, RAG, chunking), so a
    # reindex with nothing changed marks it clean without rewriting its chunks.
    """
    ALTER TABLE documents ADD COLUMN rag_indexed_hash TEXT;
    """,
    # 3: fencing tokens. A claim draws a token from one increasing sequence; the indexer
    # writes a source's chunks under it, and a write older than the source's last is dropped
    # (the same port semantics as the MongoDB store, which has no transactions to rely on).
    """
    ALTER TABLE documents ADD COLUMN rag_claim_token INTEGER;
    CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE source_generations (
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        rag_id TEXT NOT NULL,
        source_ref TEXT NOT NULL,
        generation INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, project_id, rag_id, source_ref)
    ) WITHOUT ROWID;
    """,
    # 4: the last indexing pass took a text only up to the engine's limit (max_text_chars).
    """
    ALTER TABLE documents ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;
    """,
    # 5: the lexical (BM25) index of chunk texts, backfilled from the chunks already stored.
    # Contentless (the text stays in `chunks` only) with deletes by rowid; `scope` holds one
    # token per chunk naming its tenant, project and RAG (store/sqlite/bm25.py, scope_token).
    # Two counters: a store-wide chunk epoch (statistics caches; stored as chunk_generation)
    # and the rowid high-water mark: chunk rowids are never reused, so an in-process index
    # can trust them.
    """
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        scope, text, content='', contentless_delete=1,
        tokenize="porter unicode61 remove_diacritics 2 tokenchars '_'"
    );
    INSERT INTO chunks_fts (rowid, scope, text)
        SELECT rowid, vtr_scope_token(tenant_id, project_id, rag_id), text FROM chunks;
    INSERT INTO counters (name, value) SELECT 'chunk_rowid', coalesce(max(rowid), 0) FROM chunks;
    INSERT INTO counters (name, value) VALUES ('chunk_generation', 0);
    """,
    # 6: rebuilds without downtime. A RAG name has generations (live, shadow, retired): the
    # table is rebuilt because its inline UNIQUE (tenant, project, name) must hold for live
    # RAGs only. Migrations record each rebuild, migration_items are its per-document queue
    # (claimed like documents); indexed_at is indexed for the progress rate.
    """
    CREATE TABLE rags_v6 (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        name TEXT NOT NULL,
        title TEXT,
        description TEXT,
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        embedding_dimension INTEGER NOT NULL,
        chunk_size INTEGER NOT NULL,
        chunk_overlap INTEGER NOT NULL,
        created_at REAL NOT NULL,
        state TEXT NOT NULL DEFAULT 'live',
        generation INTEGER NOT NULL DEFAULT 1,
        replaces TEXT,
        retired_at REAL
    );
    INSERT INTO rags_v6 (id, tenant_id, project_id, name, title, description,
        embedding_provider, embedding_model, embedding_dimension, chunk_size, chunk_overlap,
        created_at)
    SELECT id, tenant_id, project_id, name, title, description, embedding_provider,
        embedding_model, embedding_dimension, chunk_size, chunk_overlap, created_at FROM rags;
    DROP TABLE rags;
    ALTER TABLE rags_v6 RENAME TO rags;
    CREATE UNIQUE INDEX rags_live_name_uniq ON rags (tenant_id, project_id, name)
        WHERE state = 'live';
    CREATE INDEX rags_name_idx ON rags (tenant_id, project_id, name, generation);
    CREATE TABLE migrations (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        rag_name TEXT NOT NULL,
        from_rag_id TEXT NOT NULL,
        to_rag_id TEXT NOT NULL,
        from_model TEXT NOT NULL,
        to_model TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        max_failure_ratio REAL NOT NULL,
        created_at REAL NOT NULL,
        finished_at REAL
    );
    CREATE UNIQUE INDEX migrations_active_uniq ON migrations (tenant_id, project_id, rag_name)
        WHERE state IN ('running', 'switching');
    CREATE INDEX migrations_name_idx ON migrations (tenant_id, project_id, rag_name, created_at);
    CREATE TABLE migration_items (
        migration_id TEXT NOT NULL,
        document_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        project_id TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        next_attempt_at REAL,
        claimed_by TEXT,
        claimed_at REAL,
        claim_token INTEGER,
        doc_version INTEGER,
        indexed_hash TEXT,
        completed_at REAL,
        PRIMARY KEY (migration_id, document_id)
    ) WITHOUT ROWID;
    CREATE INDEX migration_items_claim_idx ON migration_items (migration_id, state);
    CREATE INDEX migration_items_document_idx
        ON migration_items (tenant_id, project_id, document_id);
    CREATE INDEX documents_indexed_at_idx ON documents (tenant_id, project_id, indexed_at);
    """,
    # 6 -> 7: what an import's text extraction recorded (JSON: hashes, fingerprint, sections).
    """
    ALTER TABLE documents ADD COLUMN extraction TEXT;
    """,
    # 7 -> 8: the metadata the host saved with a document (JSON object text; the indexer
    # copies it into the document's chunks). Documents written before have none.
    """
    ALTER TABLE documents ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    """,
    # 8 -> 9: the import a document came from (its sync prunes by it), and why the last read
    # of its file failed (kept through reindexes: "needs attention").
    """
    ALTER TABLE documents ADD COLUMN import_origin TEXT;
    ALTER TABLE documents ADD COLUMN extraction_error TEXT;
    CREATE INDEX documents_attention_idx ON documents (tenant_id, project_id, path)
        WHERE extraction_error IS NOT NULL;
    """,
    # 9 -> 10: minScore: auto: the RAG's measured noise floor (JSON of
    # domain.retrieval.calibration.Calibration; NULL: not calibrated yet).
    """
    ALTER TABLE rags ADD COLUMN calibration TEXT;
    """,
    # 10 -> 11: the model profile a RAG pinned (JSON object text); RAGs created before have
    # none: they keep the empty profile (no prefixes, the old window) until a rebuild.
    """
    ALTER TABLE rags ADD COLUMN embedding_profile TEXT;
    """,
    # 11 -> 12: the indexer workers' heartbeats (see domain.heartbeats); times in epoch
    # seconds on the store's clock, stopped_at NULL while a worker runs.
    """
    CREATE TABLE IF NOT EXISTS workers (
        worker_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        version TEXT NOT NULL,
        interval_s REAL NOT NULL,
        started_at REAL NOT NULL,
        last_tick REAL NOT NULL,
        stopped_at REAL
    ) WITHOUT ROWID;
    """,
    # 12 -> 13: each worker's open provider circuits (JSON of domain.heartbeats.OpenCircuit
    # list; NULL: none), so any process's status shows the pause a worker met.
    """
    ALTER TABLE workers ADD COLUMN circuits TEXT;
    """,
)
