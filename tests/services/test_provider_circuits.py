"""Whose failure is it: the ``openai`` provider against the loopback server answering with
faults. An outage (5xx, 429, connection refused) or refused settings (401/403/404) open the
endpoint's circuit: the documents wait without spending an attempt, status says why, queries
are refused at once. A 400 for one input is that document's. One endpoint down never pauses
another. The circuits run on a fake clock: no test waits out a backoff."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T, call_tool
from openai_server import KEY, EmbeddingsServer, Fault, serve
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.errors import ProviderUnavailableError

MODEL = "text-embedding-3-small"  # a known dimension: no probe, the indexer's call is first
TEXTS = {
    "documents/cats.md": "Cats purr, chase mice and nap in the sun all afternoon.",
    "documents/rockets.md": "Rockets burn liquid fuel and oxygen to reach orbit around Earth.",
    "documents/bread.md": "Bread dough needs flour, water, yeast and salt, then a hot oven.",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider_app(
    make_app: Any, server: EmbeddingsServer, tenant: str = T, **config: Any
) -> tuple[RagApp, Clock]:
    app: RagApp = make_app(provider="openai", tenant=tenant, config={"max_attempts": 2, **config})
    app.settings.set(tenant, None, "ai.embedding.apiKey", KEY)
    app.settings.set(tenant, None, "ai.embedding.baseUrl", server.base_url)
    app.settings.set(tenant, None, "ai.embedding.model", MODEL)
    clock = Clock()
    app.rags.circuits.clock = clock
    return app, clock


def add_docs(app: RagApp, tenant: str = T, texts: dict[str, str] = TEXTS) -> None:
    app.bring(tenant, P)
    for path, text in texts.items():
        app.documents.create(tenant, P, path, text)


def states(app: RagApp, tenant: str = T) -> set[tuple[str, int]]:
    return {
        (d.index_state.value, d.index_attempts) for d in app.documents.list_documents(tenant, P)
    }


@pytest.fixture
def second_server() -> Iterator[EmbeddingsServer]:
    yield from serve()


def test_a_429_pauses_indexing_for_its_retry_after_without_spending_attempts(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app, clock = provider_app(make_app, server)
    add_docs(app)
    server.faults = [Fault(429, {"Retry-After": "120"})]
    app.scheduler.tick()
    assert states(app) == {("pending", 0)}
    sent = len(server.requests)
    status = app.project_rags.status(T, P).to_json()
    assert status["paused"].startswith("paused: provider unreachable since ")
    assert server.base_url in status["paused"] and KEY not in str(status)
    circuit = status["providerCircuit"]
    assert circuit["state"] == "unreachable" and 119 <= circuit["retryInSeconds"] <= 120

    clock.now += 119
    assert app.scheduler.tick().claimed == 0  # still paused: nothing claimed, nothing sent
    assert len(server.requests) == sent
    assert app.metrics.runs("paused") >= 1

    clock.now += 2
    app.scheduler.tick()
    assert states(app) == {("indexed", 0)}
    assert app.project_rags.status(T, P).paused is None


@pytest.mark.parametrize(
    ("status", "state"),
    [(500, "unreachable"), (503, "unreachable"), (403, "configError"), (404, "configError")],
)
def test_provider_and_settings_failures_pause_the_project(
    make_app: Any, server: EmbeddingsServer, status: int, state: str
) -> None:
    app, _ = provider_app(make_app, server, max_attempts=1)
    add_docs(app)
    server.faults = [Fault(status)]
    app.scheduler.tick()
    assert states(app) == {("pending", 0)}  # max_attempts=1: one counted attempt would fail them
    assert app.project_rags.status(T, P).to_json()["providerCircuit"]["state"] == state
    assert len(server.requests) == 1  # one batch call, not one call per document


def test_a_400_for_one_input_counts_against_that_document_only(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app, _ = provider_app(make_app, server, max_attempts=1)
    server.refused_inputs = {"poison"}
    add_docs(app, texts={**TEXTS, "documents/bad.md": "A poison text the server refuses."})
    app.scheduler.tick()
    by_path = {d.path: d for d in app.documents.list_documents(T, P)}
    bad = by_path.pop("documents/bad.md")
    assert (bad.index_state.value, bad.index_attempts) == ("failed", 1)
    assert "400" in (bad.index_last_error or "")
    assert {(d.index_state.value, d.index_attempts) for d in by_path.values()} == {("indexed", 0)}
    assert app.project_rags.status(T, P).paused is None  # the provider answered


def test_one_endpoint_down_does_not_pause_another(
    make_app: Any, server: EmbeddingsServer, second_server: EmbeddingsServer
) -> None:
    app, _ = provider_app(make_app, server)
    app.settings.set("t2", None, "ai.embedding.provider", "openai")
    app.settings.set("t2", None, "ai.embedding.apiKey", KEY)
    app.settings.set("t2", None, "ai.embedding.baseUrl", second_server.base_url)
    app.settings.set("t2", None, "ai.embedding.model", MODEL)
    add_docs(app)
    add_docs(app, tenant="t2")
    server.down()  # connection refused
    app.scheduler.tick()
    assert states(app) == {("pending", 0)}
    assert states(app, "t2") == {("indexed", 0)}
    assert app.project_rags.status(T, P).paused is not None
    assert app.project_rags.status("t2", P).paused is None
    server.up()


def test_while_the_circuit_is_open_queries_are_refused_at_once(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app, clock = provider_app(make_app, server)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    add_docs(app)
    app.scheduler.run_until_idle(timeout_s=10)
    assert states(app) == {("indexed", 0)}
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None

    server.faults = [Fault(503)]
    with pytest.raises(ProviderUnavailableError):
        app.rags.query(rag, "what do rockets burn?")  # this call opens the circuit
    sent = len(server.requests)
    assert app.pre_turn(T, P, ["what do rockets burn?"]) == []  # the turn goes on, no block
    result = call_tool(app.tools(T, P), "rag_query", ragId="_documents", query="rockets")
    # At once: no embed call while open (what happened; a wall-clock bound would measure
    # the machine's load, not the circuit).
    assert len(server.requests) == sent
    assert result["code"] == "PROVIDER_UNAVAILABLE"
    assert "unavailable" in result["error"] and KEY not in result["error"]

    clock.now += 3  # due: the next query is the trial, and it closes the circuit
    assert app.rags.query(rag, "what do rockets burn?")[0].path == "documents/rockets.md"
    assert app.project_rags.status(T, P).paused is None


def test_an_index_run_says_the_provider_is_down_and_exits_1(
    make_app: Any, server: EmbeddingsServer, store_uri: str
) -> None:
    app, _ = provider_app(make_app, server)
    add_docs(app)
    server.down()
    result = CliRunner().invoke(cli, ["--store", store_uri, "--tenant", T, "--project", P, "index"])
    assert result.exit_code == 1
    assert "error: indexing paused: provider unreachable since " in result.stderr
    assert server.base_url in result.stderr and KEY not in result.output + result.stderr
    assert states(app) == {("pending", 0)}


def test_rest_status_says_paused_and_why(make_app: Any, server: EmbeddingsServer) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vancetope_rag.api import create_api, issue_token

    secret = "jwt-test-secret-0123456789abcdefghijklmnop"
    app, _ = provider_app(make_app, server, jwt_secret=secret)
    add_docs(app)
    server.faults = [Fault(503)]
    app.scheduler.tick()
    token = issue_token(secret, subject="t", tenant=T, projects=[P], perms=("WRITE",), ttl_s=60)
    with TestClient(create_api(app)) as client:
        response = client.get(
            f"/brain/{T}/projects/{P}/rag/status", headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200
    data = response.json()
    assert data["paused"].startswith("paused: provider unreachable since ")
    circuit = data["providerCircuit"]
    assert (circuit["state"], circuit["provider"], circuit["baseUrl"]) == (
        "unreachable",
        "openai",
        server.base_url,
    )
    assert "503" in circuit["error"] and KEY not in response.text


def test_a_rebuild_waits_out_an_outage_without_failing_its_documents(
    make_app: Any, server: EmbeddingsServer
) -> None:
    app, clock = provider_app(make_app, server, max_attempts=1)
    add_docs(app)
    app.scheduler.run_until_idle(timeout_s=10)
    app.settings.set(T, None, "ai.embedding.model", "text-embedding-3-large")
    started = app.project_rags.reindex(T, P, rebuild=True).migration
    assert started is not None
    server.down()
    for _ in range(3):
        app.scheduler.tick()
    items = app.store.rebuilds.list_items(started.id)
    assert {(i.state.value, i.attempts) for i in items} == {("pending", 0)}
    server.up()
    clock.now += 60
    app.scheduler.run_until_idle(timeout_s=20)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_model == "text-embedding-3-large"
    assert states(app) == {("indexed", 0)}
