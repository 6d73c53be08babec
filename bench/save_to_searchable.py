#!/usr/bin/env python
"""Save-to-searchable latency: from ``document_saved`` returning to the first query that finds
the document, with the indexer's default 30 s interval.

Two placements of the indexer, each ``--saves`` times on a fresh document:

* ``same process``: the host that saves also runs the background indexer; the save wakes it
  (``DocumentService.on_queued`` → ``scheduler.wake()``).
* ``worker process``: a ``vancetope-rag worker`` process indexes; the host only saves. The
  save reaches the worker only if the store can tell it (PostgreSQL LISTEN/NOTIFY); on a
  store that cannot, the worker finds it at its next tick (polling: ~interval / 2 on average).

Prints the machine line and the p50/p90/max per placement.

    python bench/save_to_searchable.py [--store URI] [--saves 10] [--interval 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import DEFAULT_RAG_NAME

TENANT, PROJECT = "bench", "save"


def _searchable(app: RagApp, path: str, word: str, timeout_s: float) -> float:
    rag = app.store.control.find_rag(TENANT, PROJECT, DEFAULT_RAG_NAME)
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        rag = rag or app.store.control.find_rag(TENANT, PROJECT, DEFAULT_RAG_NAME)
        if rag is not None and any(
            h.path == path for h in app.rags.query(rag, word, top_k=3, mode="hybrid")
        ):
            return time.monotonic() - start
        time.sleep(0.02)
    raise SystemExit(f"{path} was not searchable after {timeout_s:g} s")


def _run(app: RagApp, saves: int, timeout_s: float, jitter_s: float = 0.0) -> list[float]:
    took = []
    for _ in range(saves):
        # saves at a random phase of the worker's ticks (else each one lands just after a tick)
        time.sleep(random.uniform(0.0, jitter_s))
        word = f"zq{uuid.uuid4().hex[:10]}"
        path = f"documents/{word}.md"
        app.document_saved(TENANT, PROJECT, path, f"A note that names {word} once.")
        took.append(_searchable(app, path, word, timeout_s))
    return took


def _report(name: str, took: list[float]) -> None:
    ordered = sorted(took)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    print(
        f"{name:15s} p50 {statistics.median(took):6.2f} s  p90 {p90:6.2f} s  "
        f"max {max(took):6.2f} s  ({len(took)} saves)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--store", default=None, help="store URI (default: a temp SQLite file)")
    ap.add_argument("--saves", type=int, default=10)
    ap.add_argument("--interval", type=float, default=30.0, help="indexer interval, seconds")
    ap.add_argument("--provider", default="embedded", help="the tenant's embedding provider")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="save-bench-")
    store = args.store or f"sqlite:///{Path(tmp) / 'rag.db'}"
    timeout_s = 3 * args.interval + 30
    base = {"store": store, "indexer_interval_s": args.interval, "indexer_initial_delay_s": 0.0}
    print(machine_line())
    print(f"store: {store.split('://', 1)[0]}; indexer interval {args.interval:g} s")

    host = RagApp.open(EngineConfig(**base, node_id="bench-host"))  # type: ignore[arg-type]
    host.settings.set(TENANT, None, "ai.embedding.provider", args.provider)
    host.bring(TENANT, PROJECT)
    host.scheduler.start()
    try:
        _run(host, 1, timeout_s)  # load the model, create the RAG
        _report("same process", _run(host, args.saves, timeout_s))
    finally:
        host.scheduler.stop()
        host.close()

    env = {
        **os.environ,
        "VANCETOPE_RAG_STORE": store,
        "VANCETOPE_RAG_INDEXER_INTERVAL_S": str(args.interval),
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "VANCETOPE_RAG_NODE_ID": "bench-host",  # the project's home node
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    saver = RagApp.open(EngineConfig(**base, node_id="bench-host", indexer_enabled=False))  # type: ignore[arg-type]
    try:
        _run(saver, 1, timeout_s)  # the worker has loaded its model
        _report("worker process", _run(saver, args.saves, timeout_s, args.interval))
    finally:
        saver.close()
        worker.terminate()
        _, err = worker.communicate(timeout=60)
        lines = [line for line in err.splitlines() if "wake" in line.lower()]
        for line in lines[:3]:
            print(f"worker: {line}")


if __name__ == "__main__":
    main()
