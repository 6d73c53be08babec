"""Is any indexer running? The background scheduler records a heartbeat each tick, and the
project status says "no indexer has run for N min" while documents wait without one, and
lists the live workers.

Before, a reindex with no worker showed "indexed 0, pending 34" forever, with nothing
saying why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from click.testing import CliRunner

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.domain.heartbeats import package_version
from vancetope_rag.domain.records import ProjectStatus


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_status_says_no_indexer_ran_while_documents_wait(
    make_app: Callable[..., RagApp], clock: Any
) -> None:
    app = make_app(clock=clock)
    app.bring(T, P)
    app.documents.create(T, P, "documents/a.md", "apples and pears")
    status = app.project_rags.status(T, P)
    assert status.indexer is not None
    assert status.indexer.note is not None and "no indexer has run" in status.indexer.note
    assert "vancetope-rag worker" in status.indexer.note
    assert status.indexer.workers == []
    assert status.to_json()["indexer"]["note"] == status.indexer.note

    app.scheduler.start()  # what `worker` and `serve --with-indexer` run
    try:
        _wait_for(lambda: app.project_rags.status(T, P).documents.get("indexed") == 1)
        status = app.project_rags.status(T, P)
        assert status.indexer is not None and status.indexer.note is None
        (worker,) = status.indexer.workers
        assert worker.worker_id == app.scheduler.worker_id
        assert (worker.node_id, worker.version) == ("test-node", package_version())
        live = status.to_json()["indexer"]["workers"][0]
        assert live["workerId"] == app.scheduler.worker_id and live["nodeId"] == "test-node"
        # a worker that ticked lately counts as running even with nothing to do
        app.project_rags.reindex(T, P)
        assert app.project_rags.status(T, P).indexer.note is None  # type: ignore[union-attr]
    finally:
        app.scheduler.stop()

    # a stopped worker is no longer live; the documents wait, and the status says since when
    clock.advance(20 * 60)
    app.project_rags.reindex(T, P)
    status = app.project_rags.status(T, P)
    assert status.indexer is not None and status.indexer.workers == []
    assert status.indexer.note is not None
    assert status.indexer.note.startswith("no indexer has run for 20 min"), status.indexer.note


def test_a_worker_that_stopped_ticking_is_not_live(
    make_app: Callable[..., RagApp], clock: Any
) -> None:
    """A worker killed (SIGKILL, a crashed node) leaves its last beat: after a few of its
    intervals without another one it is not listed, and waiting documents get the note."""
    app = make_app(clock=clock)
    app.bring(T, P)
    app.store.control.record_heartbeat("gone:1", node_id="test-node", version="0", interval_s=30)
    app.documents.create(T, P, "documents/a.md", "apples and pears")
    status = app.project_rags.status(T, P)
    assert status.indexer is not None and [w.worker_id for w in status.indexer.workers] == [
        "gone:1"
    ]
    assert status.indexer.note is None
    clock.advance(3 * 30 + 61)
    status = app.project_rags.status(T, P)
    assert status.indexer is not None and status.indexer.workers == []
    assert status.indexer.note is not None and "for 2 min" in status.indexer.note
    # a worker of another node does not index a project homed on test-node
    app.store.control.upsert_project(T, P, status=ProjectStatus.RUNNING, home_node="test-node")
    app.store.control.record_heartbeat("other:1", node_id="elsewhere", version="0", interval_s=30)
    status = app.project_rags.status(T, P)
    assert status.indexer is not None and status.indexer.workers == []


def test_cli_status_prints_the_note_and_the_live_workers(
    make_app: Callable[..., RagApp], store_uri: str
) -> None:
    app = make_app()
    app.bring(T, P)
    app.documents.create(T, P, "documents/a.md", "apples and pears")
    base = ["--store", store_uri, "--tenant", T, "--project", P]
    out = CliRunner().invoke(cli, [*base, "status"])
    assert out.exit_code == 0, out.output
    assert "no indexer has run yet" in out.stdout
    app.store.control.record_heartbeat("w:1", node_id="test-node", version="9.9", interval_s=30)
    out = CliRunner().invoke(cli, [*base, "status"])
    assert "no indexer has run" not in out.stdout
    assert "indexer workers: w:1 (node test-node, version 9.9, last tick " in out.stdout
