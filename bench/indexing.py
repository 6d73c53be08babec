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

With ``--backends torch,onnx [--rounds 3]`` it compares the embedded provider's batch
backends instead (issue 25: indexing on the chosen batch backend >= 0.95x the torch path):
each round indexes the same N documents into a fresh SQLite store once per backend, the
order alternating from round to round, and prints docs/s and chunks/s per lane, the medians,
each lane's ratio to the first lane's median, the ``auto`` choice of this machine (the line
``vancetope-rag prepare`` prints) and the machine line. Every lane is a process of its own
(this script with ``--lane BACKEND``): the provider keeps its loaded model per process, so a
fresh process with ``VANCETOPE_RAG_EMBEDDED_BACKEND=BACKEND`` (also passed to the engine's
config) is what puts batches on that backend — ``torch`` is today's torch path everywhere,
``onnx`` embeds queries and batches on ONNX Runtime, ``auto`` batches on whatever the stored
(or a fresh) measurement chose. A lane waits until the provider's backend is ready, checks
that batches run where asked, warms the model up, then times only the indexer run.

    python bench/indexing.py [--docs 1000] [--batch 32] [--store URI] [--json]
    python bench/indexing.py --docs 300 --batch 32 --backends torch,onnx --rounds 3 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

from vancetope_rag.default_plugins.embedded.onnx_backend import BACKENDS

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
BACKEND_ENV = "VANCETOPE_RAG_EMBEDDED_BACKEND"


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


def open_app(uri: str, batch: int, backend: str | None = None) -> tuple[Any, Any, Any]:
    """The app, its default RAG of project ``bench/docs`` (embedded provider) and the model."""
    from vancetope_rag import EngineConfig, RagApp

    extra: dict[str, Any] = {"embedded_backend": backend} if backend else {}
    config = EngineConfig(
        store=uri,
        node_id="bench",
        indexer_batch_size=batch,
        indexer_initial_delay_s=0,
        **extra,
    )
    app = RagApp.open(config)
    t, p = "bench", "docs"
    app.settings.set(t, None, "ai.embedding.provider", "embedded")
    app.bring(t, p)
    rag = app.project_rags.find_default_rag(t, p)
    assert rag is not None
    return app, rag, app.rags.model_for(rag).embed_model


def add_documents(app: Any, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        app.documents.create(
            "bench", "docs", f"documents/bench/{i:05d}.txt", text, mime_type="text/plain"
        )


def run_lane(args: argparse.Namespace) -> None:
    """One lane of ``--backends``: index into a fresh SQLite store with batches on
    ``args.lane``; prints one JSON line."""
    from vancetope_rag.default_plugins.embedded import describe
    from vancetope_rag.store.port.types import RagScope

    tmp = tempfile.mkdtemp(prefix="vrag-bench-")
    app, rag, model = open_app(f"sqlite:///{tmp}/rag.db", args.batch, args.lane)
    accelerator = model._accelerator
    state = accelerator.wait()  # torch serves until ONNX Runtime is ready: wait for it
    batches_on = "onnx" if accelerator.batch_encoder is not None else "torch"
    if not state.ready or (args.lane != "auto" and batches_on != args.lane):
        raise SystemExit(f"lane {args.lane}: batches on {batches_on} ({describe(state)})")
    counter = CountingModel(model)
    model.get_text_embedding_batch(["warm up the model"] * 64)

    texts = load_texts(args.docs)
    add_documents(app, texts)
    counter.texts = 0
    start = time.perf_counter()
    done = app.scheduler.run_until_idle()
    seconds = time.perf_counter() - start
    chunks = len(app.store.chunks.get_chunks(RagScope.of(rag)))
    app.close()
    row = {
        "lane": args.lane,
        "batches": batches_on,
        "documents": len(texts),
        "indexed": done.indexed,
        "chunks": chunks,
        "textsEmbedded": counter.texts,
        "seconds": round(seconds, 3),
        "docsPerSecond": round(len(texts) / seconds, 2),
        "chunksPerSecond": round(chunks / seconds, 2),
        "backend": describe(state),
    }
    print(json.dumps(row))


def spawn_lane(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, BACKEND_ENV: backend}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--lane", backend]
    cmd += ["--docs", str(args.docs), "--batch", str(args.batch)]
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if row["indexed"] != args.docs:
        raise SystemExit(f"lane {backend} did not index every document: {row}")
    return row


def auto_choice() -> str:
    """What ``vancetope-rag prepare`` prints for the embedded provider with ``auto``: the
    stored choice of this machine (measured now, and stored, when there is none)."""
    env = {**os.environ, BACKEND_ENV: "auto"}
    with tempfile.TemporaryDirectory(prefix="vrag-bench-prep-") as tmp:
        cmd = [sys.executable, "-m", "vancetope_rag.cli", "--store", f"sqlite:///{tmp}/prep.db"]
        out = subprocess.run(
            [*cmd, "prepare"], env=env, check=True, stdout=subprocess.PIPE, text=True
        ).stdout
    lines = [line for line in out.splitlines() if line.startswith("embedded:")]
    return lines[0] if lines else out.strip()


def compare_backends(args: argparse.Namespace) -> None:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or len(set(backends)) != len(backends) or not backends:
        raise SystemExit(f"--backends: distinct names out of {', '.join(BACKENDS)}")
    if args.store:
        raise SystemExit("--backends indexes into fresh SQLite stores; leave out --store")
    choice = auto_choice()  # before the lanes: a measurement, if one is needed, runs alone
    rows: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    order_by_round: list[list[str]] = []
    for r in range(args.rounds):
        order = backends if r % 2 == 0 else backends[::-1]
        order_by_round.append(order)
        for backend in order:
            row = spawn_lane(backend, args)
            rows[backend].append(row)
            if not args.json:
                print(
                    f"round {r + 1} {backend:<5} {row['docsPerSecond']:7.2f} docs/s "
                    f"{row['chunksPerSecond']:7.2f} chunks/s ({row['seconds']:.2f} s)",
                    flush=True,
                )
    chunks = {row["chunks"] for lane in rows.values() for row in lane}
    if len(chunks) != 1:
        raise SystemExit(f"the lanes stored different chunk counts: {sorted(chunks)}")
    n_chunks = chunks.pop()
    medians = {
        b: {
            "docsPerSecond": round(statistics.median(r["docsPerSecond"] for r in lane), 2),
            "chunksPerSecond": round(statistics.median(r["chunksPerSecond"] for r in lane), 2),
            "seconds": round(statistics.median(r["seconds"] for r in lane), 3),
        }
        for b, lane in rows.items()
    }
    base = backends[0]
    # The same documents and chunks in every lane: the docs/s and chunks/s ratios are one.
    ratios = {
        f"{b}/{base}": round(medians[b]["docsPerSecond"] / medians[base]["docsPerSecond"], 3)
        for b in backends[1:]
    }
    found = re.search(r"batches on (\w+)", choice)
    auto_batches = found.group(1) if found else None
    verdict = None
    if "torch" in medians and auto_batches in medians:
        chosen = medians[auto_batches]["docsPerSecond"] / medians["torch"]["docsPerSecond"]
        verdict = (
            f"indexing with batches on auto's choice ({auto_batches}) / the torch path: "
            f"{chosen:.3f}  (target >= 0.95)"
        )
    result = {
        "documents": args.docs,
        "chunks": n_chunks,
        "indexerBatch": args.batch,
        "rounds": args.rounds,
        "orderByRound": order_by_round,
        "lanes": rows,
        "medians": medians,
        "ratiosOfMedians": ratios,
        "autoChoice": choice,
        "autoBatches": auto_batches,
        "verdict": verdict,
        "machine": machine_line(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"store sqlite (fresh per lane), documents {args.docs}, chunks {n_chunks}, indexer batch "
        f"{args.batch}, {args.rounds} round(s), lane order alternating, one process per lane"
    )
    print(f"{'lane':<6} {'docs/s':>8} {'chunks/s':>9} {'seconds':>8}   (medians)")
    for b in backends:
        m = medians[b]
        print(f"{b:<6} {m['docsPerSecond']:8.2f} {m['chunksPerSecond']:9.2f} {m['seconds']:8.2f}")
    for name, ratio in ratios.items():
        print(f"ratio {name} (medians): {ratio:.3f}  (a batch backend wins at >= 1.2)")
    print(f"auto here (stored choice, vancetope-rag prepare): {choice}")
    if verdict is not None:
        print(verdict)
    print(result["machine"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32, help="indexer batch size (documents)")
    ap.add_argument("--store", default=None, help="store URI (default: a temp SQLite file)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--backends",
        default=None,
        help="compare indexing with batches on these embedded backends, e.g. torch,onnx "
        "(each lane a process of its own with VANCETOPE_RAG_EMBEDDED_BACKEND set)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --backends (median)")
    ap.add_argument("--lane", choices=BACKENDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.lane:
        run_lane(args)
        return
    if args.backends:
        compare_backends(args)
        return

    from vancetope_rag import open_store
    from vancetope_rag.services.indexing.sources import SourceText
    from vancetope_rag.store.port.types import RagScope

    tmp = tempfile.mkdtemp(prefix="vrag-bench-")
    uri = args.store or f"sqlite:///{tmp}/rag.db"
    if args.store:
        open_store(uri).initialize(dimensions=[384])
    app, rag, model = open_app(uri, args.batch)
    counter = CountingModel(model)
    model.get_text_embedding_batch(["warm up the model"] * 64)

    texts = load_texts(args.docs)
    add_documents(app, texts)
    t, p = "bench", "docs"

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
    with counted_statements(app) as noop_statements:
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
        "noopStatements": noop_statements.get("statements"),
        "noopTransactions": noop_statements.get("transactions"),
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
    if noop_statements:
        print(
            f"  its statements: {noop_statements['statements']}; transactions and snapshots "
            f"opened: at most {noop_statements['transactions']}"
        )
    print(result["machine"])


@contextmanager
def counted_statements(app: Any) -> Iterator[dict[str, int]]:
    """Statements and transactions run through the SQL store's database meanwhile (empty for
    a store without one): on PostgreSQL each statement is a round trip or more."""
    db = getattr(app.store, "db", None) or getattr(app.store.chunks, "db", None)
    counts: dict[str, int] = {}
    if db is None:
        yield counts
        return
    counts.update(statements=0, transactions=0)
    real = {name: getattr(db, name) for name in STATEMENTS + TRANSACTIONS if hasattr(db, name)}

    def counting(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts["transactions" if name in TRANSACTIONS else "statements"] += 1
            return real[name](*args, **kwargs)

        return call

    for name in real:
        setattr(db, name, counting(name))
    try:
        yield counts
    finally:
        for name in real:
            delattr(db, name)  # the class's methods again


#: The SQL stores' statement methods, and what opens a transaction (a nested call joins the
#: outer one but is counted too: the transactions printed are at most that many).
STATEMENTS = ("query", "query_dicts", "query_packed", "execute", "executemany")
TRANSACTIONS = ("transaction", "snapshot")


if __name__ == "__main__":
    main()
