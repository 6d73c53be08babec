"""Micro-batching of concurrent query embeddings, as embedding servers do.

A query that arrives while no query embedding runs goes straight through, alone: a lone turn
waits for nothing. One that arrives while an embedding runs waits; when that call returns,
the first waiter embeds itself and the others waiting then (up to :data:`CAP`) in one call
and hands each its vector. Used only where the ``auto`` measurement found one call with
several short queries faster than one call each (:mod:`.onnx_backend`); the vectors are the
single calls' (a batch pads to its longest query, and the padding is masked out).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

#: The most queries embedded in one call.
CAP = 16

BatchEncode = Callable[[Sequence[str]], Any]  # texts → one vector (a sequence of floats) each


class _Waiter:
    __slots__ = ("done", "error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: list[float] | None = None
        self.error: BaseException | None = None
        self.done = False


class QueryBatcher:
    """Embeds concurrent queries together: one call runs at a time, the waiters batch up."""

    def __init__(self, encode: BatchEncode, cap: int = CAP) -> None:
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self._encode = encode
        self.cap = cap
        self._cond = threading.Condition()
        self._busy = False
        self._waiting: deque[_Waiter] = deque()

    def embed(self, text: str) -> list[float]:
        me = _Waiter(text)
        with self._cond:
            if self._busy or self._waiting:
                self._waiting.append(me)
                # Woken when a call ends: done, or first in line with nothing running (then
                # this thread leads the next call).
                try:
                    self._cond.wait_for(
                        lambda: me.done or (not self._busy and self._waiting[0] is me)
                    )
                except BaseException:  # interrupted: out of the line, or the next would wait
                    if not me.done:
                        self._waiting.remove(me)
                        self._cond.notify_all()
                    raise
                if me.done:
                    return _result(me)
                batch = [self._waiting.popleft() for _ in range(min(self.cap, len(self._waiting)))]
            else:
                batch = [me]  # nothing running: straight through
            self._busy = True
        try:
            vectors = self._encode([w.text for w in batch])
            if len(vectors) != len(batch):
                raise RuntimeError(f"{len(vectors)} vectors for {len(batch)} queries")
            for w, v in zip(batch, vectors, strict=True):
                w.vector = [float(x) for x in v]
        except BaseException as exc:  # every caller of the call gets its error
            for w in batch:
                w.error = exc
        finally:
            with self._cond:
                for w in batch:
                    w.done = True
                self._busy = False
                self._cond.notify_all()
        return _result(me)


def _result(waiter: _Waiter) -> list[float]:
    if waiter.error is not None:
        raise waiter.error
    assert waiter.vector is not None
    return waiter.vector
