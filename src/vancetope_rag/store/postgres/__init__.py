"""The PostgreSQL + pgvector store: control plane, chunks and rebuilds in one database (or one
schema of it), opened by ``postgresql://…`` URIs (see :mod:`.postgres.store`)."""
