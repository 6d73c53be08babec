"""Indexer workers' heartbeats and what a project's status makes of them.

Each background indexer (``worker``, ``serve --with-indexer``, a plugin host's scheduler)
records in the store, per tick, its worker id, node id, package version and interval. A
worker is *live* while it has not said it stopped and its last tick is at most
:data:`LIVE_INTERVALS` of its own intervals (plus :data:`LIVE_SLACK_S` for a slow tick) old.
The status of a project with documents waiting and no live worker of its node says so:
"no indexer has run for N min".

A heartbeat also carries the worker's open provider circuits (:class:`OpenCircuit`): the
status of any process shows a pause that a live worker met ("paused: … since …"), not only
the worker's own. A worker beats at most once per interval, and at once when its circuits
open or close.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from vancetope_rag.domain.wire import camel_json

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
class OpenCircuit:
    """An open circuit of an embedding endpoint in a worker, as its heartbeat carries it."""

    provider: str
    base_url: str
    #: A hash of the key (never the key): the endpoint, as the worker's circuits key it.
    key_hash: str
    #: None: the whole endpoint (an outage); else the model refused, or answering vectors of
    #: another ``dimension`` than the RAG pinned.
    model: str | None
    dimension: int | None
    #: ``outage``, ``config`` or ``dimension`` (the circuits' failure kinds).
    kind: str
    #: Wall clock, epoch seconds: when it opened, and when the worker tries it next.
    since: float
    retry_at: float
    failures: int
    #: The last failure, redacted.
    detail: str

    def to_json(self) -> dict[str, Any]:
        return camel_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpenCircuit:
        dim = d.get("dimension")
        return cls(
            provider=str(d["provider"]),
            base_url=str(d.get("baseUrl") or ""),
            key_hash=str(d.get("keyHash") or ""),
            model=None if d.get("model") is None else str(d["model"]),
            dimension=None if dim is None else int(dim),
            kind=str(d["kind"]),
            since=float(d["since"]),
            retry_at=float(d["retryAt"]),
            failures=int(d.get("failures", 1)),
            detail=str(d.get("detail", "")),
        )


def circuits_to_text(circuits: Iterable[OpenCircuit]) -> str | None:
    """The circuits as a store column holds them (JSON text; None: none open)."""
    found = [c.to_json() for c in circuits]
    return json.dumps(found, separators=(",", ":")) if found else None


def circuits_from_text(text: str | None) -> tuple[OpenCircuit, ...]:
    """What :func:`circuits_to_text` wrote; an unreadable value reads as none open."""
    if not text:
        return ()
    try:
        return tuple(OpenCircuit.from_json(d) for d in json.loads(text))
    except (ValueError, TypeError, KeyError):
        return ()


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
    #: Its open provider circuits at its last beat.
    circuits: tuple[OpenCircuit, ...] = ()

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
            **camel_json(self, "worker_id", "node_id", "version", "interval_s"),
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


def live_circuits(beats: Iterable[WorkerHeartbeat], now: datetime) -> list[OpenCircuit]:
    """The open circuits of the live workers: what another process's status shows."""
    return [c for b in beats if b.live(now) for c in b.circuits]
