"""The pre-turn hook's blocks, byte for byte, against blocks recorded before it was made faster.

The pre-turn path was made cheaper in what a turn spends beyond the query embedding (candidate rows,
citations, the token budget, the template, the settings snapshot, the fusion). None of that may
change what the model is shown, so the blocks of fixed stores and fixed turns were recorded once,
with the code before those changes, in ``golden/pre_turn_blocks.json``; every run must give them
again.

The stores are built deterministically with the ``hashing`` provider (exact, the same on every
machine): a small project indexed through the real indexer (documents, summaries, a chunk
added by hand, a document deleted after indexing) and a 21,000-chunk RAG written straight to
the store, past the vector cache's int8 threshold (20k rows) and the lexical index's
background build. The turns run dense and hybrid, with the default template and budget and
with recipes that cut the block to a few hundred tokens, cap hits per document, ask for many
hits, or bring their own template.

To record the file again (only when blocks are meant to change, and say why in the commit):
``VANCETOPE_RAG_WRITE_GOLDEN=1 pytest tests/chat/test_pre_turn_golden.py``.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import Chunk
from vancetope_rag.recipes import RagParams
from vancetope_rag.store.port.types import NewDocument, RagScope

AppFactory = Callable[..., RagApp]

GOLDEN = Path(__file__).parent / "golden" / "pre_turn_blocks.json"
T, P = "t1", "golden"

#: Words of the generated texts: a few hundred, so queries share terms with some chunks only.
_SYLLABLES = ["ka", "lo", "mi", "ren", "sa", "tu", "vel", "qo", "dri", "pha", "nu", "zem"]


def _vocabulary(rnd: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rnd.choice(_SYLLABLES) for _ in range(rnd.randint(2, 3))))
    return sorted(words)


def _sentence(rnd: random.Random, words: list[str]) -> str:
    picked = [rnd.choice(words[: rnd.choice((60, 200, len(words)))]) for _ in range(9)]
    return " ".join(picked).capitalize() + rnd.choice((".", ".", "!", "?"))


def _text(rnd: random.Random, words: list[str], sentences: int) -> str:
    paras = []
    for _ in range(max(1, sentences // 4)):
        paras.append(" ".join(_sentence(rnd, words) for _ in range(4)))
    return "\n\n".join(paras)


RECIPES: dict[str, RagParams | None] = {
    "cascade": None,
    "dense": RagParams(retrieval_mode="dense"),
    "hybrid": RagParams(retrieval_mode="hybrid"),
    "tight-budget": RagParams(retrieval_mode="hybrid", max_tokens=160, top_k=8),
    "one-per-doc": RagParams(retrieval_mode="dense", max_per_document=1, top_k=6),
    "many": RagParams(retrieval_mode="hybrid", top_k=20, max_per_document=3, max_tokens=4000),
    "low-threshold": RagParams(retrieval_mode="dense", min_score=0.05, top_k=10),
    "template": RagParams(
        retrieval_mode="hybrid",
        template=(
            "<rag-context>\n{% for s in sources %}{{ s.label }}={{ s.path }};{% endfor %}\n"
            "{% for h in hits %}[{{ h.label }}|{{ h.kind }}|{{ '%.4f'|format(h.score) }}] "
            "{{ h.text[:80] }}\n{% endfor %}</rag-context>"
        ),
    ),
}


def _queries(rnd: random.Random, words: list[str], n: int) -> list[str]:
    out = []
    for i in range(n):
        k = rnd.randint(2, 7)
        q = " ".join(rnd.choice(words[:200]) for _ in range(k))
        out.append(q if i % 5 else q + " and the " + rnd.choice(words))
    return out


def _small_project(app: RagApp) -> list[str]:
    """60 documents indexed by the real indexer, with summaries, a manual chunk and a document
    deleted after indexing (its hits must be dropped from blocks); the turns' queries."""
    rnd = random.Random(25)
    words = _vocabulary(rnd, 300)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, P, "rag.minScore", 0.07)
    app.settings.set(T, P, "rag.project.includeSummaries", True)
    app.bring(T, P)
    for d in range(60):
        app.document_saved(T, P, f"docs/part{d % 4}/note-{d:02d}.md", _text(rnd, words, 3 + d % 9))
    assert app.scheduler.run_until_idle(timeout_s=60).failed == 0
    for d in range(0, 60, 7):
        app.summary_saved(T, P, f"docs/part{d % 4}/note-{d:02d}.md", _text(rnd, words, 2))
    assert app.scheduler.run_until_idle(timeout_s=60).failed == 0
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    app.rags.add_text(rag, "pasted", _text(rnd, words, 4), path="notes/pasted.md")
    # Deleted without re-indexing: its chunks stay until the next pass, its hits may not show.
    gone = app.documents.get_by_path(T, P, "docs/part1/note-05.md")
    assert gone is not None
    app.store.control.delete_document(T, P, gone.id)
    return _queries(rnd, words, 30)


def _large_rag(app: RagApp) -> list[str]:
    """21,000 chunks (two per document row) written to the store with hashing vectors."""
    rnd = random.Random(2025)
    words = _vocabulary(rnd, 600)
    project = P + "-large"
    app.settings.set(T, project, "rag.minScore", 0.2)
    app.bring(T, project)
    rag = app.project_rags.find_default_rag(T, project)
    assert rag is not None
    model = app.rags.model_for(rag).embed_model
    scope = RagScope.of(rag)
    texts = [_text(rnd, words, 4) for _ in range(3000)]
    vectors = model.get_text_embedding_batch(texts)
    with app.store.control.transaction():
        doc_ids = [
            app.store.control.insert_document(
                NewDocument(T, project, f"big/{d:05d}.txt", "text/plain", texts[d % 3000])
            ).id
            for d in range(10_500)
        ]
    batch: list[Chunk] = []
    for i in range(21_000):
        j = (i * 7) % 3000
        batch.append(
            Chunk(
                id=uuid.UUID(int=rnd.getrandbits(128)).hex,
                rag_id=rag.id,
                source_ref=doc_ids[i // 2],
                text=texts[j],
                embedding=vectors[j],
                path=f"big/{i // 2:05d}.txt",
            )
        )
        if len(batch) == 5000:
            app.store.chunks.add_chunks(scope, batch)
            batch = []
    app.store.chunks.add_chunks(scope, batch)
    return _queries(rnd, words, 16)


def _blocks(app: RagApp, project: str, queries: list[str]) -> Iterator[dict[str, object]]:
    for name, recipe in RECIPES.items():
        for q in queries:
            blocks = app.pre_turn(T, project, [q], recipe)
            yield {"project": project, "recipe": name, "query": q, "blocks": blocks}


def test_blocks_are_the_recorded_ones(make_app: AppFactory) -> None:
    app = make_app(provider="hashing", tenant=T)
    turns: list[dict[str, object]] = []
    small = _small_project(app)
    large = _large_rag(app)
    lexical_cache = getattr(getattr(app.store.chunks, "lexical", None), "cache", None)
    app.pre_turn(T, P + "-large", [large[0]], RECIPES["hybrid"])  # starts the lexical build
    if lexical_cache is not None:
        lexical_cache.wait_idle(120)
    turns.extend(_blocks(app, P, small))
    turns.extend(_blocks(app, P + "-large", large))
    # Two user messages in one turn, and a turn whose messages hold no text.
    turns.append(
        {"project": P, "recipe": "two", "query": "", "blocks": app.pre_turn(T, P, small[:2])}
    )
    turns.append({"project": P, "recipe": "blank", "query": "", "blocks": app.pre_turn(T, P, [])})
    injected = sum(bool(t["blocks"]) for t in turns)
    # The fixture must exercise the hook: most turns get a block, some do not.
    assert len(turns) - 10 > injected > len(turns) // 2, injected

    if os.environ.get("VANCETOPE_RAG_WRITE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(turns, indent=1, ensure_ascii=False) + "\n", "utf-8")
        pytest.skip(f"recorded {len(turns)} turns in {GOLDEN}")
    expected = json.loads(GOLDEN.read_text("utf-8"))
    assert len(turns) == len(expected)
    for got, want in zip(turns, expected, strict=True):
        assert got == want, f"{want['project']} / {want['recipe']} / {want['query']!r}"
