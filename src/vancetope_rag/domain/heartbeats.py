"""Indexer workers' heartbeats and what a project's status makes of them.

Each background indexer (``worker``, ``serve --with-indexer``, a plugin host's scheduler)
records in the store, per tick, its worker id, node id, package version and interval. A
worker is *live* while it has not said it stopped and its last tick is at most
:data:`LIVE_INTERVALS` of its own intervals (plus :data:`LIVE_SLACK_S` for a slow tick) old.
The status of a project with documents waiting and no live worker of its node says so:
"no indexer has run for N min".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

#: A worker is live while its last tick is at most this many of its intervals old …
LIVE_INTERVALS = 3
#: … plus this much: a tick that embeds a large batch takes its time.
LIVE_SLACK_S = 60.0
#: Heartbeats of workers gone this long are deleted (by the next beat of any worker).
PRUNE_AFTER_S = 7 * 86400.0


def package_version() -> str:
    """This package's version, as a heartbeat records it."""
    try:
        return version("vancetope-rag")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


@dataclass(frozen=True)
class WorkerHeartbeat:
    """What the store holds of one indexer worker."""

    worker_id: str
    node_id: str
    version: str
    interval_s: float
    started_at: datetime
    last_tick: datetime
    #: When it said it stopped (a clean stop); None while it runs, or after a crash.
    stopped_at: datetime | None = None

    def live(self, now: datetime) -> bool:
        if self.stopped_at is not None:
            return False
        age = (now - self.last_tick).total_seconds()
        return age <= LIVE_INTERVALS * self.interval_s + LIVE_SLACK_S

    def serves(self, home_node: str | None) -> bool:
        """Does this worker index a project homed on ``home_node`` (None: any node's)?"""
        return home_node is None or home_node == self.node_id

    def to_json(self) -> dict[str, Any]:
        return {
            "workerId": self.worker_id,
            "nodeId": self.node_id,
            "version": self.version,
            "intervalS": self.interval_s,
            "startedAt": self.started_at.isoformat(),
            "lastTick": self.last_tick.isoformat(),
        }


@dataclass(frozen=True)
class IndexerStatus:
    """The indexer as a project's status shows it: its live workers, and a note when
    documents wait with none running."""

    workers: list[WorkerHeartbeat] = field(default_factory=list)
    #: The last tick of any worker of the project's node (None: none ever ticked).
    last_tick: datetime | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "note": self.note,
            "lastTick": self.last_tick.isoformat() if self.last_tick else None,
            "workers": [w.to_json() for w in self.workers],
        }


_START = "start `vancetope-rag worker` (or `serve --with-indexer`) for this node"


def indexer_status(
    beats: Iterable[WorkerHeartbeat], *, home_node: str | None, waiting: int, now: datetime
) -> IndexerStatus:
    """The live workers that serve a project homed on ``home_node``, and with ``waiting``
    documents (pending or processing) and none of them, why nothing moves."""
    mine = [b for b in beats if b.serves(home_node)]
    live = [b for b in mine if b.live(now)]
    last = max((b.last_tick for b in mine), default=None)
    note = None
    if waiting and not live:
        if last is None:
            note = f"no indexer has run yet: {waiting} documents wait; {_START}"
        else:
            minutes = max(1, int((now - last).total_seconds() // 60))
            note = f"no indexer has run for {minutes} min: {waiting} documents wait; {_START}"
    return IndexerStatus(workers=live, last_tick=last, note=note)
