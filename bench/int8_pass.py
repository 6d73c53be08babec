#!/usr/bin/env python
"""The vector cache's first pass: rows prepacked for oneDNN against the plain kernels.

On ``--rows`` random unit rows of ``--dim`` dimensions held as the cache holds them
(:class:`~vancetope_rag.store.inprocess.int8_rows.Int8Rows`), one pass for each query count of
``--queries``: once on the packed rows, once on the plain kernels (torch's weight-only kernel
for one or two queries, ``torch._int_mm`` for more), once on the float32 rows, in blocks of
``--calls`` calls alternating ``--blocks`` times; the median call of each lane. (Blocks, not
call by call: the two lanes read different copies of the rows, 38 MB each at 100k × 384, and
alternating every call would have each evict the other from the caches, which production,
running one lane only, never sees.) Also: what packing the rows takes, and what reading
the int8 rows once takes (numpy summing them as int64: the memory floor of a pass). Every
packed pass is checked to stay within its bound of the exact float32 scores.

    python bench/int8_pass.py [--rows 100000] [--dim 384] [--queries 1,2,3,8,16] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", default="1,2,3,8,16")
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args()

    import torch

    from vancetope_rag.store.inprocess.int8_rows import Int8Rows, onednn_int8
    from vancetope_rag.store.inprocess.scan_kernels import FLOAT32, INT_MM, WEIGHT_INT8

    if args.threads:
        torch.set_num_threads(args.threads)
    if not onednn_int8(torch):
        sys.exit("this torch has no oneDNN int8 matmul on prepacked rows: nothing to compare")
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    int8 = Int8Rows(torch, rows, args.rows)  # no kernel choice: packed here, by hand
    n = args.rows
    int8.pack(n)
    if int8.packed is None:
        sys.exit("the rows were not packed")

    packing = []
    for _ in range(3):
        start = time.perf_counter()
        int8.pack(n)
        packing.append((time.perf_counter() - start) * 1000)
    flat = int8.weights[:n].numpy().view(np.int64)
    reading = _median_ms(lambda: flat.sum(), args.calls)

    packed = int8.packed
    assert packed is not None
    lane_names = ("packed", "plain", "float32")
    print(f"{n} rows x {args.dim}, torch threads {torch.get_num_threads()}; medians, ms")
    print(f"  packing the rows           {statistics.median(packing):8.1f}")
    print(f"  reading the int8 rows once {reading:8.2f}")
    print(f"  {'queries':<8} " + " ".join(f"{k:>8}" for k in lane_names))
    for count in (int(q) for q in args.queries.split(",")):
        queries = rng.standard_normal((count, args.dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        plain = int8._passes[WEIGHT_INT8 if count < 3 else INT_MM]
        f32 = int8._passes[FLOAT32]
        calls = {
            "packed": functools.partial(int8._scores_packed, queries, n, packed),
            "plain": functools.partial(plain, queries, n),
            "float32": functools.partial(f32, queries, n),
        }
        exact = rows.astype(np.float64) @ queries.astype(np.float64).T
        for call in calls.values():
            approx, bounds = call()
            assert np.all(np.abs(approx - exact.T).max(axis=1) <= bounds), "outside the bound"
        lanes: dict[str, list[float]] = {k: [] for k in lane_names}
        for block in range(args.blocks):
            for lane in lane_names if block % 2 == 0 else lane_names[::-1]:
                calls[lane]()  # its rows into the caches
                for _ in range(args.calls):
                    start = time.perf_counter()
                    calls[lane]()
                    lanes[lane].append((time.perf_counter() - start) * 1000)
        medians = " ".join(f"{statistics.median(lanes[k]):8.2f}" for k in lane_names)
        print(f"  {count:<8} {medians}")
    print(machine_line())


def _median_ms(call: object, calls: int) -> float:
    assert callable(call)
    call()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


if __name__ == "__main__":
    main()
