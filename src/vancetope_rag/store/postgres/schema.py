"""The PostgreSQL store's schema: its versioned steps, the chunk table of each embedding
dimension, and ``init`` (:func:`initialize`), the only code that creates any of it.

Columns mirror the SQLite store's (times are seconds since the epoch, flags integers), so
the pure row codecs of :mod:`vancetope_rag.store.sql.rows` read both. Text columns that
are compared or sorted use the ``"C"`` collation: the order is the code-point order SQLite
gives, whatever the database's locale.

Chunks of one dimension live in ``chunks_<dim>``: the row, its ``vector``, and a ``tsvector``
of its folded text with a GIN index (:mod:`.postgres.lexical`), and the vector as ``halfvec``
(``embedding_h``), which the HNSW index (cosine) holds and dense queries order by: half the
memory of a ``vector`` index, one index type up to :data:`HALFVEC_HNSW_MAX` dimensions, and
the candidates it finds are re-ranked on the full-precision vectors (:mod:`.postgres.chunks`),
so scores stay exact cosines.
"""

from __future__ import annotations

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.port.shared import check_schema_version
from vancetope_rag.store.postgres.db import SCHEMA_TABLE, PostgresDatabase

__all__ = [
    "HALFVEC_HNSW_MAX",
    "SCHEMA_VERSION",
    "STEPS",
    "check_dimension",
    "chunk_table",
    "chunk_table_steps",
    "index_expression",
    "initialize",
]

log = get_logger(__name__)

#: pgvector's HNSW index holds ``halfvec`` up to this many dimensions (``vector``: 2,000).
HALFVEC_HNSW_MAX = 4000
#: The HNSW graph's links per node and build-time search list, not pgvector's 16 and 64: at
#: 1M distinct 384-dimension vectors the default graph reached recall@10 0.87 at
#: ``ef_search`` 400 and 0.96 only at 800 (18 ms a scan); this one 0.95 at 400 and 0.98 at 600
#: (9 ms), for 2.8x the build time (548 s against 195 s) (docs/benchmarks.md). An index made
#: before keeps its own; docs/stores.md says how to rebuild it.
HNSW_M, HNSW_EF_CONSTRUCTION = 32, 128

_T = 'TEXT COLLATE "C"'

#: Ordered schema steps; index i brings the schema from version i to i + 1. Never edit a
#: shipped entry: add a new one.
STEPS: tuple[str, ...] = (
    f"""
    CREATE SEQUENCE vtr_sequence;
    CREATE TABLE projects (
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        status {_T} NOT NULL,
        home_node {_T},
        created_at double precision NOT NULL,
        PRIMARY KEY (tenant_id, project_id)
    );
    CREATE TABLE documents (
        id {_T} PRIMARY KEY,
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        path {_T} NOT NULL,
        mime_type {_T} NOT NULL,
        content text NOT NULL,
        summary text,
        rag_enabled integer,
        rag_dirty integer NOT NULL DEFAULT 0,
        rag_claimed_by {_T},
        rag_claimed_at double precision,
        rag_claim_token bigint,
        rag_version integer NOT NULL DEFAULT 0,
        rag_indexed_hash {_T},
        index_state {_T} NOT NULL DEFAULT 'none',
        index_attempts integer NOT NULL DEFAULT 0,
        index_last_error text,
        index_next_attempt_at double precision,
        indexed_at double precision,
        truncated integer NOT NULL DEFAULT 0,
        extraction text,
        content_hash {_T} NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        UNIQUE (tenant_id, project_id, path)
    );
    CREATE INDEX documents_dirty_idx ON documents (tenant_id, project_id, updated_at, id)
        WHERE rag_dirty = 1;
    CREATE INDEX documents_indexed_at_idx ON documents (tenant_id, project_id, indexed_at);
    CREATE TABLE rags (
        id {_T} PRIMARY KEY,
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        name {_T} NOT NULL,
        title text,
        description text,
        embedding_provider {_T} NOT NULL,
        embedding_model {_T} NOT NULL,
        embedding_dimension integer NOT NULL,
        chunk_size integer NOT NULL,
        chunk_overlap integer NOT NULL,
        created_at double precision NOT NULL,
        state {_T} NOT NULL DEFAULT 'live',
        generation integer NOT NULL DEFAULT 1,
        replaces {_T},
        retired_at double precision
    );
    CREATE UNIQUE INDEX rags_live_name_uniq ON rags (tenant_id, project_id, name)
        WHERE state = 'live';
    CREATE INDEX rags_name_idx ON rags (tenant_id, project_id, name, generation);
    CREATE TABLE settings (
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL DEFAULT '',
        key {_T} NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (tenant_id, project_id, key)
    );
    CREATE TABLE embedding_cache (
        model_key {_T} NOT NULL,
        text_hash {_T} NOT NULL,
        vector bytea NOT NULL,
        PRIMARY KEY (model_key, text_hash)
    );
    CREATE TABLE source_versions (
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        rag_id {_T} NOT NULL,
        source_ref {_T} NOT NULL,
        version bigint NOT NULL,
        PRIMARY KEY (tenant_id, project_id, rag_id, source_ref)
    );
    CREATE TABLE migrations (
        seq bigint GENERATED ALWAYS AS IDENTITY,
        id {_T} PRIMARY KEY,
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        rag_name {_T} NOT NULL,
        from_rag_id {_T} NOT NULL,
        to_rag_id {_T} NOT NULL,
        from_model {_T} NOT NULL,
        to_model {_T} NOT NULL,
        state {_T} NOT NULL,
        reason text,
        max_failure_ratio double precision NOT NULL,
        created_at double precision NOT NULL,
        finished_at double precision
    );
    CREATE UNIQUE INDEX migrations_active_uniq ON migrations (tenant_id, project_id, rag_name)
        WHERE state IN ('running', 'switching');
    CREATE INDEX migrations_name_idx ON migrations (tenant_id, project_id, rag_name, created_at);
    CREATE TABLE migration_items (
        migration_id {_T} NOT NULL,
        document_id {_T} NOT NULL,
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        state {_T} NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0,
        last_error text,
        next_attempt_at double precision,
        claimed_by {_T},
        claimed_at double precision,
        claim_token bigint,
        doc_version integer,
        indexed_hash {_T},
        completed_at double precision,
        PRIMARY KEY (migration_id, document_id)
    );
    CREATE INDEX migration_items_claim_idx ON migration_items (migration_id, state);
    CREATE INDEX migration_items_document_idx
        ON migration_items (tenant_id, project_id, document_id);
    CREATE TABLE vtr_dimensions (dim integer PRIMARY KEY);
    -- English stemming without stopwords (SQLite's porter tokenizer keeps every word of a
    -- text; queries drop stopwords themselves): snowball's English stemmer on every word.
    CREATE TEXT SEARCH DICTIONARY vtr_english_stem (TEMPLATE = snowball, Language = english);
    CREATE TEXT SEARCH CONFIGURATION vtr_english (COPY = english);
    ALTER TEXT SEARCH CONFIGURATION vtr_english ALTER MAPPING FOR asciiword, asciihword,
        hword_asciipart, word, hword, hword_part WITH vtr_english_stem;
    """,
    # 2: a queued document notifies the indexers of every process (.postgres.notify); the
    # payload is the schema, so stores sharing a database wake only their own indexers
    """
    CREATE FUNCTION vtr_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('vancetope_rag_queued', TG_TABLE_SCHEMA);
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER vtr_documents_queued AFTER INSERT OR UPDATE OF rag_dirty ON documents
        FOR EACH ROW WHEN (NEW.rag_dirty = 1) EXECUTE FUNCTION vtr_notify_queued();
    """,
    # 3: each RAG's lexical statistics (chunk count, token total, each lexeme's document
    # frequency), kept by statement triggers on the chunk tables in the writing transaction,
    # so a BM25 query reads a few rows instead of counting the RAG's chunks (.postgres.lexical).
    # The stats row is updated first: it is the RAG's writer lock, so two writers never take
    # the term rows in different orders.
    f"""
    CREATE TABLE rag_text_stats (
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        rag_id {_T} NOT NULL,
        n_rows bigint NOT NULL,
        n_tokens bigint NOT NULL,
        PRIMARY KEY (tenant_id, project_id, rag_id)
    );
    CREATE TABLE rag_terms (
        tenant_id {_T} NOT NULL,
        project_id {_T} NOT NULL,
        rag_id {_T} NOT NULL,
        lexeme {_T} NOT NULL,
        df bigint NOT NULL,
        PRIMARY KEY (tenant_id, project_id, rag_id, lexeme)
    );
    CREATE FUNCTION vtr_count_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        sign bigint := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
    BEGIN
        INSERT INTO rag_text_stats AS s (tenant_id, project_id, rag_id, n_rows, n_tokens)
            SELECT tenant_id, project_id, rag_id, sign * count(*), sign * sum(n_tokens)
            FROM changed GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (tenant_id, project_id, rag_id) DO UPDATE
            SET n_rows = s.n_rows + excluded.n_rows, n_tokens = s.n_tokens + excluded.n_tokens;
        INSERT INTO rag_terms AS t (tenant_id, project_id, rag_id, lexeme, df)
            SELECT c.tenant_id, c.project_id, c.rag_id, l.lexeme, sign * count(*)
            FROM changed c CROSS JOIN LATERAL unnest(c.tsv) l
            GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
            ON CONFLICT (tenant_id, project_id, rag_id, lexeme) DO UPDATE
            SET df = t.df + excluded.df;
        RETURN NULL;
    END
    $$;
    CREATE FUNCTION vtr_count_terms_of(tbl text) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER INSERT ON %I REFERENCING NEW '
            'TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION vtr_count_terms()',
            tbl || '_terms_added', tbl);
        EXECUTE format('CREATE OR REPLACE TRIGGER %I AFTER DELETE ON %I REFERENCING OLD '
            'TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION vtr_count_terms()',
            tbl || '_terms_removed', tbl);
    END
    $$;
    DO $$
    DECLARE
        d integer;
    BEGIN
        FOR d IN SELECT dim FROM vtr_dimensions ORDER BY dim LOOP
            PERFORM vtr_count_terms_of('chunks_' || d);
            EXECUTE format('INSERT INTO rag_text_stats SELECT tenant_id, project_id, rag_id, '
                'count(*), sum(n_tokens) FROM %I GROUP BY 1, 2, 3', 'chunks_' || d);
            EXECUTE format('INSERT INTO rag_terms SELECT c.tenant_id, c.project_id, c.rag_id, '
                'l.lexeme, count(*) FROM %I c CROSS JOIN LATERAL unnest(c.tsv) l '
                'GROUP BY 1, 2, 3, 4', 'chunks_' || d);
        END LOOP;
    END
    $$;
    """,
    # 4: the metadata the host saved with a document (JSON object text, as in SQLite; the
    # indexer copies it into the document's chunks). Documents written before have none.
    """
    ALTER TABLE documents ADD COLUMN metadata text NOT NULL DEFAULT '{}';
    """,
    # 5: the import a document came from (its sync prunes by it), and why the last read of
    # its file failed (kept through reindexes: "needs attention").
    f"""
    ALTER TABLE documents ADD COLUMN IF NOT EXISTS import_origin {_T};
    ALTER TABLE documents ADD COLUMN IF NOT EXISTS extraction_error text;
    CREATE INDEX IF NOT EXISTS documents_attention_idx ON documents (tenant_id, project_id, path)
        WHERE extraction_error IS NOT NULL;
    """,
    # 6: minScore: auto: the RAG's noise floor (JSON of domain.retrieval.calibration.Calibration).
    """
    ALTER TABLE rags ADD COLUMN IF NOT EXISTS calibration text;
    """,
    # 7: the model profile a RAG pinned (JSON object text, as in SQLite); RAGs created before
    # have none: they keep the empty profile (no prefixes, the old window) until a rebuild.
    """
    ALTER TABLE rags ADD COLUMN IF NOT EXISTS embedding_profile text;
    """,
    # 8: each RAG's lexical epoch: a number every chunk write of the RAG moves, from one
    # sequence (a RAG dropped and made again never repeats an epoch it had), so a process
    # can tell whether its in-process BM25 index of the RAG (.postgres.lexical_index) still
    # holds the RAG's rows. The statement triggers of step 3 move it in the writing
    # transaction.
    """
    CREATE SEQUENCE IF NOT EXISTS vtr_text_epochs;
    ALTER TABLE rag_text_stats ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
    CREATE OR REPLACE FUNCTION vtr_count_terms() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        sign bigint := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
    BEGIN
        INSERT INTO rag_text_stats AS s (tenant_id, project_id, rag_id, n_rows, n_tokens, epoch)
            SELECT tenant_id, project_id, rag_id, sign * count(*), sign * sum(n_tokens),
                nextval('vtr_text_epochs')
            FROM changed GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (tenant_id, project_id, rag_id) DO UPDATE
            SET n_rows = s.n_rows + excluded.n_rows, n_tokens = s.n_tokens + excluded.n_tokens,
                epoch = excluded.epoch;
        INSERT INTO rag_terms AS t (tenant_id, project_id, rag_id, lexeme, df)
            SELECT c.tenant_id, c.project_id, c.rag_id, l.lexeme, sign * count(*)
            FROM changed c CROSS JOIN LATERAL unnest(c.tsv) l
            GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
            ON CONFLICT (tenant_id, project_id, rag_id, lexeme) DO UPDATE
            SET df = t.df + excluded.df;
        RETURN NULL;
    END
    $$;
    UPDATE rag_text_stats SET epoch = nextval('vtr_text_epochs');
    """,
    # 9: the indexer workers' heartbeats (see domain.heartbeats); times in epoch seconds on
    # the store's clock, stopped_at NULL while a worker runs.
    f"""
    CREATE TABLE IF NOT EXISTS workers (
        worker_id {_T} PRIMARY KEY,
        node_id {_T} NOT NULL,
        version {_T} NOT NULL,
        interval_s double precision NOT NULL,
        started_at double precision NOT NULL,
        last_tick double precision NOT NULL,
        stopped_at double precision
    );
    """,
    # 10: each worker's open provider circuits (JSON of domain.heartbeats.OpenCircuit list;
    # NULL: none), so any process's status shows the pause a worker met.
    f"""
    ALTER TABLE workers ADD COLUMN IF NOT EXISTS circuits {_T};
    """,
)

SCHEMA_VERSION = len(STEPS)


def check_dimension(dim: int) -> None:
    """Refuse a dimension no HNSW index of pgvector can hold."""
    if not 1 <= dim <= HALFVEC_HNSW_MAX:
        raise StoreError(
            f"embedding dimension {dim} is not supported by the PostgreSQL store: pgvector's "
            f"HNSW index holds at most {HALFVEC_HNSW_MAX} dimensions (as halfvec, which this "
            "store indexes), and an exact scan of larger vectors would not keep the pre-turn "
            "budget; pick a model of at most "
            f"{HALFVEC_HNSW_MAX} dimensions (many models can shorten theirs) or another store"
        )


def index_expression(dim: int) -> str:
    """What the HNSW index holds and dense queries order by: the vector as ``halfvec``,
    stored beside it (a scan that casts every row is six times slower)."""
    return "c.embedding_h"


def chunk_table(dim: int) -> str:
    return f"chunks_{int(dim)}"


def chunk_table_steps(dim: int, *, hnsw: bool = True) -> list[str]:
    """The statements that make ``dim``'s chunk table and its indexes (idempotent)."""
    check_dimension(dim)
    table = chunk_table(dim)
    steps = [
        f"""CREATE TABLE IF NOT EXISTS {table} (
            rowid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id {_T} NOT NULL,
            tenant_id {_T} NOT NULL,
            project_id {_T} NOT NULL,
            rag_id {_T} NOT NULL,
            source_ref {_T} NOT NULL,
            kind {_T} NOT NULL,
            path {_T},
            text text NOT NULL,
            metadata text NOT NULL DEFAULT '{{}}',
            dim integer NOT NULL,
            n_tokens integer NOT NULL,
            tsv tsvector NOT NULL,
            embedding vector({dim}) NOT NULL,
            embedding_h halfvec({dim}) NOT NULL,
            UNIQUE (tenant_id, project_id, rag_id, id)
        )""",
        f"CREATE INDEX IF NOT EXISTS {table}_scope_idx "
        f"ON {table} (tenant_id, project_id, rag_id, source_ref) INCLUDE (n_tokens)",
        f"CREATE INDEX IF NOT EXISTS {table}_tsv ON {table} USING gin (tsv)",
        f"SELECT vtr_count_terms_of('{table}')",
        f"INSERT INTO vtr_dimensions (dim) VALUES ({int(dim)}) ON CONFLICT DO NOTHING",
    ]
    if hnsw:
        steps.append(
            f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {table} USING hnsw "
            f"(embedding_h halfvec_cosine_ops) WITH (m = {HNSW_M}, "
            f"ef_construction = {HNSW_EF_CONSTRUCTION})"
        )
    return steps


#: Held while ``init`` or a dimension's tables are made, so two processes never race on DDL.
DDL_LOCK = 7_401_905_213


def _ensure_extension(db: PostgresDatabase) -> None:
    import psycopg

    with db.connection() as conn:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            return
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
        if not available:
            raise StoreError(
                f"store {db.shown!r}: the PostgreSQL server has no pgvector extension; "
                "install it on the server (e.g. the postgresql-<version>-pgvector package, "
                "or enable `vector` in your managed database's extensions) and run init again"
            )
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"store {db.shown!r}: this role may not create the pgvector extension; have a "
                "superuser (or the database owner) run `CREATE EXTENSION vector;` in this "
                "database once, then run init again"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"store {db.shown!r}: creating the pgvector extension failed: "
                f"{db._error(exc)}; have a superuser run `CREATE EXTENSION vector;` in this "
                "database, then run init again"
            ) from exc


def initialize(db: PostgresDatabase, *, upto: int = SCHEMA_VERSION) -> int:
    """Create the extension, the schema and its tables (the steps not applied yet, up to
    version ``upto``: tests make an older store so). Idempotent; returns the schema version.
    Raises :class:`StoreError` when the server lacks pgvector, the role may not create it,
    or the schema is newer than this package."""
    with db.initializing():
        if db.uri.schema:
            db.execute(f'CREATE SCHEMA IF NOT EXISTS "{db.uri.schema}"')
        _ensure_extension(db)
        if db.uri.schema:
            db.reconnect()  # search paths made before the extension existed lack its schema
        with db.transaction() as conn:
            conn.execute("SET LOCAL statement_timeout = 0")  # index builds take their time
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
            conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version integer NOT NULL)")
            version = db.schema_version(conn)
            check_schema_version(db.shown, version, SCHEMA_VERSION)
            for step in range(version, upto):
                conn.execute(STEPS[step])
                log.info("store %s: applied schema step %d", db.shown, step + 1)
            if version < upto:
                conn.execute(f"DELETE FROM {SCHEMA_TABLE}")
                conn.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (%s)", (upto,))
    if upto == SCHEMA_VERSION:
        db.schema_checked()
    return max(version, upto)


def ensure_dimension(db: PostgresDatabase, dim: int) -> None:
    """Make ``dim``'s chunk table and indexes unless they exist; a role that may not
    create tables gets an error naming ``init --dimension``."""
    import psycopg

    check_dimension(dim)  # refuse an unsupported dimension before anything else
    if db.has_dimension(dim):
        return
    try:
        with db.transaction() as conn:
            conn.execute("SET LOCAL statement_timeout = 0")  # index builds take their time
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
            for statement in chunk_table_steps(dim, hnsw=db.uri.hnsw):
                conn.execute(statement)
    except StoreError as exc:
        cause = exc.__cause__
        if isinstance(cause, psycopg.errors.InsufficientPrivilege):
            raise StoreError(
                f"store {db.shown!r}: this role may not create the chunk table of dimension "
                f"{dim}; run `vancetope-rag --store … init --dimension {dim}` as the schema's "
                "owner, then retry"
            ) from cause
        raise
    db.dimensions.add(dim)
