"""Concurrent calls coalesced into one batch call, as embedding servers batch requests.

A call that arrives while a slot is free goes straight through, alone: a lone caller waits
for nothing. One that arrives while every slot runs a batch waits; when a batch returns, the
first waiter runs itself and the others waiting then (up to the cap) as the next batch, and
hands each its result. ``slots`` is how many batches may run at once: one per core the work
leaves idle (a one-thread kernel on two cores: two), so batching never idles a core.

What uses it: query embeddings (:mod:`vancetope_rag.default_plugins.embedded.micro_batch`)
and the int8 scan of a RAG's vectors (:mod:`vancetope_rag.store.inprocess.vector_cache`), where
one pass over the rows serves several queries for little more than one.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["Coalescer", "slots_for"]


def slots_for(threads_per_call: int) -> int:
    """How many calls of ``threads_per_call`` threads the cores this process may use can run
    at once (at least one)."""
    return max(1, _cores() // max(1, threads_per_call))


@functools.cache
def _cores() -> int:
    """The cores this process may use, read once: a batcher asks at every call."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _Waiter(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result", "wake")

    def __init__(self, item: T, lock: threading.Lock) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        #: Notified when this waiter's batch ends, or when it may lead the next one: a batch
        #: that ends wakes its own callers and the next leader, not the whole line.
        self.wake = threading.Condition(lock)


class Coalescer(Generic[T, R]):
    """Runs ``run`` on batches of concurrent items: ``slots`` batches at a time, the waiters
    batch up.

    ``run`` takes a batch of items and returns one result per item, in order; an exception it
    raises reaches every caller of that batch.
    """

    def __init__(
        self,
        run: Callable[[Sequence[T]], Sequence[R]],
        cap: int,
        slots: int | Callable[[], int] = 1,
    ) -> None:
        if cap < 1 or (isinstance(slots, int) and slots < 1):
            raise ValueError("cap and slots must be at least 1")
        self._run = run
        self.cap = cap
        #: How many batches may run at once now (a callable: what serves the calls may change).
        self.slots: Callable[[], int] = slots if callable(slots) else (lambda: slots)
        self._lock = threading.Lock()
        self._running = 0  # batches running now
        self._waiting: deque[_Waiter[T, R]] = deque()

    @property
    def _busy(self) -> bool:
        return self._running >= max(1, self.slots())

    def _leads(self, me: _Waiter[T, R]) -> bool:
        """First in line with a slot free (call holding the lock)."""
        return not self._busy and bool(self._waiting) and self._waiting[0] is me

    def _wake_leader(self) -> None:
        """Wake the first in line if a slot is free (call holding the lock)."""
        if self._waiting and not self._busy:
            self._waiting[0].wake.notify()

    def submit(self, item: T) -> R:
        me: _Waiter[T, R] = _Waiter(item, self._lock)
        with self._lock:
            if self._busy or self._waiting:
                self._waiting.append(me)
                # Woken when its batch ends, or first in line with a slot free (then this
                # thread leads the next batch). Taken into a batch that still runs, it is out
                # of the line and waits for that batch, whatever slot frees meanwhile.
                try:
                    me.wake.wait_for(lambda: me.done or self._leads(me))
                except BaseException:  # interrupted: out of the line, or the next would wait
                    if me in self._waiting:
                        self._waiting.remove(me)
                        self._wake_leader()
                    raise
                if me.done:
                    return _result(me)
                batch = [self._waiting.popleft() for _ in range(min(self.cap, len(self._waiting)))]
            else:
                batch = [me]  # nothing running: straight through
            self._running += 1
            self._wake_leader()  # another slot free: the rest of the line need not wait
        try:
            results = self._run([w.item for w in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} items")
            for w, r in zip(batch, results, strict=True):
                w.result = r
        except BaseException as exc:  # every caller of the batch gets its error
            for w in batch:
                w.error = exc
        finally:
            with self._lock:
                for w in batch:
                    w.done = True
                    w.wake.notify()
                self._running -= 1
                self._wake_leader()
        return _result(me)


def _result(waiter: _Waiter[T, R]) -> R:
    if waiter.error is not None:
        raise waiter.error
    return waiter.result  # type: ignore[return-value]  # set with done when no error
