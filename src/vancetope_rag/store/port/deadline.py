"""A chat turn's deadline for the store operations it runs (spec §5: a failed or slow search
skips the ``<rag-context>`` block, the turn goes on).

A store's per-operation timeout (MongoDB's ``timeoutMS``, 30 s by default) suits background
work; a turn waiting that long for a search that ends up skipped is a stalled chat.
:func:`turn_deadline` sets a deadline for everything the turn asks of the store from this
context (threads that copy the context, as :func:`asyncio.to_thread` does, carry it), and a
store that can honour it does: the MongoDB adapter runs each operation under
``pymongo.timeout`` with the time left. The embedded SQLite store answers from the process
and PostgreSQL has its own ``statement_timeout``; neither reads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("vancetope_rag_turn_deadline", default=None)


@contextmanager
def turn_deadline(seconds: float) -> Iterator[None]:
    """Store operations from this context end within ``seconds`` (an outer, earlier
    deadline still holds)."""
    outer = _DEADLINE.get()
    deadline = time.monotonic() + seconds
    token = _DEADLINE.set(deadline if outer is None else min(outer, deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left of the current turn's deadline (≤ 0: passed); None outside a turn."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()
