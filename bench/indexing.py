#!/usr/bin/env python
"""Indexer throughput vs raw model throughput, and the cost of a no-op reindex.

Side by side in one run, on the same chunk texts, with the embedded all-MiniLM-L6-v2:

1. index N documents through the real indexer (claim → split → embed → write → mark clean)
   on a fresh SQLite store and time it;
2. embed exactly the chunk texts the indexer produces (split beforehand with the same
   splitter; checked equal to what it stored) with the same model object, directly
   (``get_text_embedding_batch``), once before and once after step 1 (mean of the two);
3. ``reindex(rebuild=False)`` + run the indexer again with nothing changed: time it and count
   the texts sent to the model (expected: 0).

Prints docs/s, chunks/s, the indexer/raw ratio (target ≥ 0.9), the no-op reindex time and
speed-up (target ≥ 50×) and the machine line. Documents are SciFact abstracts when
``../shared/data/scifact`` is there (realistic lengths), else generated text.

With ``--store URI`` (e.g. ``postgresql://…?schema=bench_indexing``) the indexer writes to
that store (initialized first; a PostgreSQL schema should be new or empty) instead of a
fresh SQLite file; the ratio to the raw model, measured in the same run, is what compares
stores on a shared machine.

    python bench/indexing.py [--docs 1000] [--batch 32] [--store URI] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def load_texts(n: int) -> list[str]:
    texts: list[str] = []
    if SCIFACT.exists():
        with SCIFACT.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                texts.append(f"{row['title']} {row['text']}".strip())
                if len(texts) == n:
                    return texts
    import random

    rnd = random.Random(7)
    words = ["index", "query", "vector", "chunk", "model", "document", "project", "claim"]
    while len(texts) < n:
        texts.append(" ".join(rnd.choice(words) for _ in range(rnd.randint(60, 400))) + ".")
    return texts


class CountingModel:
    """Counts texts reaching the model (wraps the embedded model's batch method)."""

    def __init__(self, embed_model: Any) -> None:
        self.texts = 0
        inner = embed_model._get_text_embeddings

        def counted(texts: list[str]) -> Any:
            self.texts += len(texts)
            return inner(texts)

        embed_model._get_text_embeddings = counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32, help="indexer batch size (documents)")
    ap.add_argument("--store", default=None, help="store URI (default: a temp SQLite file)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from vancetope_rag import EngineConfig, RagApp, open_store
    from vancetope_rag.services.indexing.sources import SourceText
    from vancetope_rag.store.types import RagScope

    tmp = tempfile.mkdtemp(prefix="vrag-bench-")
    uri = args.store or f"sqlite:///{tmp}/rag.db"
    if args.store:
        open_store(uri).initialize(dimensions=[384])
    config = EngineConfig(
        store=uri,
        node_id="bench",
        indexer_batch_size=args.batch,
        indexer_initial_delay_s=0,
    )
    app = RagApp.open(config)
    t, p = "bench", "docs"
    app.settings.set(t, None, "ai.embedding.provider", "embedded")
    app.bring(t, p)
    rag = app.project_rags.find_default_rag(t, p)
    assert rag is not None
    model = app.rags.model_for(rag).embed_model
    counter = CountingModel(model)
    model.get_text_embedding_batch(["warm up the model"] * 64)

    texts = load_texts(args.docs)
    for i, text in enumerate(texts):
        app.documents.create(t, p, f"documents/bench/{i:05d}.txt", text, mime_type="text/plain")

    # The chunk texts the indexer will make, split the same way without embedding them, so
    # that raw runs can stand on both sides of the indexer run.
    split = app.rags.split_sources(
        rag,
        {
            str(i): [SourceText(text, path=f"documents/bench/{i:05d}.txt")]
            for i, text in enumerate(texts)
        },
    )
    chunk_texts = [c for i in range(len(texts)) for c in split[str(i)]]

    def raw_run() -> float:
        s = time.perf_counter()
        model.get_text_embedding_batch(chunk_texts)
        return time.perf_counter() - s

    raw_before = raw_run()
    counter.texts = 0
    start = time.perf_counter()
    first = app.scheduler.run_until_idle()
    t_index = time.perf_counter() - start
    index_calls = counter.texts
    raw_after = raw_run()
    t_raw = statistics.mean([raw_before, raw_after])
    stored = sorted(h.text for h in app.store.chunks.get_chunks(RagScope.of(rag)))
    assert stored == sorted(chunk_texts), "raw and indexer must embed the same chunk texts"

    counter.texts = 0
    start = time.perf_counter()
    queued = app.project_rags.reindex(t, p, rebuild=False).documents_queued
    second = app.scheduler.run_until_idle()
    t_noop = time.perf_counter() - start
    noop_calls = counter.texts
    app.close()

    n_chunks = len(chunk_texts)
    result = {
        "store": urlsplit(uri).scheme,
        "documents": len(texts),
        "chunks": n_chunks,
        "indexerBatch": args.batch,
        "firstIndexSeconds": round(t_index, 3),
        "rawSecondsBeforeAfter": [round(raw_before, 3), round(raw_after, 3)],
        "indexerDocsPerSecond": round(len(texts) / t_index, 1),
        "indexerChunksPerSecond": round(n_chunks / t_index, 1),
        "rawChunksPerSecond": round(n_chunks / t_raw, 1),
        "ratioIndexerToRaw": round(t_raw / t_index, 3),
        "firstIndexTextsEmbedded": index_calls,
        "noopReindexQueued": queued,
        "noopReindexSeconds": round(t_noop, 3),
        "noopReindexTextsEmbedded": noop_calls,
        "noopSpeedup": round(t_index / t_noop, 1),
        "indexed": first.indexed,
        "reindexed": second.indexed,
        "machine": machine_line(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"store {result['store']}, documents {result['documents']}, chunks {n_chunks}, "
        f"indexer batch {args.batch}"
    )
    print(
        f"raw model:     {result['rawChunksPerSecond']:8.1f} chunks/s "
        f"(mean of a run before and one after the indexer: {raw_before:.2f} s, "
        f"{raw_after:.2f} s)"
    )
    print(
        f"indexer:       {result['indexerChunksPerSecond']:8.1f} chunks/s, "
        f"{result['indexerDocsPerSecond']:.1f} docs/s ({t_index:.2f} s)"
    )
    print(f"ratio indexer/raw: {result['ratioIndexerToRaw']:.3f}  (target >= 0.9)")
    print(
        f"no-op reindex of {queued} docs: {t_noop:.3f} s, {noop_calls} texts embedded, "
        f"{result['noopSpeedup']:.0f}x faster than the first index (target: 0 texts, >= 50x)"
    )
    print(result["machine"])


if __name__ == "__main__":
    main()
