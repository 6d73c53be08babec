#!/usr/bin/env python
"""A rebuild onto another model without downtime: what it costs and what chat
turns see meanwhile.

On the embedded SQLite store, ``--docs`` SciFact abstracts are indexed with the ``hashing``
model; then, while a thread runs ``app.pre_turn`` (AutoInject ON) in a loop, the project is
rebuilt onto the real ``embedded`` model (all-MiniLM-L6-v2) by indexer ticks in this process.
Reported side by side in one run:

* pre-turn latency p50/p95 before the rebuild and during it (the live generation answers
  throughout; the turns share the 2 cores with the model, which dominates the difference),
  and how many turns got no block (the acceptance says none);
* rebuild throughput (documents/s from the rebuild's start to the switch), without turns,
  against indexing the same documents from scratch into a fresh store with the same model —
  the overhead of filling a shadow generation, its queue and the switch. (Each store has its
  own embedding cache: every run embeds every text.)

    python bench/rebuild.py [--docs 400] [--batch 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "scifact"
T, P = "bench", "scifact"


def load(n: int) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']}. {row['text']}")
            if len(texts) == n:
                break
    with (DATA / "queries.jsonl").open(encoding="utf-8") as fh:
        queries = [json.loads(line)["text"] for line in fh]
    return texts, queries


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def open_app(folder: Path, name: str, batch: int) -> Any:
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig

    config = EngineConfig(
        store=f"sqlite:///{folder / name}",
        node_id="bench",
        indexer_batch_size=batch,
        retry_backoff_s=0.0,
    )
    return RagApp.open(config)


def seed(app: Any, texts: list[str], provider: str) -> None:
    app.settings.set(T, None, "ai.embedding.provider", provider)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.0)  # every turn finds something
    app.bring(T, P)
    for i, text in enumerate(texts):
        app.documents.create(T, P, f"documents/{i:05}.txt", text)


class Turns:
    def __init__(self, app: Any, queries: list[str]) -> None:
        self.app, self.queries = app, queries
        self.samples: list[tuple[float, float, bool]] = []  # (start, seconds, got a block)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            start = time.perf_counter()
            messages = self.app.pre_turn(T, P, [self.queries[i % len(self.queries)]])
            self.samples.append((start, time.perf_counter() - start, bool(messages)))
            i += 1

    def window(self, start: float, end: float) -> list[tuple[float, float, bool]]:
        return [s for s in self.samples if start <= s[0] < end]


def summary(window: list[tuple[float, float, bool]]) -> dict[str, Any]:
    seconds = [s for _, s, _ in window]
    return {
        "n": len(window),
        "p50_ms": round(1000 * statistics.median(seconds), 1) if seconds else None,
        "p95_ms": round(1000 * pct(seconds, 95), 1) if seconds else None,
        "without_block": sum(1 for *_, ok in window if not ok),
    }


def rebuild(app: Any) -> tuple[float, float]:
    """Rebuild onto the embedded model by ticks in this process: (start, switch) times."""
    app.settings.set(T, None, "ai.embedding.provider", "embedded")
    app.embeddings.load(app.settings.snapshot(T, P).embedding())  # model load not timed
    started = time.perf_counter()
    migration = app.project_rags.reindex(T, P, rebuild=True).migration
    while app.project_rags.find_default_rag(T, P).id != migration.to_rag_id:
        app.scheduler.tick()
    return started, time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    texts, queries = load(args.docs)
    folder = Path(tempfile.mkdtemp(prefix="bench-rebuild-"))

    app = open_app(folder, "rebuild.db", args.batch)
    seed(app, texts, "hashing")
    app.scheduler.run_until_idle()
    app.pre_turn(T, P, ["warm up"])
    turns = Turns(app, queries)
    turns.thread.start()
    idle_start = time.perf_counter()
    time.sleep(5)
    idle_end = time.perf_counter()

    started, switched = rebuild(app)
    with_turns_s = switched - started
    time.sleep(3)
    turns.stop.set()
    turns.thread.join()
    after_end = time.perf_counter()

    quiet = open_app(folder, "quiet.db", args.batch)
    seed(quiet, texts, "hashing")
    quiet.scheduler.run_until_idle()
    quiet_start, quiet_end = rebuild(quiet)
    rebuild_s = quiet_end - quiet_start

    clean = open_app(folder, "clean.db", args.batch)
    seed(clean, texts, "embedded")
    clean.embeddings.load(clean.settings.snapshot(T, P).embedding())
    clean_start = time.perf_counter()
    clean.scheduler.run_until_idle()
    clean_s = time.perf_counter() - clean_start

    before = turns.window(idle_start, idle_end)
    during = turns.window(started, switched)
    after = turns.window(switched, after_end)
    result = {
        "docs": args.docs,
        "chunks": app.project_rags.status(T, P).chunk_count,
        "rebuild_with_turns_s": round(with_turns_s, 1),
        "rebuild_s": round(rebuild_s, 1),
        "rebuild_docs_per_s": round(args.docs / rebuild_s, 2),
        "clean_index_s": round(clean_s, 1),
        "clean_docs_per_s": round(args.docs / clean_s, 2),
        "rebuild_vs_clean": round(rebuild_s / clean_s, 2),
        "turns": {
            name: summary(w)
            for name, w in (("before", before), ("during", during), ("after", after))
        },
    }
    print(machine_line())
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.docs} SciFact abstracts ({result['chunks']} chunks), hashing-256 -> "
        "embedded (all-MiniLM-L6-v2), SQLite, batch",
        args.batch,
    )
    print(
        f"rebuild: {rebuild_s:.1f} s = {result['rebuild_docs_per_s']} docs/s; clean index: "
        f"{clean_s:.1f} s = {result['clean_docs_per_s']} docs/s; ratio "
        f"{result['rebuild_vs_clean']} (with the turn loop running: {with_turns_s:.1f} s)"
    )
    for name, t in result["turns"].items():  # type: ignore[union-attr]
        print(
            f"pre_turn {name:7} n={t['n']:5}  p50 {t['p50_ms']:7.1f} ms  p95 "
            f"{t['p95_ms']:7.1f} ms  without a block: {t['without_block']}"
        )


if __name__ == "__main__":
    main()
