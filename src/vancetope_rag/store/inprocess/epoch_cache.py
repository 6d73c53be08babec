"""What both in-process indexes (:mod:`.inprocess.vector_cache`, the vectors;
:mod:`.inprocess.bm25_index`, the BM25 postings) do alike, whichever store feeds them: hold
one entry per RAG at an epoch, absorb this process's writes, and tell a reader which entry
answers it.

Coherence: every chunk write bumps the RAG's epoch (a counter of its chunk writes) in the same
transaction. A reader reads the epoch in its snapshot and is answered by the entry at that
epoch, or by the one before this process's last write (a reader whose snapshot predates it),
or by the database (the caller falls back), or it loads the RAG anew.

This process's writes do not make an entry stale: the chunk store announces each write
before it commits (:meth:`EpochCache.expect`), hands its delta over once it has committed
(:meth:`EpochCache.apply`), and settles it (:meth:`EpochCache.settle`), also when it failed.
A reader that sees the new epoch before the delta arrived waits for it a moment instead of
reloading the whole RAG (measured: a reload of 20k chunks under writes takes ~1 s; the wait
is the length of one delta). Each delta is also logged a while per RAG, so a reload that
lands at an epoch behind some writes is caught up.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt

Key = tuple[str, str, str]  # tenant, project, rag id

#: Writes of this process kept per RAG, for a reload that lands behind them.
LOG_HELD = 64


class Held(Protocol):
    """What the cache needs of an entry."""

    epoch: int
    loaded_at: float
    previous: Self | None  # the entry before the last applied write, for old snapshots
    rowids: npt.NDArray[np.int64]


E = TypeVar("E", bound=Held)
S = TypeVar("S")  # one write's delta, as the subclass absorbs it


class EpochCache(Generic[E, S]):
    """An LRU of per-RAG entries, bounded by the total number of rows held."""

    def __init__(
        self,
        *,
        max_rows: int,
        reload_cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
        write_wait_s: float = 0.5,
    ) -> None:
        self.max_rows = max_rows
        #: An entry loaded this recently is not reloaded for a foreign write: the caller falls
        #: back to the database, so a busy writer never makes every query pay for a reload.
        self.reload_cooldown_s = reload_cooldown_s
        #: How long a reader waits for the delta of a write of this process that committed.
        self.write_wait_s = write_wait_s
        self._clock = clock
        self._entries: OrderedDict[Key, E] = OrderedDict()
        self._log: dict[Key, OrderedDict[int, tuple[int, S]]] = {}  # from → (to, delta)
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._pending: dict[str, Counter[int]] = {}  # RAG id → epochs its writes start from
        self._advancing: set[Key] = set()  # entries a thread is applying a write to
        self.reloads = 0

    # -- what a subclass provides -----------------------------------------------------------

    def _advance(self, old: E, delta: S) -> E | None:
        """A new entry: ``old`` with one write's delta (``old`` stays intact for its readers);
        None when the delta cannot be this entry's next write."""
        raise NotImplementedError

    # -- this process's writes --------------------------------------------------------------

    def expect(self, rag_id: str, from_epoch: int) -> None:
        """A write of this process moves the RAG from ``from_epoch`` and is about to commit
        (call inside the transaction, after the epoch moved); :meth:`settle` follows."""
        with self._lock:
            self._pending.setdefault(rag_id, Counter())[from_epoch] += 1

    def settle(self, rag_id: str, from_epoch: int) -> None:
        """That write's deltas were applied, or it did not commit: readers stop waiting."""
        with self._settled:
            pending = self._pending.get(rag_id)
            if pending is not None:
                pending[from_epoch] -= 1
                if pending[from_epoch] <= 0:
                    del pending[from_epoch]
                if not pending:
                    del self._pending[rag_id]
            self._settled.notify_all()

    def apply(self, key: Key, from_epoch: int, to_epoch: int, delta: S) -> bool:
        """Absorb one committed write of this process: the RAG went from ``from_epoch`` to
        ``to_epoch`` by ``delta`` (the subclass's kind of delta). Applied when the held entry
        is at ``from_epoch`` (or reaches it by the log); else the read path reloads it, as for
        a write of another process. The entry before it is kept for readers whose snapshot
        predates the write."""
        with self._lock:
            if key not in self._entries:
                return False
            log = self._log.setdefault(key, OrderedDict())
            log[from_epoch] = (to_epoch, delta)
            while len(log) > LOG_HELD:
                log.popitem(last=False)
        return self._catch_up(key)

    def _catch_up(self, key: Key) -> bool:
        """Replay the logged writes from the held entry's epoch on; True if this call moved
        it. One thread at a time advances a RAG's entry: the others wait for its result
        (a bounded moment) rather than compute the same entry again."""
        moved = False
        while True:
            with self._settled:
                self._settled.wait_for(lambda: key not in self._advancing, self.write_wait_s)
                old = self._entries.get(key)
                log = self._log.get(key)
                step = None if old is None or log is None else log.get(old.epoch)
                if old is None or step is None:
                    return moved
                self._advancing.add(key)
            try:
                to_epoch, delta = step
                entry = self._advance(old, delta)
                if entry is None:
                    return moved
                entry.epoch, entry.loaded_at = to_epoch, old.loaded_at
                with self._lock:
                    if self._entries.get(key) is not old:
                        continue  # replaced meanwhile (a reload): look again
                    before = copy.copy(old)
                    before.previous = None
                    entry.previous = before
                    self._install(key, entry)
                moved = True
            finally:
                with self._settled:
                    self._advancing.discard(key)
                    self._settled.notify_all()

    # -- what answers a reader --------------------------------------------------------------

    def _lookup(self, key: Key, epoch: int) -> tuple[E | None, bool]:
        """For a reader at ``epoch``: ``(entry, False)``: that entry answers; ``(None,
        False)``: fall back to the database; ``(held, True)``: load the RAG (``held``: the
        stale entry to refresh from, or None)."""
        waited = False
        while True:
            with self._lock:
                held = self._entries.get(key)
                if held is not None and held.epoch == epoch:
                    self._entries.move_to_end(key)
                    return held, False
                if held is not None and held.epoch > epoch:
                    before = held.previous
                    if before is not None and before.epoch == epoch:
                        return before, False  # the state before this process's last write
                    return None, False  # a reader still at an older snapshot
            if held is None:
                return None, True
            self._catch_up(key)
            with self._lock:
                if self._entries.get(key) is not held:
                    continue  # moved (by this thread or another): look again
            if not waited and self._await_write(key[2], held.epoch):
                waited = True
                continue
            with self._lock:
                if self._clock() - held.loaded_at < self.reload_cooldown_s:
                    return None, False  # being written right now: don't reload every query
            return held, True

    def _await_write(self, rag_id: str, from_epoch: int) -> bool:
        """Wait (a bounded moment) for this process's write from ``from_epoch`` to settle;
        False when there is none."""
        with self._settled:
            pending = self._pending.get(rag_id)
            if pending is None or from_epoch not in pending:
                return False
            self._settled.wait_for(
                lambda: from_epoch not in self._pending.get(rag_id, ()), self.write_wait_s
            )
        return True

    def _put(self, key: Key, entry: E, epoch: int) -> None:
        """A freshly loaded entry at ``epoch``, then the logged writes past it."""
        entry.epoch, entry.loaded_at = epoch, self._clock()
        with self._lock:
            self._install(key, entry)
        self._catch_up(key)  # writes of this process committed while it loaded

    def _install(self, key: Key, entry: E) -> None:
        """Hold ``entry`` for ``key`` (the lock held)."""
        self.reloads += 1
        self._entries[key] = entry
        self._entries.move_to_end(key)
        total = sum(len(e.rowids) for e in self._entries.values())
        while total > self.max_rows and len(self._entries) > 1:
            gone, old = self._entries.popitem(last=False)
            self._log.pop(gone, None)
            total -= len(old.rowids)

    # -- introspection ------------------------------------------------------------------------

    def keys_of(self, rag_id: str) -> list[Key]:
        """The held keys of that RAG id (whatever the tenant and project)."""
        with self._lock:
            return [key for key in self._entries if key[2] == rag_id]

    def epoch_of(self, key: Key) -> int | None:
        """The epoch of the RAG's held entry (None: none held)."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry.epoch
