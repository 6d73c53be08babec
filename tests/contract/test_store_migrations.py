"""Store contract of rebuilds: generations of a RAG name, migrations and their queue, on every
store adapter (SQLite, mongomock twice, the lagging Atlas double), through the ports only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from vancetope_rag.domain.rebuilds import ItemClaim, ItemState, Rebuild, RebuildState
from vancetope_rag.domain.records import Chunk, RagRecord, RagState
from vancetope_rag.errors import RagAlreadyExistsError, RebuildRunningError
from vancetope_rag.store.port import ControlStore, RebuildStore, Store
from vancetope_rag.store.port.documents import CleanMark
from vancetope_rag.store.port.types import NewDocument, RagScope

TA, TB, P, DIM = "tenant-a", "tenant-b", "proj-1", 8
NAME = "_documents"
Settle = Callable[[], None]
RUNNING, SWITCHING = RebuildState.RUNNING, RebuildState.SWITCHING


def record(rag_id: str, *, tenant: str = TA, name: str = NAME, dim: int = DIM) -> RagRecord:
    return RagRecord(rag_id, tenant, P, name, "test", f"model-{dim}", dim, 200, 20)


def migration(mid: str, live: RagRecord, shadow_id: str, *, tenant: str = TA) -> Rebuild:
    return Rebuild(mid, tenant, P, live.name, live.id, shadow_id, "test:old", "test:new")


def unit(i: int, dim: int = DIM) -> list[float]:
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    return v.tolist()


def chunk(rag: RagRecord, cid: str, source: str, i: int) -> Chunk:
    return Chunk(cid, rag.id, source, f"text {cid}", unit(i, rag.embedding_dimension))


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


@pytest.fixture
def migrations(store: Store) -> RebuildStore:
    return store.rebuilds


@pytest.fixture
def live(control: ControlStore) -> RagRecord:
    return control.insert_rag(record("gen-1"))


@pytest.fixture
def shadow(migrations: RebuildStore, live: RagRecord) -> RagRecord:
    nxt = replace(record("gen-2", dim=16), generation=2, replaces=live.id)
    return migrations.insert_generation(nxt)


def docs(control: ControlStore, n: int, tenant: str = TA) -> list[str]:
    return [
        control.insert_document(
            NewDocument(
                tenant, P, f"documents/{i}.md", "text/markdown", f"body {i}", rag_dirty=True
            )
        ).id
        for i in range(n)
    ]


# -- generations -----------------------------------------------------------------------------


def test_every_store_has_a_migration_store(store: Store) -> None:
    assert isinstance(store.rebuilds, RebuildStore)


def test_readers_see_only_the_live_generation(
    control: ControlStore, migrations: RebuildStore, live: RagRecord, shadow: RagRecord
) -> None:
    assert shadow.state is RagState.SHADOW and (shadow.generation, shadow.replaces) == (2, live.id)
    assert control.find_rag(TA, P, NAME) == live
    assert control.get_rag(TA, P, shadow.id) is None  # not through the readers' catalog
    assert [r.id for r in control.list_rags(TA, P)] == [live.id]
    assert migrations.get_any_rag(TA, P, shadow.id) == shadow
    assert migrations.get_any_rag(TB, P, shadow.id) is None  # scoped
    assert [(r.id, r.state) for r in migrations.rag_generations(TA, P, NAME)] == [
        (live.id, RagState.LIVE),
        (shadow.id, RagState.SHADOW),
    ]
    assert migrations.rag_generations(TB, P) == []
    assert control.rag_dimensions() >= {DIM, 16}  # init covers the shadow's dimension
    # a name stays unique among live RAGs, however many shadows it has
    with pytest.raises(RagAlreadyExistsError):
        control.insert_rag(record("gen-x"))
    control.insert_rag(record("kb-1", name="kb"))
    assert sorted(r.name for r in control.list_rags(TA, P)) == [NAME, "kb"]


def test_the_switch_is_one_step_and_happens_once(
    control: ControlStore, migrations: RebuildStore, live: RagRecord, shadow: RagRecord
) -> None:
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    assert m.state is RUNNING and m.created_at is not None
    assert migrations.switch_live(m) is True
    assert control.find_rag(TA, P, NAME) == replace(shadow, state=RagState.LIVE)
    assert [r.id for r in control.list_rags(TA, P)] == [shadow.id]
    assert control.get_rag(TA, P, live.id) is None
    old = migrations.get_any_rag(TA, P, live.id)
    assert old is not None and old.state is RagState.RETIRED and old.retired_at is not None
    done = migrations.get_rebuild(TA, P, m.id)
    assert done is not None and done.state is RebuildState.COMPLETED and done.finished_at
    assert migrations.active_rebuilds(TA, P) == []
    assert migrations.switch_live(m) is True  # repeated (a crash after the switch): harmless
    assert control.find_rag(TA, P, NAME) == replace(shadow, state=RagState.LIVE)
    # the name is free for the next rebuild, which replaces the new live generation
    third = migrations.insert_generation(replace(record("gen-3"), generation=3))
    m2 = migrations.start_rebuild(migration("m2", replace(shadow, state=RagState.LIVE), third.id))
    assert migrations.switch_live(m2) is True
    assert control.find_rag(TA, P, NAME).id == third.id  # type: ignore[union-attr]


def test_one_active_migration_per_name_and_conditional_ends(
    migrations: RebuildStore, live: RagRecord, shadow: RagRecord
) -> None:
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    with pytest.raises(RebuildRunningError, match="already running"):
        migrations.start_rebuild(migration("m2", live, "other"))
    assert [a.id for a in migrations.active_rebuilds(TA, P)] == ["m1"]
    assert migrations.active_rebuilds(TB, P) == []
    # switching: a cancel (expects running) loses; the switch goes on
    assert migrations.end_rebuild(m, state=SWITCHING, expected=[RUNNING])
    assert not migrations.end_rebuild(
        m, state=RebuildState.CANCELLED, expected=[RUNNING], reason="user"
    )
    assert migrations.active_rebuilds(TA, P)[0].state is SWITCHING
    assert migrations.end_rebuild(
        m, state=RebuildState.FAILED, expected=[SWITCHING], reason="broken"
    )
    ended = migrations.get_rebuild(TA, P, m.id)
    assert ended is not None and (ended.state, ended.reason) == (RebuildState.FAILED, "broken")
    assert migrations.switch_live(ended) is False  # ended: no switch
    assert migrations.latest_rebuild(TA, P, NAME) == ended
    # ended frees the name
    m3 = migrations.start_rebuild(migration("m3", live, shadow.id))
    assert migrations.latest_rebuild(TA, P, NAME) == m3
    assert migrations.get_rebuild(TB, P, "m3") is None


def test_a_release_that_is_not_the_documents_spends_no_attempt(
    control: ControlStore,
    migrations: RebuildStore,
    live: RagRecord,
    shadow: RagRecord,
    fake_clock,
) -> None:
    """Its embedding provider was down: the item goes back without an attempt counted, even
    at the last attempt, and is claimable again after its retry time."""
    (doc_id,) = docs(control, 1)
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    migrations.queue_items(m, [doc_id])
    (item,) = migrations.claim_items(m, "w1", 10, 60.0)
    assert item.claim_token is not None
    state = migrations.release_item(
        ItemClaim(m.id, doc_id, "w1", item.claim_token),
        error="",
        retry_delay_s=0,
        max_attempts=1,
        count_attempt=False,
    )
    assert state is ItemState.PENDING
    (again,) = migrations.claim_items(m, "w1", 10, 60.0)
    assert again.document_id == doc_id and again.attempts == 0


def test_the_queue_claims_fences_and_requeues(
    control: ControlStore,
    migrations: RebuildStore,
    live: RagRecord,
    shadow: RagRecord,
    fake_clock,
) -> None:
    ids = docs(control, 3)
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    assert migrations.queue_items(m, ids) == 3
    assert migrations.item_counts(m.id) == {
        "pending": 3,
        "processing": 0,
        "done": 0,
        "failed": 0,
        "skipped": 0,
    }
    first = migrations.claim_items(m, "w1", 2, 60.0)
    assert [i.document_id for i in first] == sorted(ids)[:2]
    assert all(i.state is ItemState.PROCESSING and i.claim_token for i in first)
    second = migrations.claim_items(m, "w2", 10, 60.0)
    assert [i.document_id for i in second] == sorted(ids)[2:]  # never two workers
    assert second[0].claim_token > first[0].claim_token  # type: ignore[operator]
    assert migrations.claim_items(replace(m, tenant_id=TB), "w3", 10, 60.0) == []  # scoped

    a, b = first
    token = a.claim_token
    assert token is not None and migrations.holds_item(ItemClaim(m.id, a.document_id, "w1", token))
    assert migrations.finish_item(
        ItemClaim(m.id, a.document_id, "w1", token), doc_version=1, indexed_hash="h-a"
    )
    # an edit re-queues the other one while w1 holds it: w1 can no longer finish it
    assert migrations.requeue_documents(TA, P, [b.document_id]) >= 1
    assert b.claim_token is not None
    assert not migrations.finish_item(
        ItemClaim(m.id, b.document_id, "w1", b.claim_token), doc_version=1, indexed_hash="h-b"
    )
    # failures: a retry time, then FAILED after max attempts
    c = second[0]
    assert c.claim_token is not None
    state = migrations.release_item(
        ItemClaim(m.id, c.document_id, "w2", c.claim_token),
        error="boom",
        retry_delay_s=30,
        max_attempts=2,
    )
    assert state is ItemState.PENDING
    assert [i.document_id for i in migrations.claim_items(m, "w2", 10, 60.0)] == [
        b.document_id
    ]  # c waits for its retry time
    fake_clock.advance(31)
    (again,) = migrations.claim_items(m, "w2", 10, 60.0)
    assert again.document_id == c.document_id and again.attempts == 1
    assert again.claim_token is not None
    state = migrations.release_item(
        ItemClaim(m.id, c.document_id, "w2", again.claim_token),
        error="boom again",
        retry_delay_s=30,
        max_attempts=2,
    )
    assert state is ItemState.FAILED
    items = {i.document_id: i for i in migrations.list_items(m.id)}
    assert (
        items[a.document_id].state,
        items[a.document_id].doc_version,
        items[a.document_id].indexed_hash,
    ) == (ItemState.DONE, 1, "h-a")
    assert (items[c.document_id].state, items[c.document_id].last_error) == (
        ItemState.FAILED,
        "boom again",
    )
    counts = migrations.item_counts(m.id)
    assert counts == {"pending": 0, "processing": 1, "done": 1, "failed": 1, "skipped": 0}
    # an expired lease is claimed again (a worker killed mid-batch)
    fake_clock.advance(61)
    taken = migrations.claim_items(m, "w9", 10, 60.0)
    assert [i.document_id for i in taken] == [b.document_id]
    done, first_at = migrations.item_activity(m.id, control.now() - timedelta(seconds=600))
    assert done == 2 and first_at is not None  # done and failed-for-good both finished
    assert migrations.item_activity(m.id, control.now() + timedelta(seconds=1)) == (0, None)
    assert migrations.remove_items(m.id, [b.document_id]) == 1
    assert sorted(i.document_id for i in migrations.list_items(m.id)) == sorted(
        [a.document_id, c.document_id]
    )


def test_an_item_finished_without_indexing_is_skipped_not_done(
    control: ControlStore, migrations: RebuildStore, live: RagRecord, shadow: RagRecord
) -> None:
    ids = docs(control, 2)
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    migrations.queue_items(m, ids)
    kept, excluded = migrations.claim_items(m, "w1", 2, 60.0)
    for item, skipped in ((kept, False), (excluded, True)):
        assert item.claim_token is not None
        assert migrations.finish_item(
            ItemClaim(m.id, item.document_id, "w1", item.claim_token),
            doc_version=1,
            indexed_hash="h:0",
            skipped=skipped,
        )
    states = {
        i.document_id: (i.state, i.completed_at is not None) for i in migrations.list_items(m.id)
    }
    assert states == {
        kept.document_id: (ItemState.DONE, True),
        excluded.document_id: (ItemState.SKIPPED, True),
    }
    counts = migrations.item_counts(m.id)
    assert (counts["done"], counts["skipped"], counts["pending"]) == (1, 1, 0)


def test_requeue_adds_documents_created_during_a_rebuild(
    control: ControlStore, migrations: RebuildStore, live: RagRecord, shadow: RagRecord
) -> None:
    assert migrations.requeue_documents(TA, P, ["nobody"]) == 0  # no active migration
    m = migrations.start_rebuild(migration("m1", live, shadow.id))
    (new,) = docs(control, 1)
    migrations.requeue_documents(TA, P, [new])
    assert [(i.document_id, i.state) for i in migrations.list_items(m.id)] == [
        (new, ItemState.PENDING)
    ]


def test_document_heads_activity_and_adopted_hashes(
    control: ControlStore, migrations: RebuildStore, fake_clock
) -> None:
    a, b = docs(control, 2)
    heads = {h.id: h for h in migrations.document_heads(TA, P)}
    assert set(heads) == {a, b} and heads[a].rag_version == 1 and heads[a].indexed_at is None
    assert heads[a].path == "documents/0.md" and heads[a].mime_type == "text/markdown"
    assert migrations.document_heads(TB, P) == []
    since = control.now() - timedelta(seconds=1)
    assert migrations.indexing_activity(TA, P, since) == (0, None)
    (claimed, *_rest) = control.claim_for_rag_index(TA, P, "w", 1, 60.0)
    from vancetope_rag.domain.records import IndexState

    control.mark_rag_clean(CleanMark.of(claimed, "w", IndexState.INDEXED))
    n, first = migrations.indexing_activity(TA, P, since)
    assert n == 1 and first is not None
    assert migrations.adopt_indexed_hashes(TA, P, {a: (1, "new-a"), b: (7, "stale")}) == 1
    fresh = control.get_document(TA, P, a)
    assert fresh is not None and fresh.rag_indexed_hash == "new-a"
    other = control.get_document(TA, P, b)
    assert other is not None and other.rag_indexed_hash is None  # version moved on: not adopted


def test_a_shadow_becomes_visible_to_search(
    store: Store,
    migrations: RebuildStore,
    live: RagRecord,
    shadow: RagRecord,
    settle: Settle,
    fake_clock: Any,
) -> None:
    """On Atlas the switch waits for this: search must have shown the newest chunk version of
    every source, unchanged, for the search grace (a first sighting starts it, a write
    restarts it), since other search nodes may lag the one probed. Stores that query their
    rows see at once."""
    store.chunks.prepare_dimension(shadow.embedding_dimension)
    settle()  # the dimension's search indexes are built
    scope = RagScope.of(shadow)
    assert store.chunks.visible(scope)  # nothing written: nothing to wait for

    def sighted_then_visible() -> bool:
        settle()
        first = store.chunks.visible(scope)
        fake_clock.advance(60.0)  # past any store's search grace
        assert store.chunks.visible(scope)
        return first

    store.chunks.replace_source(
        scope, "doc-1", [chunk(shadow, "c1", "doc-1", 1), chunk(shadow, "c2", "doc-1", 2)]
    )
    store.chunks.replace_source(scope, "doc-2", [chunk(shadow, "c3", "doc-2", 3)])
    seen_now = store.chunks.visible(scope)
    first = sighted_then_visible()
    # a new generation of one source is not seen until search catches up with it
    store.chunks.replace_source(scope, "doc-2", [chunk(shadow, "c4", "doc-2", 4)])
    lagging = store.chunks.visible(scope)
    first_again = sighted_then_visible()
    if (
        store.chunks.__class__.__name__ == "MongoChunkStore"
        and getattr(store.chunks, "uses_atlas", lambda: False)()
    ):  # the lagging double: probes see the lag, and the grace starts at each sighting
        assert (seen_now, first, lagging, first_again) == (False, False, False, False)
    else:
        assert (seen_now, first, lagging, first_again) == (True, True, True, True)
