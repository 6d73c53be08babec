"""What the PostgreSQL store's queries cost where round trips and prepared plans count.

``python bench/pg_queries.py --store 'postgresql://…&schema=bench_dense' [--chunks 10000]
[--queries 40] [--rounds 5]``: fills one RAG of the schema with ``--chunks`` random
384-dimension chunks (once: a schema already holding them is reused), then prints, with the
machine line:

1. ``--queries`` dense queries (top 5, random vectors) on one connection: the median time of
   the first 5 and of the last 20. psycopg prepares a statement run five times on a
   connection, and the server may then plan it once for every parameter (a generic plan):
   what that plan computes per row shows in the last 20. Scopes up to ``EXACT_SCAN_MAX``
   chunks are ranked by an exact scan, larger ones through HNSW.
2. A calibration's 60 probes: ``best_scores`` (one statement) against 60 ``query(…, 1)``
   calls, alternating ``--rounds`` times; medians. The scores are checked equal.
3. ``SELECT 1`` through the pool, 2,000 statements, with the store's check of a pooled
   connection against psycopg_pool's own (an empty query per checkout), alternating
   ``--rounds`` times; medians of the time per statement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

T, P, NAME, DIM = "bench", "dense", "dense", 384


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a postgresql:// store URI (its own schema)")
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import numpy as np
    from psycopg_pool import ConnectionPool

    from vancetope_rag.domain.records import Chunk, RagRecord
    from vancetope_rag.store.port.types import RagScope
    from vancetope_rag.store.postgres.store import open_postgres_store

    store = open_postgres_store(args.store)
    store.initialize(dimensions=[DIM])
    rags = [r for r in store.control.list_rags(T, P) if r.name == NAME]
    if rags:
        rag = rags[0]
    else:
        rag = store.control.insert_rag(
            RagRecord(
                id=NAME,
                tenant_id=T,
                project_id=P,
                name=NAME,
                embedding_provider="bench",
                embedding_model="random",
                embedding_dimension=DIM,
                chunk_size=200,
                chunk_overlap=20,
            )
        )
    scope = RagScope.of(rag)
    rng = np.random.default_rng(1)
    have = store.chunks.count_chunks(scope)
    for start in range(have, args.chunks, 1000):
        vectors = rng.standard_normal((min(1000, args.chunks - start), DIM)).astype(np.float32)
        store.chunks.add_chunks(
            scope,
            [
                Chunk(f"c{start + i}", rag.id, f"s{start + i}", f"text {start + i}", v.tolist())
                for i, v in enumerate(vectors)
            ],
        )
    times = []
    for _ in range(args.queries):
        query = rng.standard_normal(DIM).astype(np.float32).tolist()
        started = time.perf_counter()
        store.chunks.query(scope, query, 5)
        times.append(1000 * (time.perf_counter() - started))
    chunks = store.chunks.count_chunks(scope)
    print(
        f"{chunks} chunks, {args.queries} dense queries on one connection: first 5 median "
        f"{statistics.median(times[:5]):.1f} ms, last 20 median "
        f"{statistics.median(times[-20:]):.1f} ms"
    )

    probes = [rng.standard_normal(DIM).astype(np.float32).tolist() for _ in range(60)]
    lanes: dict[str, list[float]] = {"one statement": [], "one by one": []}
    for round_ in range(args.rounds):
        for lane in list(lanes) if round_ % 2 == 0 else list(lanes)[::-1]:
            started = time.perf_counter()
            if lane == "one statement":
                scores = store.chunks.best_scores(scope, probes)
            else:
                scores = [store.chunks.query(scope, p, 1)[0].score for p in probes]
            lanes[lane].append(1000 * (time.perf_counter() - started))
            assert scores == store.chunks.best_scores(scope, probes)
    print(
        "60 calibration probes: "
        + ", ".join(f"{k} {statistics.median(v):.1f} ms" for k, v in lanes.items())
    )

    checks = {
        "the store's check": store.db.pool._check,
        "psycopg_pool's check": ConnectionPool.check_connection,
    }
    per_statement: dict[str, list[float]] = {name: [] for name in checks}
    for round_ in range(args.rounds):
        for name in list(checks) if round_ % 2 == 0 else list(checks)[::-1]:
            store.db.pool._check = checks[name]
            started = time.perf_counter()
            for _ in range(2000):
                store.db.query("SELECT 1")
            per_statement[name].append((time.perf_counter() - started) / 2000 * 1e6)
    print(
        "SELECT 1 through the pool: "
        + ", ".join(f"{k} {statistics.median(v):.1f} us" for k, v in per_statement.items())
    )
    store.close()
    print(machine_line())


if __name__ == "__main__":
    main()
