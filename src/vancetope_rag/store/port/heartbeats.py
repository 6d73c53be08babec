"""The store port of the indexer workers' heartbeats, and of the readiness probe.
Re-exported by :mod:`.port`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.heartbeats import OpenCircuit, WorkerHeartbeat


@dataclass(frozen=True)
class Beat:
    """One tick of an indexer worker, as :meth:`HeartbeatStore.record_heartbeat` takes it."""

    worker_id: str
    node_id: str
    version: str
    interval_s: float
    #: The worker stops cleanly.
    stopped: bool = False
    #: Its open provider circuits (replacing the last beat's).
    circuits: Sequence[OpenCircuit] = ()


@runtime_checkable
class HeartbeatStore(Protocol):
    """One row per indexer worker: its node, version, interval, first and last tick."""

    def record_heartbeat(self, beat: Beat) -> None:
        """The worker ticked now (the store's clock). A worker's first beat (or the first
        after it stopped) sets its start; beats of workers gone for
        :data:`~vancetope_rag.domain.heartbeats.PRUNE_AFTER_S` go."""
        ...

    def list_heartbeats(self) -> list[WorkerHeartbeat]:
        """Every worker's heartbeat, the latest tick first."""
        ...

    def check_ready(self) -> str | None:
        """None when the store answers and holds the schema this package needs; else why
        not, in words that name nothing of the deployment (a readiness probe's reason).

        Raises:
            StoreError: the store cannot be reached.
        """
        ...
