#!/usr/bin/env python
"""The chat proxy's overhead: a turn through ``vancetope-rag proxy`` against the same turn
sent to the upstream directly, beside the pre-turn hook's own latency, in one run.

* The project's ``_documents`` holds ``--size`` chunks (default 10k) on the embedded SQLite
  store: real all-MiniLM-L6-v2 embeddings of SciFact abstracts, replicated with noise as
  ``bench/pre_turn.py`` does; AutoInject ON; queries are SciFact claims.
* The upstream is the tests' loopback chat server (``tests/chat_upstream.py``), in this
  process; the proxy is the real command (``vancetope-rag proxy``) in a child process, so
  client and proxy do not share a GIL; both load the embedded model with the same threads.
* Lanes alternate turn by turn, so load on the shared machine hits each alike: the hook
  itself (``app.pre_turn`` in this process), the upstream directly and through the proxy
  (the official ``openai`` SDK), non-streamed (whole answer) and streamed (time to the first
  chunk).

    python bench/proxy.py [--size 10000] [--turns 200] [--texts 1000] [--threads 1] [--json]

Target (issue 24): proxy p50 - direct p50 <= pre-turn p50 + 5 ms, for both answers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _machine import machine_line  # noqa: E402
from pre_turn import fill, load, pct  # noqa: E402

from chat_upstream import running_upstream  # noqa: E402

KEY = "vrk_bench-proxy-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_proxy(store: str, upstream: Any, keys: Path, threads: int, port: int) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VANCETOPE_RAG_", "RAG_"))}
    env |= {
        "PYTHONPATH": str(HERE.parent / "src"),
        "VANCETOPE_RAG_PROXY_UPSTREAM_API_KEY": upstream.key,
        "VANCETOPE_RAG_TORCH_THREADS": str(threads),
        "VANCETOPE_RAG_EMBEDDED_BACKEND": "torch",
        "VANCETOPE_RAG_INDEXER_ENABLED": "false",
    }
    command = [sys.executable, "-m", "vancetope_rag.cli", "--store", store, "proxy"]
    command += ["--upstream", upstream.base_url, "--keys", str(keys), "--port", str(port)]
    return subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 2), "p99_ms": round(pct(values, 99), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--texts", type=int, default=1000, help="distinct SciFact texts embedded")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, here and in the proxy")
    ap.add_argument(
        "--max-tokens", type=int, default=None, help="rag.autoInject.maxTokens (block size)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import openai
    import yaml

    from vancetope_rag import EngineConfig, RagApp
    from vancetope_rag.proxy import hash_key

    os.environ["VANCETOPE_RAG_EMBEDDED_BACKEND"] = "torch"
    tmp = Path(tempfile.mkdtemp(prefix="vrag-proxy-"))
    store = f"sqlite:///{tmp}/rag.db"
    config = EngineConfig(
        store=store, node_id="bench", torch_threads=args.threads, indexer_enabled=False
    )
    app = RagApp.open(config)
    t, p = "bench", "chat"
    app.settings.set(t, None, "ai.embedding.provider", "embedded")
    app.settings.set(t, p, "rag.autoInject.enabled", "ON")
    if args.max_tokens:
        app.settings.set(t, p, "rag.autoInject.maxTokens", args.max_tokens)
    app.bring(t, p)
    rag = app.project_rags.find_default_rag(t, p)
    assert rag is not None
    texts, queries = load(args.texts)
    model = app.rags.model_for(rag).embed_model
    vectors = np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32)
    fill(app, rag, args.size, texts, vectors, np.random.default_rng(0), 0.02)
    keys = tmp / "keys.yaml"
    entry = {"name": "bench", "hash": hash_key(KEY), "tenant": t, "projects": [p]}
    keys.write_text(yaml.safe_dump({"keys": [{**entry, "requestsPerMinute": 0}]}))

    turns = [queries[i % len(queries)] for i in range(args.turns)]
    lat: dict[str, list[float]] = {
        k: []
        for k in (
            *("preTurn", "proxyPreTurn", "direct", "proxy", "ownCost"),
            *("proxyOptedOut", "directStream", "proxyStream"),
        )
    }
    injected = 0
    port = free_port()
    with running_upstream() as upstream:
        child = start_proxy(store, upstream, keys, args.threads, port)
        try:
            direct = openai.OpenAI(base_url=upstream.base_url, api_key=upstream.key)
            via = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/p/{p}/v1", api_key=KEY)
            deadline = time.monotonic() + 120
            while True:  # until the child answers
                try:
                    via.models.list()
                    break
                except openai.APIConnectionError:
                    if child.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the proxy did not start") from None
                    time.sleep(0.2)

            def chat(c: openai.OpenAI, q: str, **more: Any) -> Any:
                messages = [{"role": "system", "content": "You help."}]
                messages.append({"role": "user", "content": q})
                raw = c.chat.completions.with_raw_response.create(
                    model="echo-1",
                    messages=messages,  # type: ignore[arg-type]
                    **more,
                )
                raw.parse()
                return raw.headers

            def first_chunk(c: openai.OpenAI, q: str) -> float:
                start = time.perf_counter()
                stream = c.chat.completions.create(
                    model="echo-1",
                    messages=[{"role": "user", "content": q}],
                    stream=True,
                )
                first = None
                for _ in stream:
                    if first is None:
                        first = time.perf_counter() - start
                assert first is not None
                return first * 1000

            for q in turns[:10]:  # warm both sides: model, matrices, connections
                app.pre_turn(t, p, [q])
                chat(direct, q), chat(via, q), first_chunk(direct, q), first_chunk(via, q)
            for q in turns:
                s = time.perf_counter()
                app.pre_turn(t, p, [q])
                lat["preTurn"].append((time.perf_counter() - s) * 1000)
                s = time.perf_counter()
                chat(direct, q)
                lat["direct"].append(direct_ms := (time.perf_counter() - s) * 1000)
                s = time.perf_counter()
                headers = chat(via, q)
                lat["proxy"].append(proxy_ms := (time.perf_counter() - s) * 1000)
                injected += headers.get("x-vancetope-rag") == "injected"
                # The proxy's own pre_turn, as its Server-Timing header says; the rest of the
                # turn's overhead is the proxy's own cost (paired within the turn).
                inner = float(headers.get("server-timing", "rag;dur=0").split("=", 1)[1])
                lat["proxyPreTurn"].append(inner)
                lat["ownCost"].append(proxy_ms - direct_ms - inner)
                s = time.perf_counter()
                chat(via, q, extra_headers={"X-Vancetope-Rag-Inject": "off"})
                lat["proxyOptedOut"].append((time.perf_counter() - s) * 1000)
                lat["directStream"].append(first_chunk(direct, q))
                lat["proxyStream"].append(first_chunk(via, q))
        finally:
            child.terminate()
            child.wait(30)
    chunks = app.rags.chunk_count(rag)
    app.close()
    shutil.rmtree(tmp, ignore_errors=True)

    rows = {k: summary(v) for k, v in lat.items()}
    pre = rows["preTurn"]["p50_ms"]
    over = round(rows["proxy"]["p50_ms"] - rows["direct"]["p50_ms"], 2)
    over_stream = round(rows["proxyStream"]["p50_ms"] - rows["directStream"]["p50_ms"], 2)
    result = {
        "chunks": chunks,
        "turns": args.turns,
        "turnsInjected": injected,
        "lanes": rows,
        "overheadP50Ms": over,
        "overheadStreamP50Ms": over_stream,
        "ownCostP50Ms": rows["ownCost"]["p50_ms"],
        "targetMs": round(pre + 5, 2),
        "met": over <= pre + 5 and over_stream <= pre + 5,
        "machine": machine_line(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"chat proxy over {args.turns} turns, lanes alternating; {chunks} chunks, embedded "
        f"model, AutoInject ON ({injected}/{args.turns} proxied turns injected)"
    )
    print(f"{'lane':>30} {'p50 ms':>8} {'p99 ms':>8}")
    names = {
        "preTurn": "pre-turn hook (in process)",
        "proxyPreTurn": "pre-turn inside the proxy",
        "ownCost": "proxy's own cost per turn",
        "direct": "upstream direct, whole",
        "proxy": "through the proxy, whole",
        "proxyOptedOut": "proxy, opted out, whole",
        "directStream": "upstream direct, 1st chunk",
        "proxyStream": "through the proxy, 1st chunk",
    }
    for key, row in rows.items():
        print(f"{names[key]:>30} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}")
    print(
        f"proxy overhead p50: {over:.2f} ms whole, {over_stream:.2f} ms to the first chunk; "
        f"target <= pre-turn p50 + 5 = {pre + 5:.2f} ms: {'met' if result['met'] else 'MISSED'}"
    )
    print(
        f"the proxy's own cost per turn (proxy - direct - its pre_turn, paired) p50 "
        f"{rows['ownCost']['p50_ms']:.2f} ms; its pre_turn p50 "
        f"{rows['proxyPreTurn']['p50_ms']:.2f} ms"
    )
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average at the end: {' '.join(fh.read().split()[:3])}")
    print(result["machine"])


if __name__ == "__main__":
    main()
