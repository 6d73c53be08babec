#!/usr/bin/env python
"""BM25 search on the SQLite store: FTS5's own ranking against the in-process index
(store/lexical_index.py), side by side on one store, at 10k and 100k chunks.

The chunks are SciFact abstract texts (the first 2,000, cut at 1,000 characters) replicated
to the size, with random vectors; the queries are the 300 SciFact claims, split into terms as
the store does it (FTS5's tokenizer, stopwords dropped). Both paths answer every query and
their answers are compared (rows, order and scores must be identical). Also timed: the
in-process index's first build (tokenizing every chunk), an incremental refresh after a small
write, and ``ChunkStore.lexical_query`` end to end (search, chunk rows, cosines).

    python bench/lexical.py [--sizes 10000,100000] [--top-k 100]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "scifact"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--top-k", type=int, default=100)
    args = ap.parse_args()

    from vancetope_rag.domain.records import Chunk
    from vancetope_rag.store import open_store
    from vancetope_rag.store.port.types import RagScope

    texts = []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']} {row['text']}"[:1000])
            if len(texts) == 2000:
                break
    with (DATA / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh][:300]
    rng = np.random.default_rng(0)
    print(f"BM25 top-{args.top_k} over {len(queries)} SciFact claims (median ms per query)")
    for size in (int(s) for s in args.sizes.split(",")):
        tmp = tempfile.mkdtemp(prefix="vrag-lexical-")
        uri = f"sqlite:///{tmp}/rag.db"
        cached, fts = open_store(uri), open_store(uri, vector_cache=False)
        scope = RagScope("bench", "lexical", "rag", 384)
        for start in range(0, size, 5000):
            cached.chunks.add_chunks(
                scope,
                [
                    Chunk(
                        uuid.uuid4().hex,
                        "rag",
                        f"d{i // 2}",
                        texts[i % 2000],
                        rng.normal(size=384).tolist(),
                    )
                    for i in range(start, min(size, start + 5000))
                ],
            )
        lex_cached, lex_fts = cached.chunks.lexical, fts.chunks.lexical  # type: ignore[attr-defined]
        lex_cached.cache.sync_build_max_rows = size  # time the first build in the foreground
        terms = [lex_cached.terms(q) for q in queries]
        t0 = time.perf_counter()
        lex_cached.search(scope, terms[0], args.top_k)
        build_s = time.perf_counter() - t0
        timings: dict[str, list[float]] = {"fts5": [], "in-process": []}
        differ = 0
        for t in terms:
            t0 = time.perf_counter()
            a = lex_fts.search(scope, t, args.top_k)
            timings["fts5"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = lex_cached.search(scope, t, args.top_k)
            timings["in-process"].append(time.perf_counter() - t0)
            differ += a != b
        vec = rng.normal(size=384).tolist()
        e2e = []
        cached.chunks.lexical_query(scope, queries[0], args.top_k, vector=vec)  # vector cache
        for q in queries:
            t0 = time.perf_counter()
            cached.chunks.lexical_query(scope, q, args.top_k, vector=vec)
            e2e.append(time.perf_counter() - t0)
        lex_cached.cache.reload_cooldown_s = 0.0
        cached.chunks.add_chunks(
            scope, [Chunk(uuid.uuid4().hex, "rag", "new", texts[i], [1.0] * 384) for i in range(10)]
        )
        t0 = time.perf_counter()
        lex_cached.search(scope, terms[0], args.top_k)
        refresh_ms = 1000 * (time.perf_counter() - t0)
        med = {k: 1000 * statistics.median(v) for k, v in timings.items()}
        print(
            f"{size:>7} chunks: FTS5 {med['fts5']:.2f} ms, in-process {med['in-process']:.2f} ms "
            f"({med['fts5'] / med['in-process']:.0f}x); answers differing: {differ}/{len(terms)}; "
            f"lexical_query end to end {1000 * statistics.median(e2e):.2f} ms; first build "
            f"{build_s:.1f} s; refresh after +10 chunks {refresh_ms:.0f} ms",
            flush=True,
        )
        cached.close()
        fts.close()
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average at the end: {' '.join(fh.read().split()[:3])}")
    print(machine_line())


if __name__ == "__main__":
    main()
