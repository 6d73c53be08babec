"""Acceptance 8: reindex (queue all / rebuild with the current model) and the CLI surface."""

from __future__ import annotations

import pytest
from synchelpers import chunk_count, chunks, default_rag, states, ticks_until_idle

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import RagState
from vancetope_rag.errors import (
    EmbeddingConfigError,
    EmbeddingDisabledError,
    ProjectClosedError,
    ProjectNotFoundError,
)
from vancetope_rag.store.port.types import RagScope


def _seed(app: RagApp) -> list[str]:
    """Four eligible documents (one with a summary) and two that are not."""
    app.bring(T, P)
    ids = [
        app.documents.create(T, P, f"documents/{w}.md", f"{w} notes").id
        for w in ("apple", "banana", "cherry")
    ]
    ids.append(app.documents.create(T, P, "documents/d.md", "damson notes", summary="plum").id)
    app.documents.create(T, P, "notes/private.md", "private")
    app.documents.create(T, P, "documents/img.png", "bytes", mime_type="image/png")
    ticks_until_idle(app)
    return ids


def test_reindex_queues_every_eligible_document(app: RagApp) -> None:
    ids = _seed(app)
    rag = default_rag(app)
    result = app.project_rags.reindex(T, P, rebuild=False)
    assert result.to_json() == {"rebuild": False, "documentsQueued": 4, "migration": None}
    assert states(app) == {"pending": 4, "none": 2}
    assert default_rag(app).id == rag.id
    assert chunk_count(app, rag) == 5  # chunks stay visible while queued
    ticks_until_idle(app)
    assert states(app) == {"indexed": 4, "none": 2}
    assert chunk_count(app, rag) == 5
    assert {c.source_ref for c in chunks(app, rag)} == set(ids)


def test_reindex_without_change_embeds_nothing_again(app: RagApp) -> None:
    _seed(app)
    app.project_rags.reindex(T, P)
    before = {c.chunk_id for c in chunks(app, default_rag(app))}
    result = app.scheduler.run_until_idle(timeout_s=10)
    assert result.indexed == 4
    # Unchanged fingerprints: not even split or looked up, chunks left exactly as they were.
    assert (result.embedded_texts, result.cache_hits, result.unchanged) == (0, 0, 4)
    assert {c.chunk_id for c in chunks(app, default_rag(app))} == before


def test_changed_chunking_inputs_reembed_from_cache(app: RagApp) -> None:
    ids = _seed(app)
    app.project_rags.reindex(T, P)
    app.scheduler.run_until_idle(timeout_s=10)
    doc = app.documents.get(T, P, ids[0])
    app.documents.update(T, P, doc.id, path=doc.path.replace("documents/", "documents/moved/"))
    result = app.scheduler.run_until_idle(timeout_s=10)
    # The path is part of the fingerprint: rewritten, but the text itself comes from the cache.
    assert result.indexed == 1 and result.unchanged == 0
    assert result.embedded_texts == 0 and result.cache_hits >= 1


def test_rebuild_moves_to_the_current_model(app: RagApp) -> None:
    ids = _seed(app)
    old = default_rag(app)
    assert (old.embedding_model, old.embedding_dimension) == ("hashing-256", 256)

    app.settings.set(T, None, "ai.embedding.model", "hashing-128")
    # the existing RAG keeps its pinned model until rebuilt
    assert default_rag(app).embedding_dimension == 256
    assert app.rags.query(old, "apple", top_k=1)[0].source_ref == ids[0]

    result = app.project_rags.reindex(T, P, rebuild=True)

    assert result.migration is not None
    assert result.to_json() == {
        "rebuild": True,
        "documentsQueued": 4,
        "migration": {
            "id": result.migration.id,
            "fromModel": "hashing:hashing-256",
            "toModel": "hashing:hashing-128",
        },
    }
    # nothing changed for readers yet: the live generation still answers, whole
    assert default_rag(app) == old
    assert chunk_count(app, old) == 5
    assert [r.id for r in app.rags.list_rags(T, P)] == [old.id]
    assert states(app) == {"indexed": 4, "none": 2}  # the live documents are not re-queued

    run = app.scheduler.run_until_idle(timeout_s=10)
    assert run.embedded_texts == 5  # re-embedded: the cache is per model
    new = default_rag(app)
    assert new.id == result.migration.to_rag_id != old.id
    assert (new.embedding_provider, new.embedding_model, new.embedding_dimension) == (
        "hashing",
        "hashing-128",
        128,
    )
    assert (new.generation, new.replaces) == (2, old.id)
    assert states(app) == {"indexed": 4, "none": 2}
    assert chunk_count(app, new) == 5
    assert [r.id for r in app.rags.list_rags(T, P)] == [new.id]
    # the old generation is retired: a reader that looked it up just before the switch still
    # finds its chunks until the grace time has passed, then it goes
    retired = app.store.rebuilds.get_any_rag(T, P, old.id)
    assert retired is not None and retired.state is RagState.RETIRED
    assert app.store.chunks.count_chunks(RagScope.of(old)) == 5
    app.config.retired_grace_s = 0
    app.scheduler.tick()
    assert app.store.rebuilds.get_any_rag(T, P, old.id) is None
    assert app.store.chunks.count_chunks(RagScope.of(old)) == 0
    hits = app.rags.query(new, "cherry notes", top_k=1)
    assert hits[0].source_ref == ids[2]
    status = app.project_rags.status(T, P).to_json()
    assert (status["embeddingModel"], status["chunkCount"], status["ragId"]) == (
        "hashing-128",
        5,
        new.id,
    )
    # the new generation's chunks are recorded as the documents' own: a reindex is a no-op
    app.project_rags.reindex(T, P)
    again = app.scheduler.run_until_idle(timeout_s=10)
    assert (again.unchanged, again.embedded_texts, again.cache_hits) == (4, 0, 0)


def test_rebuild_with_misconfigured_provider_raises_and_keeps_the_index(app: RagApp) -> None:
    _seed(app)
    old = default_rag(app)
    app.settings.set(T, None, "ai.embedding.provider", "openai")  # no apiKey
    with pytest.raises(EmbeddingConfigError, match="apiKey"):
        app.project_rags.reindex(T, P, rebuild=True)
    # the working index is not dropped for a rebuild that cannot happen
    assert default_rag(app).id == old.id
    assert chunk_count(app, old) == 5
    assert states(app) == {"indexed": 4, "none": 2}


def test_rebuild_with_embeddings_off_refuses_before_dropping(app: RagApp) -> None:
    """Regression (a rebuild with embeddings off): the guard sat in the REST router, so a
    service call (and the CLI) dropped the index with nothing to re-create it with."""
    _seed(app)
    old = default_rag(app)
    app.settings.set(T, None, "ai.embedding.provider", "none")
    with pytest.raises(EmbeddingDisabledError, match=r"ai\.embedding\.provider=none"):
        app.project_rags.reindex(T, P, rebuild=True)
    assert default_rag(app).id == old.id
    assert chunk_count(app, old) == 5
    assert states(app) == {"indexed": 4, "none": 2}


def test_chunks_added_by_hand_to_documents_never_touch_a_document(app: RagApp) -> None:
    """Spec §9 as narrowed: writing to `_documents` is allowed, but under its own `manual:`
    source ref, so a write naming a document's id leaves that document's chunks alone (it
    used to replace or extend them until the next pass); reindex removes the manual chunk
    and every document stays unchanged."""
    ids = _seed(app)
    app.scheduler.run_until_idle(timeout_s=10)
    rag = default_rag(app)
    before = {c.text for c in chunks(app, rag) if c.source_ref == ids[0]}
    app.rags.add_text(rag, ids[0], "a note added by hand with the tool")
    assert {c.text for c in chunks(app, rag) if c.source_ref == ids[0]} == before
    assert [c.text for c in chunks(app, rag) if c.source_ref == f"manual:{ids[0]}"] == [
        "a note added by hand with the tool"
    ]
    app.project_rags.reindex(T, P)
    result = app.scheduler.run_until_idle(timeout_s=10)
    after = {c.text for c in chunks(app, rag) if c.source_ref == ids[0]}
    assert after == before
    assert not [c for c in chunks(app, rag) if c.source_ref.startswith("manual:")]
    assert result.unchanged == 4 and result.embedded_texts == 0


def test_reindex_refuses_unknown_and_closed_projects(app: RagApp) -> None:
    """The rule lives in the service; REST maps it to 404/409, the CLI brings the project up."""
    with pytest.raises(ProjectNotFoundError, match="not known"):
        app.project_rags.reindex(T, "ghost")
    _seed(app)
    app.close_project(T, P)
    for rebuild in (False, True):
        with pytest.raises(ProjectClosedError, match="closed") as err:
            app.project_rags.reindex(T, P, rebuild=rebuild)
        assert err.value.code == "PROJECT_CLOSED"
    assert app.project_rags.find_default_rag(T, P) is None  # not re-created
    app.suspend(T, P)  # suspended is open: its RAG would be kept (spec §6.1)
    assert app.project_rags.reindex(T, P).documents_queued == 4
