"""The store port of the indexer workers' heartbeats, and of the readiness probe.
Re-exported by :mod:`.port`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.heartbeats import OpenCircuit, WorkerHeartbeat


@runtime_checkable
class HeartbeatStore(Protocol):
    """One row per indexer worker: its node, version, interval, first and last tick."""

    def record_heartbeat(
        self,
        worker_id: str,
        *,
        node_id: str,
        version: str,
        interval_s: float,
        stopped: bool = False,
        circuits: Sequence[OpenCircuit] = (),
    ) -> None:
        """The worker ticked now (the store's clock); ``stopped``: it stops cleanly;
        ``circuits``: its open provider circuits (replacing the last beat's). A worker's
        first beat (or the first after it stopped) sets its start; beats of workers gone
        for :data:`~vancetope_rag.domain.heartbeats.PRUNE_AFTER_S` go."""
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
