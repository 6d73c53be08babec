"""One implementation of the SQL stores (SQLite, PostgreSQL) over an engine's
:class:`~.dialect.Dialect`: the RAG catalog, the workers' heartbeats, rebuilds."""
