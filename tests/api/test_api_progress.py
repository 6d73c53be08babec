"""Progress of indexing and of a rebuild: REST and the CLI show the same numbers (both read
them from the store), rates come from completion times on the store's clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from api_support import SECRET, bearer
from click.testing import CliRunner
from fastapi.testclient import TestClient

from fakes import P, T
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli

AppFactory = Callable[..., RagApp]
BASE = f"/brain/{T}/projects/{P}"


@pytest.fixture
def papp(make_app: AppFactory, clock: Any) -> RagApp:
    app = make_app(clock=clock, config={"jwt_secret": SECRET, "indexer_batch_size": 4})
    app.bring(T, P)
    for i in range(10):
        app.documents.create(T, P, f"documents/{i}.md", f"progress document {i}")
    return app


def cli_status(app: RagApp, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(RagApp, "open", staticmethod(lambda *a, **k: app))
    result = CliRunner().invoke(cli, ["--tenant", T, "--project", P, "status", "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_rest_and_cli_show_the_same_progress(
    papp: RagApp, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(create_api(papp)) as client:
        rest = client.get(f"{BASE}/rag/status", headers=bearer()).json()
        assert rest["progress"]["indexing"] == {
            "done": 0,
            "failed": 0,
            "skipped": 0,
            "pending": 10,
            "total": 10,
            "rate": 0.0,
            "etaSeconds": None,
            "paused": None,
        }
        papp.scheduler.tick()  # 4 done at t0
        clock.advance(2)
        papp.scheduler.tick()  # 8 done, the first 2 s ago
        clock.advance(2)
        rest = client.get(f"{BASE}/rag/status", headers=bearer()).json()
        indexing = rest["progress"]["indexing"]
        assert (indexing["done"], indexing["pending"], indexing["total"]) == (8, 2, 10)
        assert indexing["rate"] == 2.0  # 8 documents over the 4 s since the first
        assert indexing["etaSeconds"] == 1.0 and rest["progress"]["busy"] is True
        assert cli_status(papp, monkeypatch)["progress"] == rest["progress"]

        papp.scheduler.run_until_idle(timeout_s=10)
        papp.settings.set(T, None, "ai.embedding.model", "hashing-64")
        client.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
        clock.advance(1)
        papp.scheduler.tick()  # 4 of 10 into the new generation
        clock.advance(1)
        rest = client.get(f"{BASE}/rag/status", headers=bearer()).json()
        migration = rest["progress"]["migration"]
        assert (migration["state"], migration["done"], migration["pending"]) == ("running", 4, 6)
        assert migration["rate"] == 4.0 and migration["etaSeconds"] == 1.5
        assert migration["fromModel"] == "hashing:hashing-256"
        assert cli_status(papp, monkeypatch)["progress"] == rest["progress"]
        # the rate window is one minute: an hour later nothing finished lately
        clock.advance(3600)
        later = client.get(f"{BASE}/rag/status", headers=bearer()).json()
        assert later["progress"]["migration"]["rate"] == 0.0
        assert later["progress"]["migration"]["etaSeconds"] is None
        assert cli_status(papp, monkeypatch)["progress"] == later["progress"]


def test_the_openapi_schema_declares_the_new_shapes(papp: RagApp) -> None:
    schema = create_api(papp).openapi()
    paths = schema["paths"]
    assert "delete" in paths["/brain/{tenant}/projects/{project}/rag/rebuild"]
    models = schema["components"]["schemas"]
    assert {
        "StatusResponse",
        "StatusProgress",
        "WorkProgress",
        "MigrationProgress",
        "ReindexResponse",
        "MigrationRef",
        "CancelResponse",
    } <= set(models)
    assert set(models["MigrationProgress"]["properties"]) >= {
        "id",
        "state",
        "fromModel",
        "toModel",
        "done",
        "total",
        "rate",
        "etaSeconds",
        "reason",
    }


def test_an_eta_only_while_the_work_runs(
    papp: RagApp, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a cancelled rebuild still showed an ETA from the last minute's rate, and a
    project whose RAG was switched off kept counting down for documents nobody indexes."""
    with TestClient(create_api(papp)) as client:
        papp.scheduler.run_until_idle(timeout_s=10)
        idle = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        assert idle["indexing"]["etaSeconds"] is None  # nothing pending: nothing to wait for
        papp.settings.set(T, None, "ai.embedding.model", "hashing-64")
        client.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
        clock.advance(1)
        papp.scheduler.tick()  # 4 of 10 into the new generation
        clock.advance(1)
        running = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        assert running["migration"]["etaSeconds"] == 1.5
        # nothing processing and nothing finished for 11 s: no worker is at it (none runs in
        # this test), so the last minute's rate promises nothing
        clock.advance(11)
        stalled = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        assert stalled["migration"]["rate"] > 0 and stalled["migration"]["etaSeconds"] is None
        papp.scheduler.tick()  # work again: 8 of 10
        running = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        assert running["migration"]["etaSeconds"] is not None
        assert client.delete(f"{BASE}/rag/rebuild", headers=bearer()).status_code == 200
        ended = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        migration = ended["migration"]
        assert (migration["state"], migration["done"], migration["pending"]) == ("cancelled", 8, 2)
        assert migration["rate"] > 0 and migration["etaSeconds"] is None
        assert migration["paused"] is None
        assert cli_status(papp, monkeypatch)["progress"] == ended

        papp.project_rags.reindex(T, P)
        papp.scheduler.tick()  # a rate is measured
        papp.settings.set(T, P, "rag.project.enabled", False)
        paused = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        indexing = paused["indexing"]
        assert indexing["pending"] > 0 and indexing["rate"] > 0
        assert indexing["etaSeconds"] is None
        assert indexing["paused"] == "the project RAG is off (rag.project.enabled is false)"
        assert cli_status(papp, monkeypatch)["progress"] == paused
        text = CliRunner().invoke(cli, ["--tenant", T, "--project", P, "status"]).stdout
        assert "paused: the project RAG is off" in text and "left" not in text
