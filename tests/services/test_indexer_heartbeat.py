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
from vancetope_rag.store.port.heartbeats import Beat


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
    app.store.control.record_heartbeat(
        Beat("gone:1", node_id="test-node", version="0", interval_s=30)
    )
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
    app.store.control.record_heartbeat(
        Beat("other:1", node_id="elsewhere", version="0", interval_s=30)
    )
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
    app.store.control.record_heartbeat(
        Beat("w:1", node_id="test-node", version="9.9", interval_s=30)
    )
    out = CliRunner().invoke(cli, [*base, "status"])
    assert "no indexer has run" not in out.stdout
    assert "indexer workers: w:1 (node test-node, version 9.9, last tick " in out.stdout


def test_a_worker_beats_once_per_interval_and_at_once_when_a_circuit_opens(
    make_app: Callable[..., RagApp], clock: Any
) -> None:
    """A tick woken early (a full batch, a saved document) wrote and pruned the heartbeat
    each time; it now beats once per interval, and at once when a circuit opens or closes
    (another process's status shows the pause from it)."""
    from vancetope_rag.services.providers import Endpoint

    app = make_app(clock=clock, config={"indexer_interval_s": 30.0})
    scheduler, control = app.scheduler, app.store.control

    def last_beat() -> Any:
        (beat,) = control.list_heartbeats()
        return beat

    scheduler._beat()  # what each tick of the background loop calls
    first = last_beat().last_tick
    clock.advance(5)
    scheduler._beat()
    assert last_beat().last_tick == first  # within its interval: not written again
    endpoint = Endpoint.keyed("openai", "http://127.0.0.1:9/v1", "a-key")
    app.rags.circuits.failed(endpoint, "m", ConnectionError("connection refused"))
    scheduler._beat()
    beat = last_beat()
    assert (beat.last_tick - first).total_seconds() == 5
    assert [(c.provider, c.kind, c.base_url) for c in beat.circuits] == [
        ("openai", "outage", "http://127.0.0.1:9/v1")
    ]
    assert "a-key" not in repr(beat)  # a hash of the key, never the key
    app.rags.circuits.succeeded(endpoint, "m")
    clock.advance(1)
    scheduler._beat()
    assert last_beat().circuits == ()
