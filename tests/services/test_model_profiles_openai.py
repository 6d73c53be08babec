"""Model profiles through the ``openai`` provider and a loopback server that knows nothing of
``input_type`` (as TEI or Ollama): an e5 model gets its prefixes as text and chunks that fit
its 512-token window, the profile is pinned with the RAG and never probed again, a RAG from
before profiles keeps the old window without prefixes and status suggests a rebuild, and the
``ai.embedding.*`` overrides are pinned by the RAGs created after them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T
from openai_server import EmbeddingsServer, openai_app
from vancetope_rag.app import RagApp
from vancetope_rag.domain.retrieval.calibration import PROBE_TURNS

E5 = "intfloat/multilingual-e5-small"
PROBE = ["input type probe"]
LONG = " ".join(
    f"Sentence {i} tells of glaciers, rivers and violins at length." for i in range(1000)
)


def server_tokens(text: str) -> int:
    """Tokens of ``text`` as the loopback server counts them in its ``usage`` (words): what
    the RAG's chunks are sized by."""
    return len(text.split())


def e5_app(make_app: Any, server: EmbeddingsServer) -> RagApp:
    app: RagApp = openai_app(make_app, server, model=E5)
    return app


def index(app: RagApp, text: str = LONG) -> None:
    app.bring(T, P)
    app.documents.create(T, P, "documents/long.md", text)
    app.scheduler.run_until_idle(timeout_s=30)


def test_a_server_without_input_type_gets_the_e5_prefixes_as_text_in_the_window(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app = e5_app(make_app, server)
    index(app)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_profile is not None
    pinned = json.loads(rag.embedding_profile)
    assert (pinned["queryPrefix"], pinned["documentPrefix"], pinned["inputTypes"]) == (
        "query: ",
        "passage: ",
        None,  # the server embeds alike whatever the type: prefixes go as text
    )
    assert rag.embedding_dimension == 384  # from the profile: no dimension probe
    # the calibration's probe turns (minScore: auto) go as queries, with the query prefix
    probes = {f"query: {turn}" for turn in PROBE_TURNS}
    sent = [t for r in server.requests if r.inputs != PROBE for t in r.inputs]
    # ... and so do the relevance cut's pseudo-queries, sentences of the document itself
    queries = {t for t in sent if t.startswith("query: ")}
    assert probes <= queries
    assert all(t.removeprefix("query: ") in LONG for t in queries - probes)
    chunks = [t for t in sent if t not in queries and t.removeprefix("passage: ") in LONG]
    assert len(chunks) > 3 and all(t.startswith("passage: ") for t in chunks)
    assert max(server_tokens(t) for t in chunks) <= 512 - 2  # window less <s></s>
    status = app.project_rags.status(T, P)
    assert (
        status.chunk_counting is not None
        and "server's token counts (usage)" in status.chunk_counting
    )

    before = len(server.requests)
    app.rags.query(rag, "violins")
    assert [r.inputs for r in server.requests[before:]] == [["query: violins"]]
    assert app.project_rags.status(T, P).profile_note is None


def test_a_pinned_profile_is_never_probed_again(
    make_app: Any, server: EmbeddingsServer, store_uri: str
) -> None:
    first = e5_app(make_app, server)
    index(first)
    assert [r.inputs for r in server.requests].count(PROBE) == 2  # query and document once
    first.close()
    server.seen.clear()
    second = e5_app(make_app, server)  # another process on the same store
    rag = second.project_rags.find_default_rag(T, P)
    assert rag is not None
    second.rags.query(rag, "rivers")
    assert [r.inputs for r in server.requests] == [["query: rivers"]]


def test_a_rag_from_before_profiles_keeps_the_old_window_and_status_says_rebuild(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app = e5_app(make_app, server)
    index(app, "Glaciers carve valleys.")
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    old = app.store.control.insert_generation(
        replace(rag, id="old-gen", embedding_profile=None, generation=rag.generation + 1)
    )
    loaded = app.rags.model_for(old)
    assert (loaded.max_input_tokens, loaded.sends_input_type) == (8191, False)
    server.seen.clear()
    app.rags.query(old, "valleys")
    assert [r.inputs for r in server.requests] == [["valleys"]]  # as embedded before profiles
    note = app.rags.profile_note(old)
    assert note is not None and "created before model profiles" in note
    assert "rebuild" in note and "query prefix 'query: '" in note


def test_overrides_are_pinned_by_new_rags_and_a_change_suggests_a_rebuild(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app = e5_app(make_app, server)
    app.settings.set(T, P, "ai.embedding.maxInputTokens", "128")
    app.settings.set(T, P, "ai.embedding.queryPrefix", "search:")
    app.settings.set(T, P, "ai.embedding.documentPrefix", "none")
    index(app)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_profile is not None
    pinned = json.loads(rag.embedding_profile)
    assert (pinned["maxInputTokens"], pinned["queryPrefix"], pinned["documentPrefix"]) == (
        128,
        "search: ",
        "",
    )
    assert [r.inputs for r in server.requests].count(PROBE) == 0  # a hand-set prefix is text
    chunks = [t for r in server.requests for t in r.inputs if t in LONG]
    assert chunks and max(server_tokens(t) for t in chunks) <= 128 - 2 - 2
    assert not [t for t in chunks if t.startswith("passage: ")]
    server.seen.clear()
    app.rags.query(rag, "rivers")
    assert [r.inputs for r in server.requests] == [["search: rivers"]]
    assert app.project_rags.status(T, P).profile_note is None

    app.settings.set(T, P, "ai.embedding.queryPrefix", "find:")
    note = app.project_rags.status(T, P).profile_note
    assert note is not None and "'find: '" in note and "rebuild" in note
    server.seen.clear()
    app.rags.query(rag, "rivers")
    assert [r.inputs for r in server.requests] == [["search: rivers"]]  # pinned until then
