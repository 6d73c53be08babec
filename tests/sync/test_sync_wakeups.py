"""A saved document wakes the background indexer: it is searchable within seconds, not at
the next tick of the interval (30 s by default); the interval stays the longest wait."""

from __future__ import annotations

import time
from collections.abc import Callable

from synchelpers import default_rag

from fakes import P, T
from vancetope_rag.app import RagApp

AppFactory = Callable[..., RagApp]


def _wait_indexed(app: RagApp, doc_id: str, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        doc = app.documents.get(T, P, doc_id)
        if doc.index_state.value == "indexed":
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"{doc_id} not indexed within {timeout_s} s")


def test_a_saved_document_is_indexed_at_once_not_at_the_next_tick(make_app: AppFactory) -> None:
    app = make_app(
        config={
            "indexer_interval_s": 3600.0,
            "indexer_initial_delay_s": 0.0,
            "indexer_wake_delay_s": 0.05,
        }
    )
    app.bring(T, P)
    app.scheduler.start()
    try:
        time.sleep(0.2)  # the first tick ran on an empty project: now it waits an hour
        for i in range(3):
            doc = app.document_saved(T, P, f"documents/w{i}.md", f"wake-up number {i}")
            assert doc is not None
            _wait_indexed(app, doc.id, 60.0)  # at once (~0.1 s), not the hour's interval
        hits = app.rags.query(default_rag(app), "wake-up number 2", top_k=1)
        assert hits and hits[0].path == "documents/w2.md"
        assert app.scheduler.wakeups >= 3
    finally:
        app.scheduler.stop()


def test_a_burst_of_saves_makes_one_early_tick(make_app: AppFactory) -> None:
    app = make_app(
        config={
            "indexer_interval_s": 3600.0,
            "indexer_initial_delay_s": 0.0,
            # The window a burst joins: 20x what five saves take, so a busy machine that
            # spreads them out still makes one tick of them.
            "indexer_wake_delay_s": 2.0,
        }
    )
    app.bring(T, P)
    app.scheduler.start()
    try:
        time.sleep(0.6)
        docs = [app.document_saved(T, P, f"documents/b{i}.md", f"burst {i}") for i in range(5)]
        for doc in docs:
            assert doc is not None
            _wait_indexed(app, doc.id, 60.0)
        assert app.scheduler.wakeups == 1
    finally:
        app.scheduler.stop()


def test_without_a_wake_up_the_indexer_waits_its_interval(make_app: AppFactory) -> None:
    """Writes that bypass the document service (here: the store itself, as another process
    on a store that cannot notify would) are picked up by the interval, not earlier."""
    app = make_app(
        config={
            "indexer_interval_s": 3.0,
            "indexer_initial_delay_s": 0.0,
            "indexer_wake_delay_s": 0.05,
        }
    )
    app.bring(T, P)
    app.scheduler.start()
    try:
        time.sleep(1.0)  # the first tick (an empty project, ~20 ms) is over: 3 s to the next
        app.documents.on_queued = None  # as if another process saved it
        doc = app.documents.create(T, P, "documents/quiet.md", "quiet")
        took = _wait_indexed(app, doc.id, 60.0)
        # Not earlier than the interval (a wake-up would index it within ~0.1 s); load can
        # only make it later, and no upper bound is asserted.
        assert took > 1.0, took
        assert app.scheduler.wakeups == 0
    finally:
        app.scheduler.stop()


def test_a_full_batch_ticks_again_early_but_never_at_once(make_app: AppFactory) -> None:
    """A full batch is a wake-up (more is waiting): the next tick comes after the wake delay,
    not the interval, and not at once either (three ticks within 20 ms stormed the provider)."""
    delay = 0.2
    app = make_app(
        config={
            "indexer_interval_s": 3600.0,
            "indexer_initial_delay_s": 0.0,
            "indexer_wake_delay_s": delay,
            "indexer_batch_size": 2,
        }
    )
    app.bring(T, P)
    app.documents.on_queued = None  # only full batches wake the loop here
    docs = [app.documents.create(T, P, f"documents/f{i}.md", f"full batch {i}") for i in range(8)]
    started = time.monotonic()
    app.scheduler.start()
    try:
        for doc in docs:
            _wait_indexed(app, doc.id, 60.0)  # not the hour's interval
        took = time.monotonic() - started
        assert took >= 3 * delay  # four batches: three early ticks, each after the delay
        assert app.scheduler.wakeups >= 3
    finally:
        app.scheduler.stop()
