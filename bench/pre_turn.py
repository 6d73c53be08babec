#!/usr/bin/env python
"""Latency of the AutoInject pre-turn hook (issue 4), query embedding included.

For each size (default 10k and 100k chunks in ``_documents`` on the embedded SQLite store):

* the chunks are real all-MiniLM-L6-v2 embeddings of SciFact abstract text (up to 2,000
  distinct texts, embedded once), replicated with small Gaussian noise and re-normalised to
  reach the size — indexing 100k chunks through the model would take hours on 2 cores and
  the hook's cost depends on the number of vectors, not on where they came from;
* ``app.pre_turn(...)`` runs with AutoInject ON for a few hundred SciFact claims (the real
  hook: settings cascade, query embedding, top-k, per-document cap, minScore, template);
* once with the in-process vector cache (default) and once with every query going to
  sqlite-vec, side by side in one run; the query-embedding time alone is reported too.

    python bench/pre_turn.py [--sizes 10000,100000] [--turns 300] [--json]
"""

from __future__ import annotations

import argparse
import json
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
DATA = REPO.parent / "shared" / "data" / "scifact"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    from vancetope_rag import EngineConfig, RagApp
    from vancetope_rag.domain.records import Chunk
    from vancetope_rag.store import open_store
    from vancetope_rag.store.types import RagScope

    texts, queries = load(2000)
    results: dict[str, Any] = {"turns": args.turns, "sizes": {}}
    rng = np.random.default_rng(0)
    base_vectors: np.ndarray | None = None

    for size in sizes:
        tmp = tempfile.mkdtemp(prefix="vrag-preturn-")
        uri = f"sqlite:///{tmp}/rag.db"
        app = RagApp.open(EngineConfig(store=uri, node_id="bench"))
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
        batch: list[Chunk] = []
        for i in range(size):
            j = i % len(texts)
            v = base_vectors[j] + rng.normal(0, 0.02, base_vectors.shape[1]).astype(np.float32)
            v /= np.linalg.norm(v)
            batch.append(
                Chunk(
                    id=uuid.uuid4().hex,
                    rag_id=rag.id,
                    source_ref=f"doc-{i // 2}",
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
        plain = RagApp.open(
            EngineConfig(store=uri, node_id="bench"), store=open_store(uri, vector_cache=False)
        )

        turns = [queries[i % len(queries)] for i in range(args.turns)]
        row: dict[str, Any] = {"chunks": app.rags.chunk_count(rag)}
        for label, a in (("cache", app), ("sqlite-vec", plain)):
            a.pre_turn(t, p, [turns[0]])  # warm: loads the matrix / pages
            lat = []
            blocks = 0
            for q in turns:
                s = time.perf_counter()
                out = a.pre_turn(t, p, [q])
                lat.append((time.perf_counter() - s) * 1000)
                blocks += bool(out)
            row[label] = {
                "p50_ms": round(statistics.median(lat), 2),
                "p99_ms": round(pct(lat, 99), 2),
                "turnsWithBlock": blocks,
            }
        emb = []
        for q in turns[:100]:
            s = time.perf_counter()
            model.get_query_embedding(q)
            emb.append((time.perf_counter() - s) * 1000)
        row["queryEmbedding_p50_ms"] = round(statistics.median(emb), 2)
        row["speedup_p50"] = round(row["sqlite-vec"]["p50_ms"] / row["cache"]["p50_ms"], 1)
        results["sizes"][str(size)] = row
        plain.close()
        app.close()

    results["machine"] = machine_line()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"pre-turn hook latency over {args.turns} turns "
        "(AutoInject ON, query embedding included)"
    )
    print(f"{'chunks':>8} {'path':>11} {'p50 ms':>8} {'p99 ms':>8}  blocks")
    for row in results["sizes"].values():
        for label in ("cache", "sqlite-vec"):
            r = row[label]
            print(
                f"{row['chunks']:>8} {label:>11} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}  "
                f"{r['turnsWithBlock']}/{args.turns}"
            )
        print(
            f"{'':>8} query embedding alone p50 {row['queryEmbedding_p50_ms']:.2f} ms; "
            f"cache is {row['speedup_p50']}x faster at p50 (target p50 <= 20 ms at 100k)"
        )
    print(results["machine"])


if __name__ == "__main__":
    main()
