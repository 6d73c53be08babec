"""Search latency, dense vs hybrid, on the SQLite store while a writer re-indexes documents.

Search only: the query vectors are precomputed (no embedding model), so the figures are the
store's. A writer thread replaces one document's chunks (``--chunks-per-doc``) ``--writes``
times a second for the whole run; the queries run on another thread of the same store, as a
server's would, each query in both modes one after the other (alternating which goes
first). Prints the machine line, p50/p99 of each mode and the hybrid/dense ratio of the
medians (the target: hybrid p50 at most 2x dense).

    PYTHONPATH=src python bench/hybrid_under_writes.py --chunks 20000 --seconds 30
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _machine import machine_line

from vancetope_rag.domain.records import Chunk, RagRecord
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.services.retrieval.search import Retriever
from vancetope_rag.store import open_store
from vancetope_rag.store.port.types import RagScope

_VOCABULARY = (
    "index query vector store chunk token lexical dense score rank fusion cache epoch "
    "writer reader snapshot document source project tenant model embed batch latency "
    "sqlite table column commit journal page cursor filter metadata path kind summary"
)
WORDS = _VOCABULARY.split(" ")


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=40)) for _ in range(n)]


def _chunks(scope: RagScope, doc: int, texts: list[str], vectors: np.ndarray) -> list[Chunk]:
    return [
        Chunk(
            id=f"d{doc}-{i}",
            rag_id=scope.rag_id,
            source_ref=f"doc-{doc}",
            text=text,
            embedding=vec.tolist(),
            path=f"documents/doc-{doc}.md",
        )
        for i, (text, vec) in enumerate(zip(texts, vectors, strict=True))
    ]


def _pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000.0, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--chunks-per-doc", type=int, default=5)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--writes", type=float, default=10.0, help="documents re-indexed per second")
    ap.add_argument("--seconds", type=float, default=30.0, help="of the run (both modes)")
    ap.add_argument("--top-k", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    per = args.chunks_per_doc
    n_docs = args.chunks // per

    def vectors(n: int) -> np.ndarray:
        v = rng.standard_normal((n, args.dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'rag.db'}")
        record = RagRecord(
            id="rag-bench",
            tenant_id="t",
            project_id="p",
            name="bench",
            embedding_provider="test",
            embedding_model="test-model",
            embedding_dimension=args.dim,
            chunk_size=800,
            chunk_overlap=0,
        )
        scope = RagScope.of(store.control.insert_rag(record))
        for doc in range(n_docs):
            store.chunks.add_chunks(scope, _chunks(scope, doc, _texts(rng, per), vectors(per)))
        queries = [(" ".join(rng.choice(WORDS, size=4)), v.tolist()) for v in vectors(64)]
        retriever = Retriever(store.chunks, FusionParams())
        modes = {
            "dense": lambda text, vec: retriever.dense(
                scope, vec, top_k=args.top_k, min_score=None, max_per_doc=None, filters=None
            ),
            "hybrid": lambda text, vec: retriever.hybrid(
                scope, text, vec, top_k=args.top_k, min_score=None, max_per_doc=None, filters=None
            ),
        }
        for run in modes.values():  # load both in-process indexes before timing
            run(*queries[0])
        print(machine_line())
        print(
            f"corpus: {n_docs * per} chunks ({n_docs} documents x {per}), dim {args.dim}; "
            f"writes: {args.writes:g} documents re-indexed/s; top_k {args.top_k}"
        )
        stop = threading.Event()
        written = [0]
        pregen = [(_texts(rng, per), vectors(per)) for _ in range(64)]

        def write() -> None:
            period = 1.0 / args.writes
            nxt = time.monotonic()
            while not stop.is_set():
                texts, vecs = pregen[written[0] % len(pregen)]
                doc = int(rng.integers(n_docs))
                store.chunks.replace_source(scope, f"doc-{doc}", _chunks(scope, doc, texts, vecs))
                written[0] += 1
                nxt += period
                stop.wait(max(0.0, nxt - time.monotonic()))

        # Both modes in one run, query by query in alternating order, so that both see the
        # same writes and the same load from whatever else runs on the machine.
        samples: dict[str, list[float]] = {name: [] for name in modes}
        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < deadline:
            text, vec = queries[i % len(queries)]
            for name in sorted(modes, reverse=bool(i % 2)):
                t0 = time.perf_counter()
                modes[name](text, vec)
                samples[name].append(time.perf_counter() - t0)
            i += 1
        stop.set()
        writer.join()
        for name, got in samples.items():
            print(
                f"{name:7s} p50 {_pct(got, 50):8.2f} ms  p99 {_pct(got, 99):8.2f} ms  "
                f"({len(got)} queries)"
            )
        ratios = [h / d for h, d in zip(samples["hybrid"], samples["dense"], strict=True)]
        print(f"writes: {written[0]} in {args.seconds:g} s")
        ratio = _pct(samples["hybrid"], 50) / _pct(samples["dense"], 50)
        print(
            f"hybrid/dense p50 ratio: {ratio:.2f}x (median of per-query ratios "
            f"{float(np.median(ratios)):.2f}x; target <= 2x)"
        )


if __name__ == "__main__":
    main()
