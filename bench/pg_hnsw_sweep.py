"""Recall@10 and scan time of the PostgreSQL store's HNSW path against ``hnsw.ef_search``.

``python bench/pg_hnsw_sweep.py --store 'postgresql://…&schema=bench_1000000' [--ef
200,400,600,800] [--queries 40]``: for the largest RAG of a filled store (``bench/pre_turn.py
--store … --bulk`` leaves one), embeds SciFact claims with the embedded model, ranks each
exactly (the store's exact-scan statement, then the full-vector re-rank) and through the HNSW
index with each search list (the store's own statement and re-rank), and prints the mean
overlap of the two top-10s and the median time of the index scan. The graph is whatever index
the table holds (its ``m`` and ``ef_construction`` are printed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line
from pre_turn import DATA


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a filled postgresql:// store URI")
    ap.add_argument("--ef", default="200,400,600,800", help="search lists to try")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args()
    import psycopg
    from psycopg.rows import dict_row

    from vancetope_rag import EngineConfig, RagApp
    from vancetope_rag.store.postgres.chunks import dense_sql, rerank
    from vancetope_rag.store.postgres.rows import vector_literal
    from vancetope_rag.store.postgres.schema import chunk_table
    from vancetope_rag.store.postgres.uri import PostgresUri

    app = RagApp.open(EngineConfig(store=args.store, node_id="bench"))
    given = PostgresUri.parse(args.store)
    conn = psycopg.connect(given.conninfo, autocommit=True)
    conn.execute(f"SET search_path = {given.schema or 'public'}, public")
    conn.execute("SET statement_timeout = 0")
    conn.execute("SET hnsw.iterative_scan = strict_order")
    conn.execute("SET hnsw.max_scan_tuples = 200000")
    found = conn.execute(
        "SELECT s.tenant_id, s.project_id, s.rag_id, s.n_rows, r.embedding_dimension "
        "FROM rag_text_stats s JOIN rags r ON r.id = s.rag_id ORDER BY s.n_rows DESC LIMIT 1"
    ).fetchone()
    if found is None:
        ap.error("the store holds no chunks: fill it first (bench/pre_turn.py --store …)")
    tenant, project, rag_id, n_rows, dim = found
    rag = app.rags.get(tenant, project, rag_id)
    model = app.rags.model_for(rag).embed_model
    index = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = %s AND schemaname = current_schema()",
        (f"{chunk_table(int(dim))}_hnsw",),
    ).fetchone()
    scope = (tenant, project, rag_id)
    with (DATA / "queries.jsonl").open(encoding="utf-8") as fh:
        claims = [json.loads(line)["text"] for line in fh][: args.queries]
    vectors = [np.asarray(model.get_query_embedding(q), dtype=np.float32) for q in claims]

    def top10(vector: np.ndarray, *, exact: bool) -> tuple[set[str], float]:
        started = time.perf_counter()
        rows = (
            conn.cursor(row_factory=dict_row)
            .execute(
                dense_sql(int(dim), "", exact=exact),
                (*scope, vector_literal(vector), 30),
                binary=True,
            )
            .fetchall()
        )
        elapsed = (time.perf_counter() - started) * 1000
        return {h.chunk_id for h in rerank(rows, vector, 10)}, elapsed

    truth = [top10(v, exact=True)[0] for v in vectors]
    print(f"{n_rows} chunks; index: {index[0] if index else 'none'}")
    print(f"{'ef_search':>9} {'recall@10':>9} {'scan p50 ms':>11}")
    for ef in (int(e) for e in args.ef.split(",")):
        conn.execute(f"SET hnsw.ef_search = {ef}")
        runs = [top10(v, exact=False) for v in vectors]
        recall = statistics.mean(len(got & t) / 10 for (got, _), t in zip(runs, truth, strict=True))
        print(f"{ef:>9} {recall:>9.3f} {statistics.median(ms for _, ms in runs):>11.2f}")
    print(machine_line())
    app.close()


if __name__ == "__main__":
    main()
