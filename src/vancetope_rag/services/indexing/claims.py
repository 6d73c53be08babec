"""Giving claims back when the store itself is failing.

A worker gives a document's claim back after a failed pass (``release_rag_claim``). When the
store is what failed (a full disk, a corrupt or vanished file), the release usually fails too,
and the document would stay ``processing`` until its lease expires. :class:`ClaimReleaser`
keeps such releases and retries them before the worker's next tick and when it stops, so a
store that comes back gets its claims back at once; only a worker that dies with the store
still broken leaves them to the lease TTL.
"""

from __future__ import annotations

import threading

from vancetope_rag.errors import RagError, StoreError
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.port import DocumentStore
from vancetope_rag.store.port.documents import Release

log = get_logger(__name__)


class ClaimReleaser:
    """Releases claims; keeps the ones the store refused and retries them later."""

    def __init__(self, control: DocumentStore) -> None:
        self.control = control
        self._pending: dict[tuple[str, str, str], Release] = {}
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Releases still waiting for the store."""
        with self._lock:
            return len(self._pending)

    def _give(self, item: Release) -> None:
        self.control.release_rag_claim(item)

    def release(self, item: Release) -> bool:
        """Give the claim back now, or keep it for :meth:`retry`; True when it was given."""
        try:
            self._give(item)
        except Exception as exc:
            if not isinstance(exc, RagError):  # a bug, not the store: show where
                log.exception("releasing the claim on %s failed", item.document_id)
            else:
                log.warning(
                    "could not release the claim on %s yet (retried before the next tick): %s",
                    item.document_id,
                    exc.message,
                )
            with self._lock:
                key = (item.tenant_id, item.project_id, item.document_id)
                # A store failure met again must not turn into an attempt on the retry.
                self._pending[key] = item
            return False
        return True

    def retry(self) -> int:
        """Retry every kept release (as failures of the store: no attempt counted); returns
        how many are still kept. Stops at the first store error: the store is still down."""
        with self._lock:
            items = list(self._pending.items())
        for key, item in items:
            try:
                self._give(item)
            except StoreError:
                break
            except Exception:
                log.exception("releasing the claim on %s failed", item.document_id)
            with self._lock:
                self._pending.pop(key, None)
        return self.pending
