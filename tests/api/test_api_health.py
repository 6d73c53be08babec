"""`serve`'s probes and operator logs: /healthz and /readyz (unauthenticated, cheap, leaking
nothing), one access line per request on ``vancetope_rag.access`` with its numbers as
fields, and the process and platform collectors on /metrics.

Before, `serve` had no probe routes (a load balancer could only poll an authenticated
route or /metrics), its access lines went to ``vancetope_rag.api.access`` at INFO with the
raw path and no request id, and /metrics had no process or platform families.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from api_support import SECRET, bearer, make_token
from fastapi.testclient import TestClient

import postgres_support
from fakes import P, T
from request_ids import REQUEST_IDS
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp
from vancetope_rag.store.port.heartbeats import Beat
from vancetope_rag.store.postgres.store import PostgresStore, open_postgres_store


def test_healthz_and_readyz_answer_without_a_token(client: TestClient) -> None:
    live = client.get("/healthz")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    assert client.head("/healthz").status_code in (200, 405)


def test_metrics_carry_the_process_and_platform_collectors(client: TestClient) -> None:
    text = client.get("/metrics").text
    assert "python_info{" in text
    assert "process_resident_memory_bytes" in text
    assert "process_cpu_seconds_total" in text


@pytest.mark.parametrize(("given", "kept"), REQUEST_IDS)
def test_serve_keeps_a_request_id_by_the_rule_the_proxy_keeps_it(
    client: TestClient, given: str, kept: bool
) -> None:
    echoed = client.get("/healthz", headers={"X-Request-Id": given}).headers["X-Request-Id"]
    assert (echoed == given) is kept
    assert echoed and len(echoed) <= 128 and " " not in echoed


@pytest.fixture
def pg_store(clock: Any) -> Iterator[tuple[str, PostgresStore]]:
    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri, clock=clock)
    store.initialize()
    yield name, store
    store.close()
    postgres_support.drop_schema(name)


def test_readyz_is_503_with_a_reason_when_the_store_lost_its_schema(
    make_app: Callable[..., RagApp], pg_store: tuple[str, PostgresStore]
) -> None:
    name, store = pg_store
    app = make_app(store=store, config={"jwt_secret": SECRET})
    with TestClient(create_api(app)) as client:
        assert client.get("/readyz").status_code == 200
        postgres_support.drop_schema(name)  # an operator's mistake: the tables are gone
        # the probe's answer is cached for a second at most
        answer = client.get("/readyz")
        for _ in range(30):
            if answer.status_code == 503:
                break
            time.sleep(0.1)
            answer = client.get("/readyz")
        assert answer.status_code == 503
        body = answer.json()
        assert body["status"] == "unavailable"
        assert "not initialised" in body["reason"] and "init" in body["reason"]
        # nothing about the deployment: no URI, host, schema or driver message
        assert name not in answer.text and "postgresql" not in answer.text
        assert client.get("/healthz").status_code == 200  # alive all the same


def test_readyz_says_unreachable_without_quoting_the_store(
    make_app: Callable[..., RagApp], pg_store: tuple[str, PostgresStore]
) -> None:
    _, store = pg_store
    app = make_app(store=store, config={"jwt_secret": SECRET})
    with TestClient(create_api(app)) as client:
        store.db.pool.close()  # no connection can be had any more
        answer = client.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["reason"] == "store unreachable"


@pytest.fixture
def access(caplog: pytest.LogCaptureFixture) -> Callable[[], list[logging.LogRecord]]:
    caplog.set_level(logging.DEBUG, logger="vancetope_rag.access")

    def records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "vancetope_rag.access"]

    return records


def test_access_lines_name_the_route_template_and_carry_fields(
    api_app: RagApp, access: Callable[[], list[logging.LogRecord]]
) -> None:
    token = make_token()
    token_query = f"?token={token}"
    with TestClient(create_api(api_app)) as client:
        ok = client.get(
            f"/brain/{T}/projects/{P}/rag/status",
            headers={**bearer(token), "X-Request-Id": "req-42"},
        )
        assert ok.status_code == 200 and ok.headers["X-Request-Id"] == "req-42"
        client.get(f"/brain/{T}/projects/{P}/rag/documents{token_query}&q=secret-plans")
        denied = client.get(f"/brain/{T}/projects/{P}/rag/status")
        assert denied.status_code == 401
        odd = client.get(
            f"/brain/{T}/projects/{P}/rag/status",
            headers={**bearer(token), "X-Request-Id": "bad id\x7fforged line"},
        )
        probe = client.get("/healthz")
        assert probe.status_code == 200 and probe.headers["X-Request-Id"]
    every = access()
    # probes and scrapes come every few seconds: their lines are DEBUG, the rest INFO
    assert [r.levelname for r in every] == ["INFO"] * 4 + ["DEBUG"]
    lines = every[:4]
    first = lines[0]
    assert (first.method, first.route, first.status) == (  # type: ignore[attr-defined]
        "GET",
        "/brain/{tenant}/projects/{project}/rag/status",
        200,
    )
    assert first.request_id == "req-42"  # type: ignore[attr-defined]
    assert isinstance(first.duration_ms, float)  # type: ignore[attr-defined]
    assert "req-42" in first.getMessage() and "/rag/status" in first.getMessage()
    assert lines[2].status == 401  # type: ignore[attr-defined]
    # the caller's id was no safe token: one of ours instead, echoed back
    made = lines[3].request_id  # type: ignore[attr-defined]
    assert made != "bad id\x7fforged line" and odd.headers["X-Request-Id"] == made
    text = " ".join(r.getMessage() + repr(r.__dict__) for r in lines)
    assert "secret-plans" not in text and "token=" not in text
    assert SECRET not in text and token not in text


def test_rest_status_says_no_indexer_ran_and_lists_live_workers(
    api_app: RagApp, client: TestClient
) -> None:
    """Before, the status of documents waiting for a worker that never came only said
    "pending"; now it says no indexer ran, and names the live workers once one ticks."""
    api_app.documents.create(T, P, "documents/a.md", "apples and pears")
    data = client.get(f"/brain/{T}/projects/{P}/rag/status", headers=bearer()).json()
    assert data["indexer"]["note"].startswith("no indexer has run yet")
    assert data["indexer"]["workers"] == [] and data["indexer"]["lastTick"] is None
    api_app.store.control.record_heartbeat(
        Beat("node-1:ab", node_id="test-node", version="1.0", interval_s=30)
    )
    data = client.get(f"/brain/{T}/projects/{P}/rag/status", headers=bearer()).json()
    assert data["indexer"]["note"] is None
    (worker,) = data["indexer"]["workers"]
    assert (worker["workerId"], worker["nodeId"], worker["version"]) == (
        "node-1:ab",
        "test-node",
        "1.0",
    )
