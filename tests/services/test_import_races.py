"""`import DIR` reads only the regular files it listed: a file swapped between the listing and
the read (for a symlink, a FIFO, a device, nothing) is skipped with its reason, one rewritten
while it is read is read again once and otherwise fails, and no read takes more than the size
budget plus one byte. The other files of the import are not affected.

The CLI lists the whole directory first and reads afterwards, as these tests do: the swap
happens deterministically between the two phases, no threads and no sleeps.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.extraction.records import ExtractionRecord
from vancetope_rag.services import workspace
from vancetope_rag.services.extraction import ExtractionService
from vancetope_rag.services.importer import DocumentImporter, ImportSource, walk_directory

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")

SECRET = "OUTSIDE-SECRET-9c2e-import"


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("alpha stays")
    (root / "sub" / "b.md").write_text("beta swapped")
    (root / "z.md").write_text("zeta stays")
    return root


def _listed(root: Path) -> list[ImportSource]:
    sources = list(walk_directory(root))
    assert sorted(s.path for s in sources) == ["a.md", "sub/b.md", "z.md"]
    assert all(s.skip_reason is None for s in sources)
    return sources


def _contents(app: RagApp) -> dict[str, str]:
    return {d.path: d.content for d in app.documents.list_documents(T, P)}


def _others_imported(app: RagApp) -> None:
    docs = _contents(app)
    assert docs["documents/a.md"] == "alpha stays"
    assert docs["documents/z.md"] == "zeta stays"


def _error_code(app: RagApp, path: str) -> str | None:
    doc = app.documents.get_by_path(T, P, path)
    assert doc is not None and doc.index_state == "failed"
    return ExtractionRecord.from_json(doc.extraction).error_code


@pytest.mark.timeout(120)  # a guard against a hang: 10x+ what it takes under load
def test_a_file_swapped_for_a_symlink_out_is_not_read(app: RagApp, tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(SECRET)
    root = _folder(tmp_path)
    sources = _listed(root)
    (root / "sub" / "b.md").unlink()
    os.symlink(outside, root / "sub" / "b.md")

    summary = app.importer.import_sources(T, P, sources)

    assert all(SECRET not in text for text in _contents(app).values())
    assert "documents/sub/b.md" not in _contents(app)
    assert summary.created == 2
    assert [(s.path, "symbolic link" in s.reason) for s in summary.skipped_files] == [
        ("sub/b.md", True)
    ]
    _others_imported(app)


@pytest.mark.timeout(120)  # a guard against a hang: 10x+ what it takes under load
def test_a_directory_swapped_for_a_symlink_out_is_not_walked(app: RagApp, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.md").write_text(SECRET)
    root = _folder(tmp_path)
    sources = _listed(root)
    os.rename(root / "sub", tmp_path / "parked")
    os.symlink(outside, root / "sub")

    summary = app.importer.import_sources(T, P, sources)

    assert all(SECRET not in text for text in _contents(app).values())
    assert [s.path for s in summary.skipped_files] == ["sub/b.md"]
    _others_imported(app)


@pytest.mark.timeout(120)  # a guard against a hang: 10x+ what it takes under load
def test_a_file_swapped_for_a_fifo_does_not_hang_the_import(app: RagApp, tmp_path: Path) -> None:
    root = _folder(tmp_path)
    sources = _listed(root)
    (root / "sub" / "b.md").unlink()
    os.mkfifo(root / "sub" / "b.md")

    summary = app.importer.import_sources(T, P, sources)

    assert [(s.path, "not a regular file" in s.reason) for s in summary.skipped_files] == [
        ("sub/b.md", True)
    ]
    assert summary.created == 2
    _others_imported(app)


@pytest.mark.timeout(120)  # a guard against a hang: 10x+ what it takes under load
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_file_swapped_for_a_symlink_to_dev_zero_is_not_read(app: RagApp, tmp_path: Path) -> None:
    root = _folder(tmp_path)
    sources = _listed(root)
    (root / "sub" / "b.md").unlink()
    os.symlink("/dev/zero", root / "sub" / "b.md")

    summary = app.importer.import_sources(T, P, sources)  # no MemoryError, no endless read

    assert [s.path for s in summary.skipped_files] == ["sub/b.md"]
    assert summary.created == 2
    _others_imported(app)


@pytest.mark.timeout(120)  # a guard against a hang: 10x+ what it takes under load
def test_a_file_that_vanished_after_the_listing_fails(app: RagApp, tmp_path: Path) -> None:
    """Counted failed (a sync never prunes it in the same run), and no
    document is written for it."""
    root = _folder(tmp_path)
    sources = _listed(root)
    (root / "sub" / "b.md").unlink()

    summary = app.importer.import_sources(T, P, sources)

    assert summary.skipped_files == []
    assert [(s.path, s.reason) for s in summary.failed_files] == [
        ("sub/b.md", "it vanished after it was listed; its document, if any, is kept")
    ]
    assert app.documents.get_by_path(T, P, "documents/sub/b.md") is None
    _others_imported(app)


def _rewrite_after_reads(monkeypatch: pytest.MonkeyPatch, target: Path, times: int) -> list[int]:
    """After each of the first ``times`` reads of ``target``, rewrite it (another size, another
    mtime): a writer caught in the middle of the read. Returns the limits each read got."""
    real = workspace._read_at_most
    limits: list[int] = []
    inode = target.stat().st_ino

    def read(fd: int, limit: int) -> bytes:
        data = real(fd, limit)
        if os.fstat(fd).st_ino == inode:
            limits.append(limit)
            if len(limits) <= times:
                with open(target, "ab") as f:  # in place: the open descriptor sees it
                    f.write(b" and more")
                ns = target.stat().st_mtime_ns + 1_000_000_000 * len(limits)
                os.utime(target, ns=(ns, ns))
        return data

    monkeypatch.setattr(workspace, "_read_at_most", read)
    return limits


def test_a_file_rewritten_once_while_read_is_read_again(
    app: RagApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _folder(tmp_path)
    sources = _listed(root)
    limits = _rewrite_after_reads(monkeypatch, root / "sub" / "b.md", times=1)

    summary = app.importer.import_sources(T, P, sources)

    assert len(limits) == 2  # read, changed, read again: the second read is consistent
    assert summary.created == 3 and not summary.failed_files
    assert _contents(app)["documents/sub/b.md"] == "beta swapped and more"


def test_a_file_rewritten_during_both_reads_fails_as_changed(
    app: RagApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _folder(tmp_path)
    sources = _listed(root)
    limits = _rewrite_after_reads(monkeypatch, root / "sub" / "b.md", times=2)

    summary = app.importer.import_sources(T, P, sources)

    assert len(limits) == 2  # one retry, no more
    assert [(f.path, "changed while it was read" in f.reason) for f in summary.failed_files] == [
        ("sub/b.md", True)
    ]
    assert _error_code(app, "documents/sub/b.md") == "EXTRACT_CHANGED_WHILE_READ"
    assert _contents(app)["documents/sub/b.md"] == ""  # no mix of two versions
    assert summary.created == 2
    _others_imported(app)


def _count_reads(monkeypatch: pytest.MonkeyPatch, before: Callable[[], None]) -> list[int]:
    """Record how many bytes each read returned; ``before`` runs ahead of each read."""
    real = workspace._read_at_most
    got: list[int] = []

    def read(fd: int, limit: int) -> bytes:
        before()
        data = real(fd, limit)
        got.append(len(data))
        return data

    monkeypatch.setattr(workspace, "_read_at_most", read)
    return got


def test_a_file_over_the_budget_is_not_read(
    app: RagApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.md").write_bytes(b"x" * 1000)
    (root / "ok.md").write_text("fine")
    got = _count_reads(monkeypatch, lambda: None)
    importer = DocumentImporter(
        documents=app.documents,
        extractors=app.extractors,
        extraction=ExtractionService(registry=app.extractors),
        max_text_chars=1000,
        max_bytes=10,
    )

    summary = importer.import_directory(T, P, root)

    assert got == [4]  # ok.md only: big.md was refused on its size, not read
    assert [(f.path, "larger than" in f.reason) for f in summary.failed_files] == [("big.md", True)]
    assert _error_code(app, "documents/big.md") == "EXTRACT_TOO_LARGE"
    assert _contents(app)["documents/ok.md"] == "fine"


def test_a_file_growing_past_the_budget_is_read_only_to_budget_plus_one(
    app: RagApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    grows = root / "grows.md"
    grows.write_bytes(b"x" * 5)

    def grow() -> None:  # after the size was checked, before the bytes are read
        with open(grows, "ab") as f:
            f.write(b"y" * 100_000)

    got = _count_reads(monkeypatch, grow)
    importer = DocumentImporter(
        documents=app.documents,
        extractors=app.extractors,
        extraction=ExtractionService(registry=app.extractors),
        max_text_chars=1000,
        max_bytes=10,
    )

    summary = importer.import_directory(T, P, root)

    assert got == [11]  # the budget plus one byte, to tell that it is over
    assert [f.path for f in summary.failed_files] == ["grows.md"]
    assert _error_code(app, "documents/grows.md") == "EXTRACT_TOO_LARGE"
