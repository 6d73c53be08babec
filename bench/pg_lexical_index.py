"""Memory and first-load time of the PostgreSQL store's in-process BM25 postings.

``python bench/pg_lexical_index.py --store 'postgresql://…&schema=bench_100000'``: for the
largest RAG of a filled store (e.g. the one ``bench/pre_turn.py --store … --bulk`` leaves),
loads its postings from the stored ``tsvector``\\ s as a query would, and prints the rows,
postings, bytes held per row and the load time (docs/stores.md sizes memory from this).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a filled postgresql:// store URI")
    args = ap.parse_args()
    from vancetope_rag.store.inprocess.bm25_index import CollectionStats, LexicalCache
    from vancetope_rag.store.port.types import RagScope
    from vancetope_rag.store.postgres.lexical_index import PostgresLexicalIndex
    from vancetope_rag.store.postgres.schema import chunk_table
    from vancetope_rag.store.postgres.store import open_postgres_store

    store = open_postgres_store(args.store)
    try:
        found = store.db.query(
            "SELECT s.tenant_id, s.project_id, s.rag_id, s.n_rows, s.n_tokens, s.epoch, "
            "r.embedding_dimension FROM rag_text_stats s JOIN rags r ON r.id = s.rag_id "
            "ORDER BY s.n_rows DESC LIMIT 1"
        )
        if not found:
            ap.error("the store holds no chunks: fill it first (bench/pre_turn.py --store …)")
        tenant, project, rag_id, n_rows, n_tokens, epoch, dim = found[0]
        scope = RagScope(tenant, project, rag_id, int(dim))
        index = PostgresLexicalIndex(store.db, LexicalCache(length_offset=0.0))
        index.cache.sync_build_max_rows = 10**9  # load in this thread, timed
        stats = CollectionStats(int(n_rows), int(n_tokens), {"cell": 1})
        started = time.perf_counter()
        with store.db.snapshot():
            index.search(scope, chunk_table(int(dim)), int(epoch), ["cell"], stats, 10)
        seconds = time.perf_counter() - started
        entry = index.cache._entries[(tenant, project, rag_id)]
        held = (entry.rowids, entry.lengths, entry.alive, entry.main.ptr, entry.main.rows)
        nbytes = sum(a.nbytes for a in (*held, entry.main.tf))
        rows = len(entry.rowids)
        print(
            f"rows {rows}  postings {len(entry.main.rows)}  held {nbytes / 1e6:.1f} MB "
            f"({nbytes / max(rows, 1):.0f} bytes per row)  first load {seconds:.1f} s"
        )
        print(machine_line())
    finally:
        store.close()


if __name__ == "__main__":
    main()
