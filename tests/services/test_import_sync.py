"""``import DIR`` is a sync of the folder: a document remembers the import it
came from, keyed by (resolved folder, prefix); a re-import of that key deletes the documents
whose file is gone, moves a renamed one, and never touches another key's, the host's or a
tool's documents.

Real SQLite store, the lexical ``hashing`` provider and the real indexer: a path found or not
found is what a query really returns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, IndexState
from vancetope_rag.services.importer import import_origin, walk_directory
from vancetope_rag.store.port.types import DocumentChange, RagScope


@pytest.fixture
def app(make_app: object) -> RagApp:
    made: RagApp = make_app()  # type: ignore[operator]
    made.bring(T, P)
    return made


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "folder"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "otters.md").write_text("Otters hold hands while they sleep in kelp.")
    (root / "ferry.txt").write_text("The ferry to the island leaves at noon sharp.")
    (root / "bees.md").write_text("Bees dance to tell the hive where the clover grows.")
    return root


def index(app: RagApp) -> tuple[int, int]:
    """Run the indexer until idle: (texts embedded, texts taken from the cache)."""
    result = app.scheduler.run_until_idle(stop_when_nothing_claimable=True)
    return result.embedded_texts, result.cache_hits


def chunk_paths(app: RagApp) -> set[str]:
    rag = app.rags.find(T, P, DEFAULT_RAG_NAME)
    assert rag is not None
    found = app.rags.chunks.get_chunks(RagScope.of(rag), filters={"kind": "content"})
    return {c.path for c in found if c.path}


def paths(app: RagApp) -> list[str]:
    return [d.path for d in app.documents.list_documents(T, P)]


def test_a_deleted_file_is_pruned_with_its_chunks_at_once(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    index(app)
    assert "documents/bees.md" in chunk_paths(app)
    (folder / "bees.md").unlink()
    summary = app.importer.import_directory(T, P, folder)
    assert (summary.deleted, summary.unchanged, summary.created) == (1, 2, 0)
    assert summary.deleted_paths == ["documents/bees.md"]
    assert "documents/bees.md" not in paths(app)
    # spec §4.2: a deleted document's chunks go in the same step, before any indexer tick
    assert chunk_paths(app) == {"documents/ferry.txt", "documents/notes/otters.md"}


def test_a_renamed_file_is_moved_and_costs_no_embedding(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    index(app)
    before = app.documents.get_by_path(T, P, "documents/ferry.txt")
    assert before is not None
    (folder / "ferry.txt").rename(folder / "notes" / "island-ferry.txt")
    summary = app.importer.import_directory(T, P, folder)
    assert (summary.moved, summary.created, summary.deleted) == (1, 0, 0)
    moved = [(m.old, m.new) for m in summary.moved_files]
    assert moved == [("documents/ferry.txt", "documents/notes/island-ferry.txt")]
    after = app.documents.get_by_path(T, P, "documents/notes/island-ferry.txt")
    assert after is not None and after.id == before.id  # the same document, moved
    embedded, cached = index(app)
    assert embedded == 0 and cached >= 1  # the chunks come from the embedding cache
    assert "documents/ferry.txt" not in chunk_paths(app)
    assert "documents/notes/island-ferry.txt" in chunk_paths(app)


def test_a_renamed_file_whose_type_changes_is_still_a_move(app: RagApp, folder: Path) -> None:
    """Another extension means another extractor (the file is read again), but the same
    text: the document moves."""
    app.importer.import_directory(T, P, folder)
    (folder / "ferry.txt").rename(folder / "ferry.md")
    summary = app.importer.import_directory(T, P, folder)
    assert (summary.moved, summary.created, summary.deleted) == (1, 0, 0)
    assert "documents/ferry.md" in paths(app) and "documents/ferry.txt" not in paths(app)


def test_other_keys_the_host_and_tools_are_never_pruned(
    app: RagApp, folder: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "gulls.md").write_text("Gulls steal chips on the pier.")
    app.importer.import_directory(T, P, folder)
    app.importer.import_directory(T, P, other)  # same prefix, another folder: another key
    app.importer.import_directory(T, P, folder, prefix="archive/")  # same folder, other prefix
    app.document_saved(T, P, "documents/host-note.md", "The host wrote this note itself.")
    index(app)
    rag = app.rags.find(T, P, DEFAULT_RAG_NAME)
    assert rag is not None
    app.rags.add_text(rag, "documents/bees.md", "A tool saved this line about bees.")
    (folder / "bees.md").unlink()
    summary = app.importer.import_directory(T, P, folder)
    assert summary.deleted_paths == ["documents/bees.md"]
    assert "documents/gulls.md" in paths(app)
    assert "archive/bees.md" in paths(app)
    assert "documents/host-note.md" in paths(app)
    texts = [h.text for h in app.rags.chunks.get_chunks(RagScope.of(rag))]
    assert any("A tool saved this line" in t for t in texts)


def test_documents_without_a_recorded_origin_are_pruned_only_with_adopt(
    app: RagApp, folder: Path
) -> None:
    app.importer.import_directory(T, P, folder)
    for doc in app.documents.list_documents(T, P):  # as an import before this change left them
        app.store.control.update_document(T, P, doc.id, DocumentChange(import_origin=None))
    (folder / "bees.md").unlink()
    kept = app.importer.import_directory(T, P, folder)
    assert kept.deleted == 0 and "documents/bees.md" in paths(app)
    assert kept.unadopted == 1  # says that --adopt would prune it
    adopted = app.importer.import_directory(T, P, folder, adopt=True)
    assert adopted.deleted_paths == ["documents/bees.md"]
    # the files still there belong to the key now
    key = import_origin(folder, "documents/")
    assert {d.import_origin for d in app.documents.list_documents(T, P)} == {key}


def test_a_file_that_vanishes_after_listing_fails_and_is_not_pruned(
    app: RagApp, folder: Path
) -> None:
    app.importer.import_directory(T, P, folder)
    listed = list(walk_directory(folder))
    (folder / "bees.md").unlink()  # between the listing and the reading
    summary = app.importer.import_directory(T, P, folder, sources=listed)
    assert summary.deleted == 0 and "documents/bees.md" in paths(app)
    assert [(f.path, "vanished" in f.reason) for f in summary.failed_files] == [("bees.md", True)]
    assert summary.skipped == 0
    # the next run sees it gone
    assert app.importer.import_directory(T, P, folder).deleted_paths == ["documents/bees.md"]


def test_dry_run_says_what_would_change_and_changes_nothing(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    before = {d.id: d for d in app.documents.list_documents(T, P)}
    (folder / "bees.md").unlink()
    (folder / "ferry.txt").rename(folder / "boat.txt")
    (folder / "notes" / "otters.md").write_text("Otters crack shells on their bellies.")
    (folder / "new.md").write_text("A new page about lighthouses.")
    dry = app.importer.import_directory(T, P, folder, dry_run=True)
    assert dry.dry_run
    assert (dry.created, dry.updated, dry.moved, dry.deleted) == (1, 1, 1, 1)
    assert {d.id: d for d in app.documents.list_documents(T, P)} == before
    real = app.importer.import_directory(T, P, folder)
    assert (real.created, real.updated, real.moved, real.deleted) == (1, 1, 1, 1)


def test_deleting_more_than_half_of_a_key_needs_yes(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    (folder / "bees.md").unlink()
    (folder / "ferry.txt").unlink()
    refused = app.importer.import_directory(T, P, folder)
    assert refused.deleted == 0 and len(paths(app)) == 3
    assert refused.refused is not None
    assert "2 of the 3 documents" in refused.refused and "--yes" in refused.refused
    done = app.importer.import_directory(T, P, folder, yes=True)
    assert done.refused is None and done.deleted == 2
    assert paths(app) == ["documents/notes/otters.md"]


def test_an_emptied_folder_is_not_wiped_without_yes(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    for f in [*folder.rglob("*.md"), *folder.rglob("*.txt")]:
        f.unlink()
    summary = app.importer.import_directory(T, P, folder)
    assert summary.deleted == 0 and summary.refused is not None and len(paths(app)) == 3


def test_no_prune_keeps_the_old_behaviour(app: RagApp, folder: Path) -> None:
    app.importer.import_directory(T, P, folder)
    (folder / "bees.md").unlink()
    (folder / "ferry.txt").rename(folder / "boat.txt")
    summary = app.importer.import_directory(T, P, folder, prune=False)
    assert (summary.deleted, summary.moved, summary.created) == (0, 0, 1)
    assert {"documents/bees.md", "documents/ferry.txt", "documents/boat.txt"} <= set(paths(app))


def test_a_failed_file_whose_file_is_gone_is_pruned(app: RagApp, folder: Path) -> None:
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    first = app.importer.import_directory(T, P, folder)
    assert [f.path for f in first.failed_files] == ["scan.png"]
    (folder / "scan.png").unlink()
    summary = app.importer.import_directory(T, P, folder)
    assert summary.deleted_paths == ["documents/scan.png"]
    states = {d.path: d.index_state for d in app.documents.list_documents(T, P)}
    assert IndexState.FAILED not in states.values()


def test_a_host_edit_takes_the_document_out_of_the_import(app: RagApp, folder: Path) -> None:
    """Content the host wrote is the host's: the import's origin goes with the file record,
    so a later sync never deletes what the host made of it."""
    app.importer.import_directory(T, P, folder)
    app.document_saved(T, P, "documents/bees.md", "The host rewrote this page about bees.")
    (folder / "bees.md").unlink()
    summary = app.importer.import_directory(T, P, folder)
    assert summary.deleted == 0 and "documents/bees.md" in paths(app)


def test_the_same_folder_in_another_project_or_tenant_is_left_alone(
    app: RagApp, folder: Path
) -> None:
    app.bring(T, "p2")
    app.bring("t2", P)
    app.settings.set("t2", None, "ai.embedding.provider", "hashing")
    for tenant, project in ((T, P), (T, "p2"), ("t2", P)):
        app.importer.import_directory(tenant, project, folder)
    (folder / "bees.md").unlink()
    assert app.importer.import_directory(T, P, folder).deleted == 1
    for tenant, project in ((T, "p2"), ("t2", P)):
        kept = [d.path for d in app.documents.list_documents(tenant, project)]
        assert "documents/bees.md" in kept
