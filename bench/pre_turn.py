#!/usr/bin/env python
"""Latency of the AutoInject pre-turn hook, query embedding included.

For each size (default 10k and 100k chunks in ``_documents`` on the embedded SQLite store):

* the chunks are real all-MiniLM-L6-v2 embeddings of SciFact abstract text (up to 2,000
  distinct texts, embedded once), replicated with small Gaussian noise and re-normalised to
  reach the size — indexing 100k chunks through the model would take hours on 2 cores and
  the hook's cost depends on the number of vectors, not on where they came from;
* ``app.pre_turn(...)`` runs with AutoInject ON for a few hundred SciFact claims (the real
  hook: settings cascade, query embedding, top-k, per-document cap, minScore, template,
  token budget);
* in each retrieval mode of ``--mode`` (default ``dense,hybrid``), the modes alternating turn
  by turn on the same store and app (the in-process indexes), so load on the shared machine
  hits every mode alike; with ``--sqlite-vec`` also dense with every query going to
  sqlite-vec; the query-embedding time alone is reported too.

    python bench/pre_turn.py [--sizes 10000,100000] [--turns 300] [--mode dense,hybrid]
                             [--sqlite-vec] [--threads N] [--store URI] [--noise S]
                             [--recall N] [--json]

A ``--store`` that already holds the size's chunks (an earlier run's schema) is measured as
it is, without writing. ``--recall N`` (a PostgreSQL ``--store``): recall@10 of the store's
dense path (HNSW for a scope above its exact-scan limit) against an exact scan of the same
scope, over the first N turns' query embeddings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

REPO = Path(__file__).resolve().parent.parent
#: SciFact beside the checkout; VANCETOPE_RAG_SCIFACT_DIR names another (a worktree's runs).
DATA = Path(
    os.environ.get("VANCETOPE_RAG_SCIFACT_DIR") or REPO.parent / "shared" / "data" / "scifact"
)


def load(n_texts: int) -> tuple[list[str], list[str]]:
    texts, queries = [], []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']} {row['text']}"[:1000])
            if len(texts) == n_texts:
                break
    with (DATA / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh]
    return texts, queries


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def recall_at_10(uri: str, scope: Any, model: Any, questions: list[str], app: Any) -> float:
    """Mean overlap of the store's dense top-10 with an exact scan's, in the same scope."""
    from vancetope_rag.store.postgres.store import open_postgres_store

    exact = open_postgres_store(uri, exact_scan_max=10**9)  # every scope scanned exactly
    try:
        overlaps = []
        for q in questions:
            vector = model.get_query_embedding(q)
            served = {h.chunk_id for h in app.store.chunks.query(scope, vector, 10)}
            truth = {h.chunk_id for h in exact.chunks.query(scope, vector, 10)}
            overlaps.append(len(served & truth) / max(1, len(truth)))
        return round(statistics.mean(overlaps), 4)
    finally:
        exact.close()


def build_hnsw(uri: str) -> None:
    """The chunk table's HNSW index built over the filled table (one CREATE INDEX is much
    faster than an index that grows with every insert), with the memory to build it."""
    from vancetope_rag.store.postgres.schema import chunk_table_steps
    from vancetope_rag.store.postgres.store import open_postgres_store

    store = open_postgres_store(uri)
    started = time.perf_counter()
    try:
        with store.db.connection() as conn:
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            for statement in chunk_table_steps(384):
                conn.execute(statement)
    finally:
        store.close()
    print(f"HNSW index built in {time.perf_counter() - started:.0f} s", flush=True)


def fill(
    app: Any,
    rag: Any,
    size: int,
    texts: list[str],
    base_vectors: np.ndarray,
    rng: np.random.Generator,
    noise: float,
) -> None:
    """``size`` chunks in ``rag`` (a project's ``_documents``): the texts' embeddings with
    Gaussian ``noise``, re-normalised, two chunks per document row (citations name
    documents)."""
    from vancetope_rag.domain.records import Chunk
    from vancetope_rag.store.types import NewDocument, RagScope

    scope = RagScope.of(rag)
    batch: list[Chunk] = []
    doc_ids: list[str] = []
    t, p = rag.tenant_id, rag.project_id
    with app.store.control.transaction():
        for d in range((size + 1) // 2):
            new = NewDocument(
                t, p, f"documents/scifact/{d}.txt", "text/plain", texts[d % len(texts)]
            )
            doc_ids.append(app.store.control.insert_document(new).id)
    for i in range(size):
        j = i % len(texts)
        v = base_vectors[j] + rng.normal(0, noise, base_vectors.shape[1]).astype(np.float32)
        v /= np.linalg.norm(v)
        batch.append(
            Chunk(
                id=uuid.uuid4().hex,
                rag_id=rag.id,
                source_ref=doc_ids[i // 2],
                text=texts[j],
                embedding=v.tolist(),
                path=f"documents/scifact/{i // 2}.txt",
            )
        )
        if len(batch) == 5000:
            app.store.chunks.add_chunks(scope, batch)
            batch = []
    if batch:
        app.store.chunks.add_chunks(scope, batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--mode", default="dense,hybrid", help="retrieval modes, alternated")
    ap.add_argument("--sqlite-vec", action="store_true", help="also dense via sqlite-vec")
    ap.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    ap.add_argument(
        "--store",
        default=None,
        help="store URI, one store per size: '{size}' in it is replaced by the size (e.g. "
        "postgresql://…?schema=bench_{size}); default: a temp SQLite file per size",
    )
    ap.add_argument(
        "--noise",
        type=float,
        default=0.02,
        help="per-component Gaussian noise on the replicated embeddings (0.02: near-copies of "
        "2,000 texts; 0.05: distinct vectors, ~45 degrees from their text's embedding)",
    )
    ap.add_argument(
        "--recall", type=int, default=0, help="PostgreSQL: recall@10 against exact, N queries"
    )
    ap.add_argument(
        "--bulk",
        action="store_true",
        help="PostgreSQL: fill without the HNSW index and build it once at the end",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not modes or any(m not in ("dense", "hybrid") for m in modes):
        ap.error("--mode takes dense, hybrid or both")

    if args.threads:  # on a shared machine 1 thread is steadier (docs/benchmarks.md)
        import torch

        torch.set_num_threads(args.threads)
    from vancetope_rag import EngineConfig, RagApp
    from vancetope_rag.recipes import RagParams
    from vancetope_rag.store import open_store
    from vancetope_rag.store.types import RagScope

    texts, queries = load(2000)
    results: dict[str, Any] = {"turns": args.turns, "sizes": {}}
    rng = np.random.default_rng(0)
    base_vectors: np.ndarray | None = None

    for size in sizes:
        tmp = tempfile.mkdtemp(prefix="vrag-preturn-")
        uri = args.store.replace("{size}", str(size)) if args.store else f"sqlite:///{tmp}/rag.db"
        fill_uri = uri
        if args.bulk and args.store:  # fill an unindexed table, build HNSW once at the end
            fill_uri = uri + ("&" if "?" in uri else "?") + "vector_index=none"
        if args.store:
            open_store(fill_uri).initialize(dimensions=[384])
        app = RagApp.open(EngineConfig(store=fill_uri, node_id="bench"))
        t, p = "bench", "chat"
        app.settings.set(t, None, "ai.embedding.provider", "embedded")
        app.settings.set(t, p, "rag.autoInject.enabled", "ON")
        app.bring(t, p)
        rag = app.project_rags.find_default_rag(t, p)
        assert rag is not None
        model = app.rags.model_for(rag).embed_model
        if base_vectors is None:
            base_vectors = np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32)
        scope = RagScope.of(rag)
        reuse = args.store and app.rags.chunk_count(rag) >= size  # a store filled before
        if not reuse:
            fill(app, rag, size, texts, base_vectors, rng, args.noise)
        if fill_uri != uri:
            app.close()
            if not reuse:
                build_hnsw(uri)
            app = RagApp.open(EngineConfig(store=uri, node_id="bench"))
        # the in-process BM25 index: SQLite's (``lexical``) or PostgreSQL's (``lexical_index``)
        chunks = app.store.chunks
        lexical = getattr(chunks, "lexical", None) or getattr(chunks, "lexical_index", None)
        lexical_cache = getattr(lexical, "cache", None)

        turns = [queries[i % len(queries)] for i in range(args.turns)]
        row: dict[str, Any] = {"chunks": app.rags.chunk_count(rag)}
        lanes: list[tuple[str, RagApp, RagParams]] = [
            (mode, app, RagParams(retrieval_mode=mode)) for mode in modes
        ]
        plain = None
        if args.sqlite_vec and not args.store:
            plain = RagApp.open(
                EngineConfig(store=uri, node_id="bench"), store=open_store(uri, vector_cache=False)
            )
            lanes.append(("dense sqlite-vec", plain, RagParams(retrieval_mode="dense")))
        for _, a, recipe in lanes:  # warm: loads the matrices, the lexical index, the pages
            a.pre_turn(t, p, [turns[0]], recipe)
        if lexical_cache is not None:
            lexical_cache.wait_idle(600)  # a big first build runs in the background
        for _, a, recipe in lanes:
            a.pre_turn(t, p, [turns[1]], recipe)
        lat: dict[str, list[float]] = {label: [] for label, _, _ in lanes}
        blocks = dict.fromkeys(lat, 0)
        for q in turns:  # the lanes alternate turn by turn
            for label, a, recipe in lanes:
                s = time.perf_counter()
                out = a.pre_turn(t, p, [q], recipe)
                lat[label].append((time.perf_counter() - s) * 1000)
                blocks[label] += bool(out)
        for label in lat:
            row[label] = {
                "p50_ms": round(statistics.median(lat[label]), 2),
                "p99_ms": round(pct(lat[label], 99), 2),
                "turnsWithBlock": blocks[label],
            }
        emb = []
        for q in turns[:100]:
            s = time.perf_counter()
            model.get_query_embedding(q)
            emb.append((time.perf_counter() - s) * 1000)
        row["queryEmbedding_p50_ms"] = round(statistics.median(emb), 2)
        if "dense" in row and "hybrid" in row:
            row["hybrid_over_dense_p50"] = round(
                row["hybrid"]["p50_ms"] / row["dense"]["p50_ms"], 2
            )
        if args.recall and args.store:
            row["recallAt10"] = recall_at_10(uri, scope, model, turns[: args.recall], app)
        results["sizes"][str(size)] = row
        if plain is not None:
            plain.close()
        app.close()
        shutil.rmtree(tmp, ignore_errors=True)  # 0.4 GB at 100k chunks

    results["machine"] = machine_line()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"pre-turn hook latency over {args.turns} turns per mode, modes alternating "
        "(AutoInject ON, query embedding included)"
    )
    print(f"{'chunks':>8} {'mode':>17} {'p50 ms':>8} {'p99 ms':>8}  blocks")
    for row in results["sizes"].values():
        for label, r in row.items():
            if not isinstance(r, dict):
                continue
            print(
                f"{row['chunks']:>8} {label:>17} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}  "
                f"{r['turnsWithBlock']}/{args.turns}"
            )
        if "recallAt10" in row:
            print(f"{'':>8} dense recall@10 against an exact scan: {row['recallAt10']:.4f}")
        ratio = row.get("hybrid_over_dense_p50")
        print(
            f"{'':>8} query embedding alone p50 {row['queryEmbedding_p50_ms']:.2f} ms"
            + (f"; hybrid/dense p50 {ratio}x (target <= 2x)" if ratio else "")
        )
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average at the end: {' '.join(fh.read().split()[:3])}")
    print(results["machine"])


if __name__ == "__main__":
    main()
