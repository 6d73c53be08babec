#!/usr/bin/env python
"""Turns per second of the pre-turn hook: one at a time against N concurrent async turns.

Runs ``app.pre_turn`` for SciFact claims sequentially, then the same claims through
``app.apre_turn`` with ``--concurrency`` turns in flight (the app's own turn threads,
``VANCETOPE_RAG_TURN_WORKERS``), the two alternating ``--rounds`` times so load on a shared
machine hits both alike; query embedding included (the embedded model on the backend this
machine's ``auto`` chose). ``--micro both`` runs the concurrent turns twice a round, with
the micro-batching of waiting query embeddings forced off and on (``auto``: as the machine's
measurement chose). The store is one ``bench/pre_turn.py --store`` filled before:

    python bench/pre_turn.py --sizes 100000 --turns 10 --store 'sqlite:////tmp/pt/rag_{size}.db'
    python bench/concurrent_turns.py --store sqlite:////tmp/pt/rag_100000.db [--concurrency 16]
                                     [--turns 160] [--rounds 3] [--mode dense] [--threads 1]
                                     [--micro auto|off|on|both]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line
from pre_turn import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="a store bench/pre_turn.py filled")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--turns", type=int, default=160)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="dense", choices=("dense", "hybrid"))
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--micro", default="auto", choices=("auto", "off", "on", "both"))
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from vancetope_rag import EngineConfig, RagApp
    from vancetope_rag.recipes import RagParams

    app = RagApp.open(
        EngineConfig(store=args.store, node_id="bench", turn_workers=args.concurrency)
    )
    t, p = "bench", "chat"
    recipe = RagParams(retrieval_mode=args.mode)
    _, queries = load(1)
    turns = [queries[i % len(queries)] for i in range(args.turns)]
    for q in turns[:5]:  # warm: the matrices, the lexical index, the model
        app.pre_turn(t, p, [q], recipe)
    lexical = getattr(getattr(app.store.chunks, "lexical", None), "cache", None)
    if lexical is not None:
        lexical.wait_idle(600)
    from vancetope_rag.default_plugins.embedded import _LOADED

    accelerator = _LOADED[-1]._accelerator
    accelerator.wait()  # the backend auto chose, not torch while ONNX Runtime prepares
    chosen = accelerator.state

    batcher = _LOADED[-1]._batcher
    run, sizes = batcher._run, []

    def counted(texts: list[str]) -> object:
        sizes.append(len(texts))
        return run(texts)

    batcher._run = counted

    def micro(on: bool | None) -> None:
        on = chosen.micro_batch if on is None else on
        accelerator.state = dataclasses.replace(chosen, micro_batch=on)

    async def concurrent() -> list[list[str]]:
        gate = asyncio.Semaphore(args.concurrency)

        async def one(q: str) -> list[str]:
            async with gate:
                return await app.apre_turn(t, p, [q], recipe)

        return await asyncio.gather(*(one(q) for q in turns))

    def check(blocks: list[list[str]], expected: list[list[str]], lane: str) -> None:
        """A turn that failed or skipped is fast: its rate would not count."""
        differ = sum(a != b for a, b in zip(blocks, expected, strict=True))
        if differ:
            raise SystemExit(f"{lane}: {differ} of {len(turns)} turns gave another block")

    lanes = {
        "auto": [("", None)],
        "off": [(", micro off", False)],
        "on": [(", micro on", True)],
        "both": [(", micro off", False), (", micro on", True)],
    }[args.micro]
    seq: list[float] = []
    conc: dict[str, list[float]] = {label: [] for label, _ in lanes}
    expected: list[list[str]] = []
    for r in range(args.rounds):
        micro(False)  # one at a time: nothing to batch
        s = time.perf_counter()
        blocks = [app.pre_turn(t, p, [q], recipe) for q in turns]
        seq.append(len(turns) / (time.perf_counter() - s))
        expected = expected or blocks
        check(blocks, expected, "sequential")
        for label, on in lanes if r % 2 == 0 else lanes[::-1]:
            micro(on)
            s = time.perf_counter()
            blocks = asyncio.run(concurrent())
            conc[label].append(len(turns) / (time.perf_counter() - s))
            check(blocks, expected, f"concurrent{label}")
    if not all(expected):
        print(f"  turns with a block: {sum(map(bool, expected))} of {len(turns)}")
    micro(None)
    runtime = app.embeddings.provider("embedded").runtime()  # type: ignore[attr-defined]
    app.close()
    s50 = statistics.median(seq)
    head = f"turns/s over {args.turns} {args.mode} turns, median of {args.rounds} rounds"
    print(f"{head} ({runtime})")
    print(f"  sequential              {s50:7.1f}   rounds {', '.join(f'{x:.1f}' for x in seq)}")
    for label, rates in conc.items():
        c50 = statistics.median(rates)
        name = f"{args.concurrency} concurrent{label}"
        print(f"  {name:<23} {c50:7.1f}   rounds {', '.join(f'{x:.1f}' for x in rates)}")
        print(f"    concurrent/sequential {c50 / s50:.2f}x (target >= 1.5x)")
    if sizes:
        print(
            f"  micro-batched calls: {len(sizes)}, queries per call mean "
            f"{statistics.mean(sizes):.1f}, max {max(sizes)}"
        )
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average at the end: {' '.join(fh.read().split()[:3])}")
    print(machine_line())


if __name__ == "__main__":
    main()
