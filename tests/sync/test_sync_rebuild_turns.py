"""Acceptance: chat turns while a project moves to another embedding model (SQLite).

A thread runs ``pre_turn`` in a loop while the main thread rebuilds the project from the
``hashing`` model to the real ``embedded`` one, one document per tick. Every turn gets a
block; every turn before the switch comes from the old generation, every turn after it from
the new one; the hits of one turn never mix generations. (The same on the lagging Atlas
double: tests/contract/test_mongo_rebuild.py.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from fakes import P, T
from turnloop import TurnLoop, check_turns, seed
from vancetope_rag.app import RagApp

AppFactory = Callable[..., RagApp]


def test_turns_while_moving_from_hashing_to_the_embedded_model(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(config={"indexer_batch_size": 1, "torch_threads": 1})
    seed(app)
    app.scheduler.run_until_idle(timeout_s=30)
    old = app.project_rags.find_default_rag(T, P)
    assert old is not None and old.embedding_model == "hashing-256"
    loop = TurnLoop(app, monkeypatch)
    loop.start()
    loop.wait_for(5)

    app.settings.set(T, None, "ai.embedding.provider", "embedded")
    rebuild_began = time.monotonic()
    migration = app.project_rags.reindex(T, P, rebuild=True).migration
    assert migration is not None and migration.to_model.startswith("embedded:")
    switch_began = switched = 0.0
    for _ in range(50):  # one document per tick: the rebuild takes a while
        switch_began = time.monotonic()
        app.scheduler.tick()
        live = app.project_rags.find_default_rag(T, P)
        assert live is not None
        if live.id == migration.to_rag_id:
            switched = time.monotonic()
            break
        loop.wait_for(2)  # turns keep coming while it fills
    assert switched, "the rebuild never switched"
    loop.wait_for(8)
    turns = loop.stop()

    check_turns(turns, old.id, migration.to_rag_id, switch_began, switched)
    during = [t for t in turns if rebuild_began < t.started and t.ended < switch_began]
    assert len(during) >= 15 and all(t.rag_ids == {old.id} for t in during)
    status = app.project_rags.status(T, P)
    assert (status.rag_id, status.embedding_provider) == (migration.to_rag_id, "embedded")
