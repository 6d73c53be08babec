"""The ``openai`` provider against a real local server speaking the OpenAI embeddings wire
format (what Ollama, TEI, vLLM and OpenRouter expose): routing through ``baseUrl``, the
bearer key, the dimension probe, the embedding cache, and a rejected key that never leaks."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T
from openai_server import DIM, KEY, MODEL, WRONG_KEY, EmbeddingsServer, openai_app
from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins.openai import OpenAIProvider
from vancetope_rag.embeddings import EmbeddingSettings
from vancetope_rag.errors import EmbeddingConfigError

DOCS = {
    "documents/cats.md": "Cats purr, chase mice and nap in the sun all afternoon.",
    "documents/rockets.md": "Rockets burn liquid fuel and oxygen to reach orbit around Earth.",
    "documents/bread.md": "Bread dough needs flour, water, yeast and salt, then a hot oven.",
}


def index_docs(app: RagApp) -> None:
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=10)


def test_indexes_and_queries_through_an_openai_compatible_server(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app = openai_app(make_app, server)
    index_docs(app)
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"indexed"}
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    assert (rag.embedding_provider, rag.embedding_model, rag.embedding_dimension) == (
        "openai",
        MODEL,
        DIM,
    )

    hits = app.rags.query(rag, "which fuel do rockets burn to reach orbit?", top_k=3)
    assert hits[0].path == "documents/rockets.md"
    assert hits[0].score > hits[1].score

    seen = server.requests
    assert {(r.path, r.authorization, r.model) for r in seen} == {
        ("/v1/embeddings", f"Bearer {KEY}", MODEL),
        ("/tokenize", f"Bearer {KEY}", None),  # asked once how it counts tokens (404 here)
    }
    embeds = [r for r in seen if r.path == "/v1/embeddings"]
    assert {r.encoding_format for r in embeds} == {"base64"}  # the openai client's default
    assert [r.inputs for r in seen].count(["dimension probe"]) == 1  # probed once, then cached
    batch = [r for r in seen if len(r.inputs) > 1]
    assert len(batch) == 1 and sorted(batch[0].inputs) == sorted(DOCS.values())  # one batch
    assert seen[-1].inputs == ["which fuel do rockets burn to reach orbit?"]


def test_unchanged_text_is_not_sent_again(make_app: Any, server: EmbeddingsServer) -> None:
    app = openai_app(make_app, server)
    index_docs(app)
    before = len(server.requests)
    app.project_rags.reindex(T, P, rebuild=True)  # new RAG, same model: every chunk redone
    app.scheduler.run_until_idle(timeout_s=10)
    assert len(server.requests) == before  # all chunks came from the embedding cache
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and app.rags.chunk_count(rag) == len(DOCS)
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"indexed"}


def test_rejected_key_pauses_indexing_without_spending_attempts_or_leaking_it(
    make_app: Any, server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A known model needs no probe: the 401 comes from the embedding call of the indexer.
    # A refused key is the settings' fault, not the documents': they wait, attempts kept.
    app = openai_app(
        make_app, server, key=WRONG_KEY, model="text-embedding-3-small", config={"max_attempts": 1}
    )
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    with caplog.at_level(logging.DEBUG):
        app.scheduler.run_until_idle(timeout_s=5, stop_when_nothing_claimable=True)
    docs = app.documents.list_documents(T, P)
    assert {(d.index_state.value, d.index_attempts) for d in docs} == {("pending", 0)}
    assert {r.authorization for r in server.requests} == {f"Bearer {WRONG_KEY}"}
    assert len(server.requests) == 1  # the circuit opened: no call per document
    status = app.project_rags.status(T, P).to_json()
    assert status["paused"].startswith("paused: provider refuses the settings since ")
    assert "401" in status["paused"] and "ai.embedding.apiKey" in status["paused"]
    assert status["providerCircuit"]["state"] == "configError"
    for text in (caplog.text, json.dumps(status)):
        assert WRONG_KEY not in text

    app.settings.set(T, None, "ai.embedding.apiKey", KEY)  # another key: another endpoint
    app.scheduler.run_until_idle(timeout_s=10)
    docs = app.documents.list_documents(T, P)
    assert {(d.index_state.value, d.index_attempts) for d in docs} == {("indexed", 0)}


def test_rejected_key_at_the_dimension_probe_holds_indexing_until_fixed(
    make_app: Any, server: EmbeddingsServer, caplog: pytest.LogCaptureFixture
) -> None:
    # An unknown model is probed when the RAG is created: bring must not raise, and the
    # project is skipped (documents stay pending, attempts kept) with a warning, not failed.
    app = openai_app(make_app, server, key=WRONG_KEY)
    with caplog.at_level(logging.DEBUG):
        index_docs(app)
    assert app.project_rags.find_default_rag(T, P) is None
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"pending"}
    assert "model 'local-embedder'" in caplog.text and "refused the key" in caplog.text
    assert "401" in caplog.text and "ai.embedding.apiKey" in caplog.text
    status = json.dumps(app.project_rags.status(T, P).to_json())
    assert WRONG_KEY not in caplog.text + status

    app.settings.set(T, None, "ai.embedding.apiKey", KEY)  # fixed: indexing resumes
    app.scheduler.run_until_idle(timeout_s=10)
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"indexed"}


def test_without_base_url_the_provider_targets_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    settings = EmbeddingSettings(provider="openai", api_key=KEY)
    loaded = OpenAIProvider().load(settings, "text-embedding-3-small")  # known dim: no call
    assert loaded.dimension == 1536
    embed: Any = loaded.embed_model
    assert embed.api_base == "https://api.openai.com/v1"
    assert str(embed._get_client().base_url).startswith("https://api.openai.com/v1")


@pytest.mark.parametrize("key", [None, "  "])
def test_missing_api_key_names_the_setting(key: str | None) -> None:
    with pytest.raises(EmbeddingConfigError, match=r"ai\.embedding\.apiKey"):
        OpenAIProvider().load(EmbeddingSettings(provider="openai", api_key=key), MODEL)


def test_a_pinned_rag_is_not_probed_again_by_a_new_process(
    make_app: Any, server: EmbeddingsServer
) -> None:
    index_docs(openai_app(make_app, server))
    assert [r.inputs for r in server.requests].count(["dimension probe"]) == 1
    later = make_app(provider=None)  # another process on the same store: a fresh registry
    rag = later.project_rags.find_default_rag(T, P)
    assert rag is not None
    assert later.rags.query(rag, "rockets and orbit", top_k=1)[0].path == "documents/rockets.md"
    later.documents.create(T, P, "documents/more.md", "More rockets burn more fuel.")
    later.scheduler.run_until_idle(timeout_s=10)
    assert [r.inputs for r in server.requests].count(["dimension probe"]) == 1  # never again
    server.down()  # a start while the server is down still loads the pinned model
    third = make_app(provider=None)
    assert third.scheduler.blocked(T, P) is None  # loadable: no probe stands in the way


@pytest.mark.parametrize(
    ("fault", "first_check"),
    [
        ("down", "could not reach the embedding server"),
        ("key", "refused the key: check ai.embedding.apiKey"),
    ],
)
def test_a_refused_rebuild_says_what_to_check_first(
    make_app: Any, server: EmbeddingsServer, fault: str, first_check: str
) -> None:
    """The UI and the CLI show this message as the rebuild's refusal: it names what to check
    first in words, the exception's class only at the end (it was "the input_type probe of
    embedding model … failed: APIConnectionError …")."""
    from vancetope_rag.errors import RagError

    app = openai_app(make_app, server)
    index_docs(app)
    app.settings.set(T, None, "ai.embedding.model", "other-embedder")  # a new model: probed
    if fault == "down":
        import socket

        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        app.settings.set(T, None, "ai.embedding.baseUrl", f"http://127.0.0.1:{port}/v1")
    else:
        app.settings.set(T, None, "ai.embedding.apiKey", WRONG_KEY)
    with pytest.raises(RagError) as refused:
        app.project_rags.reindex(T, P, rebuild=True)
    message = refused.value.message
    assert first_check in message and "Error" not in message.split(first_check)[0]
    assert "probe" not in message and WRONG_KEY not in message
