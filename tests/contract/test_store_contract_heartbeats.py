"""Every store keeps the indexer workers' heartbeats (node id, last tick, version), times on
the store's clock, and answers the readiness probe.

Before, no store recorded that any indexer ran: a status of "indexed 0, pending 34" could
not say whether a worker was coming (each store's schema step adds the heartbeats).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import apsw

import postgres_support
from vancetope_rag.domain.heartbeats import OpenCircuit, WorkerHeartbeat
from vancetope_rag.store import open_store
from vancetope_rag.store.port import Store
from vancetope_rag.store.port.heartbeats import Beat


def test_heartbeats_keep_the_last_tick_of_each_worker(store: Store, fake_clock: Any) -> None:
    control = store.control
    assert control.list_heartbeats() == []
    started = control.now()
    control.record_heartbeat(Beat("node-a:1", node_id="node-a", version="1.2.3", interval_s=30.0))
    fake_clock.advance(10)
    control.record_heartbeat(Beat("node-b:2", node_id="node-b", version="1.2.4", interval_s=5.0))
    fake_clock.advance(5)
    control.record_heartbeat(Beat("node-a:1", node_id="node-a", version="1.2.3", interval_s=30.0))

    beats = control.list_heartbeats()
    assert [b.worker_id for b in beats] == ["node-a:1", "node-b:2"]  # latest tick first
    a, b = beats
    assert isinstance(a, WorkerHeartbeat)
    assert (a.node_id, a.version, a.interval_s) == ("node-a", "1.2.3", 30.0)
    assert a.started_at == started and a.last_tick == started + timedelta(seconds=15)
    assert b.last_tick == started + timedelta(seconds=10) and b.stopped_at is None

    fake_clock.advance(1)
    control.record_heartbeat(
        Beat("node-b:2", node_id="node-b", version="1.2.4", interval_s=5.0, stopped=True)
    )
    b = next(x for x in control.list_heartbeats() if x.worker_id == "node-b:2")
    assert b.stopped_at == started + timedelta(seconds=16)
    # a worker that starts again under the same id is running again
    control.record_heartbeat(Beat("node-b:2", node_id="node-b", version="1.2.5", interval_s=5.0))
    b = next(x for x in control.list_heartbeats() if x.worker_id == "node-b:2")
    assert b.stopped_at is None and b.version == "1.2.5"


def test_a_heartbeat_carries_the_open_circuits_of_its_worker(store: Store, fake_clock: Any) -> None:
    """What another process's status reads to show a pause only the worker met."""
    control = store.control
    wrong = OpenCircuit(
        provider="openai",
        base_url="http://127.0.0.1:9/v1",
        key_hash="0123456789abcdef",
        model="local-embedder",
        dimension=384,
        kind="dimension",
        since=1_800_000_000.5,
        retry_at=1_800_000_060.5,
        failures=2,
        detail="RAG '_documents' is pinned to 384-dim vectors but … answers with 64-dim ones",
    )
    down = OpenCircuit("gemini", "", "", None, None, "outage", 1.0, 3.0, 1, "$x: no field path")

    def beat(worker: str, *circuits: OpenCircuit) -> None:
        control.record_heartbeat(
            Beat(worker, node_id="n", version="1", interval_s=30.0, circuits=circuits)
        )

    beat("w:1", wrong, down)
    beat("w:2")
    found = {b.worker_id: b.circuits for b in control.list_heartbeats()}
    assert found == {"w:1": (wrong, down), "w:2": ()}
    fake_clock.advance(1)
    beat("w:1")  # they closed
    assert {b.worker_id: b.circuits for b in control.list_heartbeats()}["w:1"] == ()


def test_heartbeats_of_long_gone_workers_are_pruned(store: Store, fake_clock: Any) -> None:
    control = store.control
    control.record_heartbeat(Beat("old:1", node_id="old", version="1", interval_s=30.0))
    fake_clock.advance(8 * 86400)
    control.record_heartbeat(Beat("new:1", node_id="new", version="1", interval_s=30.0))
    assert [b.worker_id for b in control.list_heartbeats()] == ["new:1"]


def test_a_sound_store_is_ready(store: Store) -> None:
    assert store.control.check_ready() is None


def test_a_sqlite_store_of_schema_11_gains_the_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "v11.db"
    open_store(f"sqlite:///{path}").close()
    conn = apsw.Connection(str(path))  # back to version 11: no workers table yet
    conn.execute("DROP TABLE workers")
    conn.execute("PRAGMA user_version=11")
    conn.close()
    store = open_store(f"sqlite:///{path}")
    try:
        store.control.record_heartbeat(Beat("w:1", node_id="n", version="1", interval_s=30))
        assert [b.worker_id for b in store.control.list_heartbeats()] == ["w:1"]
    finally:
        store.close()


def test_a_sqlite_store_of_schema_12_gains_the_heartbeats_circuits(tmp_path: Path) -> None:
    path = tmp_path / "v12.db"
    open_store(f"sqlite:///{path}").close()
    conn = apsw.Connection(str(path))  # back to version 12: beats without circuits
    conn.execute("ALTER TABLE workers DROP COLUMN circuits")
    now = time.time()
    conn.execute(
        "INSERT INTO workers (worker_id, node_id, version, interval_s, started_at, last_tick) "
        "VALUES ('old:1', 'n', '1', 30, ?, ?)",
        (now, now),
    )
    conn.execute("PRAGMA user_version=12")
    conn.close()
    store = open_store(f"sqlite:///{path}")
    down = OpenCircuit("openai", "", "", None, None, "outage", 1.0, 3.0, 1, "ConnectError: x")
    try:
        assert [b.circuits for b in store.control.list_heartbeats()] == [()]
        store.control.record_heartbeat(
            Beat("w:1", node_id="n", version="1", interval_s=30, circuits=[down])
        )
        assert {b.worker_id: b.circuits for b in store.control.list_heartbeats()} == {
            "w:1": (down,),
            "old:1": (),
        }
    finally:
        store.close()


def test_a_postgres_store_of_schema_8_is_not_ready_until_init() -> None:
    from vancetope_rag.store.postgres import schema
    from vancetope_rag.store.postgres.store import open_postgres_store

    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri)
    try:
        assert store.control.check_ready() == "store not initialised: run `vancetope-rag init`"
        schema.initialize(store.db, upto=8)
        reason = store.control.check_ready()
        assert (
            reason
            == f"store schema version 8, this package needs {schema.SCHEMA_VERSION}: run init"
        )
        store.initialize()  # step 9 makes the table
        assert store.control.check_ready() is None
        store.control.record_heartbeat(Beat("w:1", node_id="n", version="1", interval_s=30))
        assert [b.worker_id for b in store.control.list_heartbeats()] == ["w:1"]
    finally:
        store.close()
        postgres_support.drop_schema(name)
