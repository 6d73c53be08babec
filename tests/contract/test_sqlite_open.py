"""Opening the embedded SQLite store: bad paths and files raise StoreError and harm nothing."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from vancetope_rag.domain.records import Chunk, ProjectStatus, RagRecord
from vancetope_rag.errors import StoreError
from vancetope_rag.store import RagScope, open_store
from vancetope_rag.store.port.documents import Claim
from vancetope_rag.store.port.types import NewDocument

DIM = 8


def uri(path: Path) -> str:
    return f"sqlite:///{path}"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a folder with its bytes: a failed open must leave all of them as they were."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def open_fails(target: str, *, expect: str) -> StoreError:
    with pytest.raises(StoreError) as info:
        open_store(target)
    message = str(info.value)
    assert expect.lower() in message.lower(), message
    return info.value


def valid_store_bytes(tmp_path: Path) -> bytes:
    path = tmp_path / "source" / "good.db"
    path.parent.mkdir()
    store = open_store(uri(path))
    store.control.upsert_project("t", "p", status=ProjectStatus.RUNNING, home_node=None)
    store.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"name,value\n" * 500, id="text"),
        pytest.param(b"\x00\x01\x02 binary" * 300, id="binary"),
        pytest.param(b"SQLite format 3\x00" + bytes(range(256)) * 32, id="header-then-garbage"),
    ],
)
def test_not_a_sqlite_file_is_refused_and_left_unchanged(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "rag.db"
    path.write_bytes(content)
    before = snapshot(tmp_path)
    error = open_fails(uri(path), expect=str(path))
    assert "not a" in str(error) or "database" in str(error)
    assert snapshot(tmp_path) == before


def test_corrupt_sqlite_store_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    good = valid_store_bytes(tmp_path)
    path = tmp_path / "rag.db"
    path.write_bytes(good[:100] + b"\xff" * (len(good) - 100))
    before = snapshot(tmp_path)
    open_fails(uri(path), expect=str(path))
    assert snapshot(tmp_path) == before


def test_foreign_sqlite_database_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE documents (x); INSERT INTO documents VALUES (42)")
    conn.close()
    before = snapshot(tmp_path)
    open_fails(uri(path), expect="not a vancetope-rag store")
    assert snapshot(tmp_path) == before


def test_missing_folder(tmp_path: Path) -> None:
    open_fails(uri(tmp_path / "missing" / "rag.db"), expect="does not exist")
    assert not (tmp_path / "missing").exists()


def test_unwritable_folder(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: permission bits do not stop this user from writing")
        open_fails(uri(folder / "rag.db"), expect="not writable")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_unwritable_location_even_for_root() -> None:
    # /proc accepts no new files whatever the user, so this runs as root too
    open_fails(uri(Path("/proc/vancetope-rag-test.db")), expect="/proc/vancetope-rag-test.db")
    assert not Path("/proc/vancetope-rag-test.db").exists()


def test_directory_as_path(tmp_path: Path) -> None:
    open_fails(uri(tmp_path), expect="directory")


@pytest.mark.parametrize(
    ("target", "expect"),
    [
        ("ftp://host/rag.db", "unsupported store URI scheme"),
        ("postgres://no-such-host.invalid/db", "cannot open store"),
        ("sqlite://relative.db", "invalid SQLite store URI"),
        ("sqlite:///", "path is missing"),
        ("", "no store URI"),
        ("   ", "no store URI"),
        ("sqlite:///:memory:", "in-memory"),
    ],
)
def test_bad_uris(target: str, expect: str) -> None:
    open_fails(target, expect=expect)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rag.db"
    open_store(uri(path)).close()
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = snapshot(tmp_path)
    error = open_fails(uri(path), expect="schema version 99")
    assert "upgrade" in str(error)
    assert snapshot(tmp_path) == before


def test_plain_path_opens_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "rag.db"
    store = open_store(str(path))
    store.control.upsert_project("t", "p", status=ProjectStatus.RUNNING, home_node=None)
    store.close()
    assert open_store(uri(path)).control.get_project("t", "p") is not None


def test_an_empty_file_is_refused_not_taken_for_a_new_store(tmp_path: Path) -> None:
    """A 0-byte file is what `touch` makes, and what a store truncated by accident looks
    like: taking it as a new store would hide the loss."""
    path = tmp_path / "rag.db"
    path.touch()
    error = open_fails(uri(path), expect="the file is empty (0 bytes)")
    assert "restore it from a backup" in str(error) and "delete it" in str(error)
    assert path.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["rag.db"]
    path.unlink()  # what the message says to do for a new store
    open_store(uri(path)).close()


def test_reopening_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "rag.db"
    store = open_store(uri(path))
    control = store.control
    control.upsert_project("t", "p", status=ProjectStatus.RUNNING, home_node="n1")
    doc = control.insert_document(NewDocument("t", "p", "a.md", "text/markdown", "hello"))
    rag = control.insert_rag(
        RagRecord("rag-1", "t", "p", "_documents", "hashing", "hashing-8", DIM, 200, 20)
    )
    control.set_setting("t", None, "rag.autoInject", '"ON"')
    control.put_cached_embeddings("m", {"h": [0.5] * DIM})
    scope = RagScope.of(rag)
    vector = [1.0] + [0.0] * (DIM - 1)
    store.chunks.add_chunks(scope, [Chunk("c1", rag.id, doc.id, "hello", vector, path="a.md")])
    store.close()

    for _ in range(2):  # migrations run on every open and must never drop data
        reopened = open_store(uri(path))
        c = reopened.control
        assert c.get_project("t", "p") is not None
        assert c.get_document("t", "p", doc.id) == doc
        assert c.get_rag("t", "p", rag.id) == rag
        assert c.get_settings("t", None) == {"rag.autoInject": '"ON"'}
        assert c.get_cached_embeddings("m", ["h"]) == {"h": [0.5] * DIM}
        hits = reopened.chunks.query(scope, vector, 3)
        assert [h.chunk_id for h in hits] == ["c1"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        reopened.close()


def test_two_handles_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "rag.db"
    first, second = open_store(uri(path)), open_store(uri(path))
    try:
        doc = first.control.insert_document(NewDocument("t", "p", "a.md", "text/plain", "x"))
        assert second.control.get_document("t", "p", doc.id) == doc
        second.control.mark_dirty("t", "p", [doc.id])
        (claimed,) = second.control.claim_for_rag_index("t", "p", "w2", 5, 60.0)
        assert first.control.claim_for_rag_index("t", "p", "w1", 5, 60.0) == []
        assert first.control.holds_claim(Claim("t", "p", claimed.id, "w2"))
    finally:
        first.close()
        second.close()


def test_schema_v1_store_is_migrated_in_place(tmp_path: Path) -> None:
    """A store written by schema version 1 opens, keeps its rows and gains the columns of
    the later versions (v2: rag_indexed_hash, v3: truncated)."""
    from vancetope_rag.store.sqlite.db import UPGRADES

    path = tmp_path / "v1.db"
    conn = apsw.Connection(str(path))
    conn.execute(UPGRADES[0])
    conn.execute(
        "INSERT INTO documents (id, tenant_id, project_id, path, mime_type, content, "
        "content_hash, created_at, updated_at) VALUES "
        "('d1', 't', 'p', 'documents/a.md', 'text/markdown', 'hello', 'h', 1, 1)"
    )
    conn.execute("PRAGMA user_version=1")
    conn.close()

    store = open_store(f"sqlite:///{path}")
    try:
        doc = store.control.get_document("t", "p", "d1")
        assert doc is not None and doc.content == "hello"
        assert doc.rag_indexed_hash is None
        assert doc.truncated is False
        assert store.control.count_truncated("t", "p") == 0
    finally:
        store.close()


def test_schema_v3_store_keeps_its_rags_as_live_generations(tmp_path: Path) -> None:
    """Migration 6 rebuilds ``rags`` (its inline unique name must hold for live RAGs only):
    existing RAGs come through as live first generations, names stay unique among live ones,
    and a shadow of the same name can be stored beside."""
    from dataclasses import replace

    from vancetope_rag.domain.records import RagState
    from vancetope_rag.errors import RagAlreadyExistsError
    from vancetope_rag.store.sqlite.db import UPGRADES

    path = tmp_path / "v3.db"
    conn = apsw.Connection(str(path))
    for step in UPGRADES[:3]:
        conn.execute(step)
    conn.execute(
        "INSERT INTO rags (id, tenant_id, project_id, name, embedding_provider, "
        "embedding_model, embedding_dimension, chunk_size, chunk_overlap, created_at) VALUES "
        "('r1', 't', 'p', '_documents', 'hashing', 'hashing-8', 8, 100, 10, 1)"
    )
    conn.execute("PRAGMA user_version=3")
    conn.close()

    store = open_store(f"sqlite:///{path}")
    try:
        rag = store.control.find_rag("t", "p", "_documents")
        assert rag is not None and (rag.id, rag.state, rag.generation) == ("r1", RagState.LIVE, 1)
        with pytest.raises(RagAlreadyExistsError):
            store.control.insert_rag(replace(rag, id="r2"))
        shadow = store.rebuilds.insert_generation(replace(rag, id="r3", generation=2))
        assert shadow.state is RagState.SHADOW
        assert store.control.find_rag("t", "p", "_documents") == rag
    finally:
        store.close()


def test_schema_v10_store_keeps_its_rags_without_a_profile(tmp_path: Path) -> None:
    """Upgrade 11 adds the pinned model profile: a RAG written before reads back with none
    (the services pin it to the empty profile: no prefixes, the old window)."""
    path = tmp_path / "v10.db"
    open_store(f"sqlite:///{path}").close()
    conn = apsw.Connection(str(path))  # back to version 10: no profile column yet
    conn.execute("ALTER TABLE rags DROP COLUMN embedding_profile")
    conn.execute("DROP TABLE workers")  # upgrades 12 and 13
    conn.execute(
        "INSERT INTO rags (id, tenant_id, project_id, name, embedding_provider, "
        "embedding_model, embedding_dimension, chunk_size, chunk_overlap, created_at) VALUES "
        "('r1', 't', 'p', '_documents', 'openai', 'multilingual-e5-small', 384, 1024, 64, 1)"
    )
    conn.execute("PRAGMA user_version=10")
    conn.close()

    store = open_store(f"sqlite:///{path}")
    try:
        rag = store.control.find_rag("t", "p", "_documents")
        assert rag is not None and rag.id == "r1" and rag.embedding_profile is None
    finally:
        store.close()
