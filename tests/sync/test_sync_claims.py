"""Acceptance 4: claims (leases) — TTL expiry, two schedulers, update during a claim."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from synchelpers import chunks, default_rag, doc, states, ticks_until_idle

from fakes import P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port.documents import Claim, CleanMark

AppFactory = Callable[..., RagApp]
TTL = 60.0


def _app(make_app: AppFactory, clock: object, **config: object) -> RagApp:
    app = make_app(clock=clock, config={"claim_ttl_s": TTL, **config})
    app.bring(T, P)
    return app


def test_claim_blocks_others_until_ttl_expires(make_app: AppFactory, clock: object) -> None:
    app = _app(make_app, clock)
    ids = [app.documents.create(T, P, f"documents/{i}.md", f"text {i}").id for i in range(3)]
    claimed = app.store.control.claim_for_rag_index(T, P, "crashed-pod", 10, TTL)
    assert sorted(d.id for d in claimed) == sorted(ids)
    assert states(app) == {"processing": 3}

    clock.advance(TTL - 1)  # type: ignore[attr-defined]
    assert app.scheduler.tick().claimed == 0  # still leased

    clock.advance(2)  # type: ignore[attr-defined]
    tick = app.scheduler.tick()
    assert (tick.claimed, tick.indexed) == (3, 3)
    assert states(app) == {"indexed": 3}
    for d in app.documents.list_documents(T, P):
        assert d.rag_claimed_by is None and not d.rag_dirty


@pytest.mark.parametrize("edited", [True, False])
def test_expired_claim_holder_cannot_overwrite_the_new_pass(
    make_app: AppFactory, clock: object, edited: bool
) -> None:
    """The slow worker whose lease expired finishes late: its write is fenced off, and so is
    its clean mark of a document left unchanged (a no-op reindex: the mark alone, which the
    claim fences by itself)."""
    app = _app(make_app, clock)
    d = app.documents.create(T, P, "documents/a.md", "version one")
    if not edited:
        ticks_until_idle(app)
        app.project_rags.reindex(T, P, rebuild=False)
    stale = app.store.control.claim_for_rag_index(T, P, "slow-pod", 10, TTL)
    clock.advance(TTL + 1)  # type: ignore[attr-defined]
    if edited:
        app.documents.update(T, P, d.id, content="version two")
    assert app.scheduler.tick().indexed == 1

    late = app.indexer.index_batch(T, P, stale, "slow-pod")
    assert (late.indexed, late.lost_lease) == (0, 1)
    text = "version two" if edited else "version one"
    assert [c.text for c in chunks(app, default_rag(app), d.id)] == [text]
    indexed = doc(app, d.id)
    assert indexed.index_state is IndexState.INDEXED and not indexed.rag_dirty


def test_reclaim_after_ttl_by_another_worker_id(make_app: AppFactory, clock: object) -> None:
    app = _app(make_app, clock)
    app.documents.create(T, P, "documents/a.md", "alpha")
    control = app.store.control
    [first] = control.claim_for_rag_index(T, P, "w-1", 10, TTL)
    assert control.claim_for_rag_index(T, P, "w-2", 10, TTL) == []
    clock.advance(TTL + 1)  # type: ignore[attr-defined]
    [again] = control.claim_for_rag_index(T, P, "w-2", 10, TTL)
    assert again.id == first.id and again.rag_claimed_by == "w-2"
    assert not control.holds_claim(Claim(T, P, first.id, "w-1"))
    assert control.holds_claim(Claim(T, P, first.id, "w-2"))


def test_two_schedulers_in_one_process_do_not_double_process(make_app: AppFactory) -> None:
    a = make_app(worker_id="worker-a", config={"indexer_batch_size": 5})
    b = make_app(worker_id="worker-b", config={"indexer_batch_size": 5})
    assert a.scheduler.worker_id != b.scheduler.worker_id
    a.bring(T, P)
    n = 120
    for i in range(n):
        a.documents.create(T, P, f"documents/{i:03}.md", f"document number {i}")

    committed: dict[str, list[str]] = {"worker-a": [], "worker-b": []}
    lock = threading.Lock()
    for app in (a, b):
        original = app.store.control.mark_rag_clean

        def logged(mark: CleanMark, _orig: object = original) -> bool:
            ok = _orig(mark)  # type: ignore[operator]
            if ok:
                with lock:
                    committed[mark.worker_id].append(mark.document_id)
            return bool(ok)

        app.store.control.mark_rag_clean = logged  # type: ignore[method-assign]

    barrier = threading.Barrier(2)
    results = {}

    def run(app: RagApp) -> None:
        barrier.wait()
        results[app.scheduler.worker_id] = app.scheduler.run_until_idle(timeout_s=60)

    threads = [threading.Thread(target=run, args=(app,)) for app in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)

    assert committed["worker-a"] and committed["worker-b"]  # they really ran side by side
    everything = committed["worker-a"] + committed["worker-b"]
    assert len(everything) == n
    assert len(set(everything)) == n  # each document indexed by exactly one worker, once
    assert results["worker-a"].indexed + results["worker-b"].indexed == n
    assert results["worker-a"].lost_lease + results["worker-b"].lost_lease == 0
    assert states(a) == {"indexed": n}
    all_chunks = chunks(a, default_rag(a))
    assert len(all_chunks) == n
    assert len({c.source_ref for c in all_chunks}) == n


def test_update_during_claim_gets_a_second_pass(make_app: AppFactory, clock: object) -> None:
    app = _app(make_app, clock)
    d = app.documents.create(T, P, "documents/a.md", "old content of the note")
    worker = app.scheduler.worker_id
    claimed = app.store.control.claim_for_rag_index(T, P, worker, 10, TTL)

    app.documents.update(T, P, d.id, content="final content of the note")
    mid = doc(app, d.id)
    assert mid.rag_dirty and mid.index_state is IndexState.PROCESSING  # the claim still holds

    first = app.indexer.index_batch(T, P, claimed, worker)  # finishes the stale snapshot
    assert first.indexed == 1
    after_first = doc(app, d.id)
    assert after_first.rag_dirty  # the second dirty mark survived
    assert after_first.index_state is IndexState.PENDING
    assert after_first.rag_claimed_by is None

    assert app.scheduler.tick().indexed == 1  # second pass, no TTL wait needed
    texts = [c.text for c in chunks(app, default_rag(app), d.id)]
    assert texts == ["final content of the note"]
    final = doc(app, d.id)
    assert not final.rag_dirty and final.index_state is IndexState.INDEXED
    assert ticks_until_idle(app) == 0


def test_stop_gives_back_the_batch_of_a_tick_that_outlives_the_timeout(
    make_app: AppFactory,
) -> None:
    """A worker stopped (SIGTERM) while its model hangs exits after ``stop``'s timeout with
    the tick still running: before, that batch stayed ``processing`` until the lease
    expired; now ``stop`` gives it back, and the hung tick's late writes are fenced out."""
    entered, release = threading.Event(), threading.Event()

    def hang(kind: str, texts: list[str]) -> None:
        if kind == "text":
            entered.set()
            release.wait(30)

    app = make_app(provider="probe", embeddings=registry(ProbeProvider(probe=hang)))
    app.bring(T, P)
    for i in range(3):
        app.documents.create(T, P, f"documents/{i}.md", f"text {i}")
    app.scheduler.start()
    try:
        assert entered.wait(30), "the indexer never reached the model"
        assert states(app) == {"processing": 3}
        app.scheduler.stop(timeout=0.2)
        assert states(app) == {"pending": 3}
    finally:
        release.set()


def test_a_no_op_reindex_marks_each_document_clean_in_one_store_call_and_counts_once(
    make_app: AppFactory, clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document whose chunks are already right is only marked clean, and the clean mark is
    fenced by the claim itself: no claim check and no transaction around it (on PostgreSQL
    each was a round trip per document of a no-op reindex)."""
    app = _app(make_app, clock)
    for i in range(4):
        app.documents.create(T, P, f"documents/{i}.md", f"text {i}")
    ticks_until_idle(app)
    control = app.store.control
    calls: Counter[str] = Counter()
    for name in ("holds_claim", "transaction", "mark_rag_clean"):
        real = getattr(control, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(control, name, counted)
    chunks = app.store.chunks
    for name in ("count_chunks", "source_counts"):  # a source's chunks counted: per batch
        real = getattr(chunks, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            if _name == "source_counts" or "sourceRef" in (kwargs.get("filters") or {}):
                calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(chunks, name, counted)
    assert app.project_rags.reindex(T, P, rebuild=False).documents_queued == 4
    ticks_until_idle(app)
    assert states(app) == {"indexed": 4}
    # the one transaction is the reindex's (queueing the documents), none per document; the
    # chunks of the four are counted in one query (it was two per document)
    assert calls == Counter(mark_rag_clean=4, transaction=1, source_counts=1)
