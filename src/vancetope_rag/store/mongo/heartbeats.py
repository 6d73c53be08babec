"""The indexer workers' heartbeats in MongoDB (schema version 7: the ``workers``
collection, one document per worker keyed by its id; ``circuits``, the worker's open provider
circuits, is absent from the beats of older versions: none open), and the readiness probe: a
mixin of :class:`~.mongo.control.MongoControlStore`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from vancetope_rag.domain.heartbeats import PRUNE_AFTER_S, OpenCircuit, WorkerHeartbeat
from vancetope_rag.store.mongo.builders.updates import from_bson_time, to_bson_time
from vancetope_rag.store.mongo.errors import guard_errors
from vancetope_rag.store.port.heartbeats import Beat


def doc_to_heartbeat(d: Mapping[str, Any]) -> WorkerHeartbeat:
    started, last = from_bson_time(d["startedAt"]), from_bson_time(d["lastTick"])
    assert started is not None and last is not None
    return WorkerHeartbeat(
        worker_id=str(d["_id"]),
        node_id=d["nodeId"],
        version=d["version"],
        interval_s=float(d["intervalS"]),
        started_at=started,
        last_tick=last,
        stopped_at=from_bson_time(d.get("stoppedAt")),
        circuits=tuple(OpenCircuit.from_json(c) for c in d.get("circuits") or ()),
    )


def heartbeat_update(now: datetime, beat: Beat) -> list[dict[str, Any]]:
    """One beat as a single upsert (an update pipeline): the start stays while the worker
    runs, and is now for its first beat or the first after it stopped. Values go in as
    literals (a ``$`` in an error text is no field path)."""
    running = {
        "$and": [
            {"$ne": [{"$ifNull": ["$startedAt", None]}, None]},
            {"$eq": [{"$ifNull": ["$stoppedAt", None]}, None]},
        ]
    }
    return [
        {
            "$set": {
                "nodeId": {"$literal": beat.node_id},
                "version": {"$literal": beat.version},
                "intervalS": {"$literal": float(beat.interval_s)},
                "startedAt": {"$cond": [running, "$startedAt", {"$literal": now}]},
                "lastTick": {"$literal": now},
                "stoppedAt": {"$literal": now if beat.stopped else None},
                "circuits": {"$literal": [c.to_json() for c in beat.circuits]},
            }
        }
    ]


@guard_errors
class MongoHeartbeats:
    """:class:`~vancetope_rag.store.port.HeartbeatStore` on the control store's database."""

    db: Any
    #: The control store's clock (the server's time in production).
    now: Callable[[], datetime]

    def record_heartbeat(self, beat: Beat) -> None:
        now = to_bson_time(self.now())
        workers = self.db["workers"]
        workers.delete_many({"lastTick": {"$lt": now - timedelta(seconds=PRUNE_AFTER_S)}})
        workers.update_one({"_id": beat.worker_id}, heartbeat_update(now, beat), upsert=True)

    def list_heartbeats(self) -> list[WorkerHeartbeat]:
        found = self.db["workers"].find({}).sort([("lastTick", -1), ("_id", 1)])
        return [doc_to_heartbeat(d) for d in found]

    def check_ready(self) -> str | None:
        from vancetope_rag.store.mongo.setup import SCHEMA_VERSION, schema_version

        found = schema_version(self.db)
        if found == 0:
            return "store not initialised: run `vancetope-rag init`"
        if found < SCHEMA_VERSION:
            return f"store schema version {found}, this package needs {SCHEMA_VERSION}: run init"
        return None
