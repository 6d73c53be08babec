"""Importing files end to end: the files users keep (office files, books, PDFs, notebooks) are
imported, indexed and found with their section in the label; files that cannot be read are
failed documents with the reason; re-imports read only what could change; hostile files end
within their budget.

Every file is written by the test (``filemakers``); the store is the real SQLite one and the
provider the lexical ``hashing`` one, so a sentence found is a sentence that was extracted.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import filemakers as fm
from fakes import P, T, count_extractions, send_json
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.extraction.records import ExtractionRecord
from vancetope_rag.recipes import RagParams
from vancetope_rag.services.importer import ImportSource

#: One sentence per file type, found nowhere else.
SENTENCES = {
    "reports/q3.xlsx": "Turbine gearbox oil is replaced every nine hundred hours",
    "decks/roadmap.pptx": "The heliport opens after the harbour bridge is finished",
    "notes/minutes.odt": "The allotment committee approved seven new rhubarb beds",
    "books/guide.epub": "Lanterns on the north pier are lit at dusk by volunteers",
    "papers/layer.pdf": "Quartz resonators drift less than two parts per million",
    "notes/legal.rtf": "The tenancy clause forbids keeping bees on the balcony",
    "papers/thesis.tex": "Moss colonies recover within three wet seasons",
}
VISION_TEXT = "Scanned memo: the glacier survey resumes on the fourteenth of March"


def office_files() -> dict[str, bytes]:
    s = SENTENCES
    return {
        "reports/q3.xlsx": fm.xlsx(
            {"Summary": [["Quarter", "Q3"]], "Maintenance": [["Task", s["reports/q3.xlsx"]]]}
        ),
        "decks/roadmap.pptx": fm.pptx(
            [("Welcome", "Agenda for today", ""), ("Roadmap", s["decks/roadmap.pptx"], "")]
        ),
        "notes/minutes.odt": fm.odt(["Minutes of the meeting.", s["notes/minutes.odt"]]),
        "books/guide.epub": fm.epub(
            [("Arrival", "Welcome aboard."), ("Piers", s["books/guide.epub"])]
        ),
        "papers/layer.pdf": fm.text_pdf(["Cover page", s["papers/layer.pdf"]]),
        "notes/legal.rtf": (
            r"{\rtf1\ansi {\b Lease} \par " + s["notes/legal.rtf"] + r"\par}"
        ).encode(),
        "papers/thesis.tex": (
            "\\documentclass{article}\\begin{document}\\section{Introduction}Mosses matter."
            f"\\section{{Results}}{s['papers/thesis.tex']}.\\end{{document}}"
        ).encode(),
    }


def ticks_until_idle(app: RagApp) -> None:
    """Run indexer ticks until one claims nothing."""
    for _ in range(200):
        if not app.scheduler.tick().claimed:
            return
    raise AssertionError("the indexer never went idle")


@pytest.fixture
def app(make_app: Any) -> RagApp:
    """A running project on the lexical ``hashing`` provider."""
    app: RagApp = make_app()
    app.bring(T, P)
    return app


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """The folder imported (the store lives beside it, in tmp_path)."""
    (tmp_path / "files").mkdir()
    return tmp_path / "files"


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def context(app: RagApp, question: str) -> str:
    recipe = RagParams(auto_inject=AutoInject.ON, min_score=0.0, top_k=3)
    return "\n".join(app.pre_turn(T, P, [question], recipe))


def counting(app: RagApp) -> Counter[str]:
    return count_extractions(app)


@pytest.fixture
def vision() -> Iterator[dict[str, Any]]:
    """A loopback server speaking chat-completions that reads every image as VISION_TEXT."""
    seen: dict[str, Any] = {"requests": 0, "auth": set()}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["requests"] += 1
            seen["auth"].add(self.headers.get("Authorization"))
            parts = body["messages"][0]["content"]
            assert self.path == "/v1/chat/completions" and body["model"] == "vision-mini"
            assert any(p["type"] == "image_url" for p in parts)
            reply = {"choices": [{"message": {"role": "assistant", "content": VISION_TEXT}}]}
            send_json(self, reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield seen
    server.shutdown()
    server.server_close()


def use_vision(app: RagApp, url: str) -> None:
    app.settings.set(T, None, "rag.extract.ocr", "vision")
    app.settings.set(T, None, "rag.extract.vision.model", "vision-mini")
    app.settings.set(T, None, "rag.extract.vision.baseUrl", url)
    app.settings.set(T, None, "rag.extract.vision.apiKey", "sk-vision-test-0123456789abcdef")


# -- every type is found, with its section in the label ---------------------------------------


def test_every_office_type_is_found_with_its_section(app: RagApp, files: Path) -> None:
    write_tree(files, office_files())
    summary = app.importer.import_directory(T, P, files)
    assert summary.failed_files == [] and summary.skipped_files == []
    assert summary.created == len(SENTENCES)
    ticks_until_idle(app)
    labels = {
        "reports/q3.xlsx": "documents/reports/q3.xlsx — sheet Maintenance",
        "decks/roadmap.pptx": "documents/decks/roadmap.pptx — slide 2",
        "papers/layer.pdf": "documents/papers/layer.pdf — page 2",
        "books/guide.epub": "documents/books/guide.epub — chapter 2",
        "papers/thesis.tex": "documents/papers/thesis.tex — section Results",
        "notes/minutes.odt": "documents/notes/minutes.odt",
        "notes/legal.rtf": "documents/notes/legal.rtf",
    }
    for rel, sentence in SENTENCES.items():
        block = context(app, sentence)
        first = block.split("- [S1] ", 1)[1].split("\n", 1)
        assert first[0].startswith(labels[rel]), (rel, block)
        assert sentence.split()[1] in first[1], (rel, block)


def test_a_chunk_never_spans_two_sections(app: RagApp) -> None:
    sheets = {f"S{i}": [[f"row {j} of sheet {i}"] for j in range(3)] for i in range(4)}
    app.importer.import_sources(T, P, [ImportSource("book.xlsx", data=fm.xlsx(sheets))])
    ticks_until_idle(app)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    hits = app.rags.query(rag, "row of sheet", top_k=20, min_score=-1.0)
    assert {h.metadata["section"] for h in hits} == {f"sheet S{i}" for i in range(4)}
    for hit in hits:
        number = hit.metadata["section"].removeprefix("sheet S")
        assert f"of sheet {number}" in hit.text and all(
            f"of sheet {other}" not in hit.text for other in "0123" if other != number
        )


# -- unreadable files are visible, failed documents -----------------------------------------


def test_a_scan_without_ocr_is_a_failed_document_with_the_reason(app: RagApp, files: Path) -> None:
    write_tree(files, {"scan.pdf": fm.scanned_pdf("GLACIER SURVEY"), "ok.md": b"fine"})
    summary = app.importer.import_directory(T, P, files)
    assert [f.path for f in summary.failed_files] == ["scan.pdf"]
    assert "no text layer" in summary.failed_files[0].reason
    doc = app.documents.get_by_path(T, P, "documents/scan.pdf")
    assert doc is not None and doc.index_state is IndexState.FAILED and doc.content == ""
    assert "configure an OCR/vision extractor" in (doc.index_last_error or "")
    assert [d.path for d in app.documents.list_failures(T, P)] == ["documents/scan.pdf"]
    status = app.project_rags.status(T, P)
    assert status.documents["failed"] == 1
    # The indexer leaves it failed, and so does a reindex: nothing can read it yet.
    ticks_until_idle(app)
    app.documents.mark_all_for_reindex(T, P)
    ticks_until_idle(app)
    doc = app.documents.get_by_path(T, P, "documents/scan.pdf")
    assert doc is not None and doc.index_state is IndexState.FAILED
    assert "no text layer" in (doc.index_last_error or "")


def test_vision_reads_the_scan_and_it_is_found(
    app: RagApp, files: Path, vision: dict[str, Any]
) -> None:
    write_tree(
        files,
        {
            "scan.pdf": fm.scanned_pdf("GLACIER SURVEY"),
            "photo.png": fm.text_image("GLACIER"),
            "text.pdf": fm.text_pdf(["A text layer page about ferries"]),
            "sheet.xlsx": fm.xlsx({"Data": [["ferries", 3]]}),
        },
    )
    first = app.importer.import_directory(T, P, files)
    assert {f.path for f in first.failed_files} == {"scan.pdf", "photo.png"}

    use_vision(app, vision["url"])
    calls = counting(app)
    again = app.importer.import_directory(T, P, files)
    # Turning OCR on re-reads exactly the files that failed or came from scans.
    assert set(calls) == {"scan.pdf", "photo.png"} and again.failed_files == []
    assert vision["requests"] == 2
    assert vision["auth"] == {"Bearer sk-vision-test-0123456789abcdef"}
    ticks_until_idle(app)
    block = context(app, "when does the glacier survey resume")
    assert "glacier survey resumes" in block
    assert "documents/scan.pdf — page 1" in block
    for path in ("documents/scan.pdf", "documents/photo.png"):
        doc = app.documents.get_by_path(T, P, path)
        assert doc is not None and doc.index_state is IndexState.INDEXED
    # The key is a write-only secret: never shown, never in a record.
    assert app.settings.get_public(T, None, "rag.extract.vision.apiKey") == "********"
    for doc in app.documents.list_documents(T, P):
        assert "sk-vision" not in (doc.extraction or "") + (doc.index_last_error or "")


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="no tesseract-ocr installed")
def test_tesseract_reads_the_scan_and_it_is_found(app: RagApp, files: Path) -> None:
    write_tree(files, {"scan.pdf": fm.scanned_pdf("GLACIER SURVEY RESUMES IN MARCH")})
    app.settings.set(T, None, "rag.extract.ocr", "tesseract")
    summary = app.importer.import_directory(T, P, files)
    assert summary.failed_files == [], summary.failed_files
    ticks_until_idle(app)
    assert "documents/scan.pdf — page 1" in context(app, "glacier survey resumes")


# -- re-extraction only when it can change something ----------------------------------------


def test_reimporting_unchanged_files_calls_no_extractor(app: RagApp, files: Path) -> None:
    tree = {**office_files(), "scan.png": fm.text_image("NOPE"), "empty.md": b""}
    write_tree(files, tree)
    calls = counting(app)
    first = app.importer.import_directory(T, P, files)
    assert sum(calls.values()) == len(tree)
    calls.clear()
    again = app.importer.import_directory(T, P, files)
    assert sum(calls.values()) == 0
    assert again.unchanged == len(SENTENCES)
    # Failed ones are listed again (still failed), without being read again.
    assert {f.path for f in again.failed_files} == {f.path for f in first.failed_files}
    assert {f.path for f in first.failed_files} == {"scan.png", "empty.md"}

    (files / "notes" / "minutes.odt").write_bytes(fm.odt(["Changed minutes."]))
    app.settings.set(T, None, "rag.extract.maxSheets", "1")  # only workbooks read sheets
    app.importer.import_directory(T, P, files)
    # The changed file, and the only type that reads sheets; nothing else.
    assert set(calls) == {"notes/minutes.odt", "reports/q3.xlsx"}


def test_a_new_extractor_version_re_extracts_its_files_only(make_app: Any, files: Path) -> None:
    from vancetope_rag.extraction.registry import decode_text

    write_tree(files, {"a.md": b"alpha", "b.md": b"beta", "c.odt": fm.odt(["gamma"])})
    app = make_app()
    app.bring(T, P)
    app.importer.import_directory(T, P, files)
    app.extractors.register(["text/markdown"], decode_text, extensions=[".md"], version="2")
    calls = counting(app)
    summary = app.importer.import_directory(T, P, files)
    assert set(calls) == {"a.md", "b.md"}
    assert summary.unchanged == 3  # same text: nothing for the indexer either


def test_a_fixed_file_replaces_its_failed_document(app: RagApp, files: Path) -> None:
    (files / "notes.txt").write_bytes(b"caf\x00\xe9")  # binary (Latin-1 is read now)
    app.importer.import_directory(T, P, files)
    doc = app.documents.get_by_path(T, P, "documents/notes.txt")
    assert doc is not None and doc.index_state is IndexState.FAILED
    (files / "notes.txt").write_text("café, now in UTF-8")
    summary = app.importer.import_directory(T, P, files)
    assert summary.updated == 1 and summary.failed_files == []
    ticks_until_idle(app)
    doc = app.documents.get_by_path(T, P, "documents/notes.txt")
    assert doc is not None and doc.index_state is IndexState.INDEXED
    assert doc.content == "café, now in UTF-8" and doc.index_last_error is None


def test_an_indexed_file_that_becomes_unreadable_keeps_its_last_text(
    app: RagApp, files: Path
) -> None:
    """A file replaced by a broken or locked copy fails visibly (the import lists it, the
    status shows it under "needs attention"), and what was found before is still found: the
    document stays indexed from its last good text (nothing is lost); a readable version
    replaces it again."""
    (files / "report.pdf").write_bytes(fm.text_pdf(["Cover", "Harbour dues rise in spring"]))
    app.importer.import_directory(T, P, files)
    ticks_until_idle(app)
    assert "report.pdf — page 2" in context(app, "harbour dues spring")
    (files / "report.pdf").write_bytes(fm.encrypted_pdf("Harbour dues rise in spring"))
    summary = app.importer.import_directory(T, P, files)
    assert "encrypted" in summary.failed_files[0].reason
    doc = app.documents.get_by_path(T, P, "documents/report.pdf")
    assert doc is not None and doc.index_state is IndexState.INDEXED
    assert "keeps the text of its last readable version" in (doc.extraction_error or "")
    assert [a.path for a in app.project_rags.status(T, P).needs_attention] == [doc.path]
    assert "report.pdf — page 2" in context(app, "harbour dues spring")
    # A reindex rebuilds it from the kept text, sections included.
    app.documents.mark_all_for_reindex(T, P)
    ticks_until_idle(app)
    assert "report.pdf — page 2" in context(app, "harbour dues spring")
    (files / "report.pdf").write_bytes(fm.text_pdf(["Harbour dues fall in autumn"]))
    assert app.importer.import_directory(T, P, files).updated == 1
    ticks_until_idle(app)
    doc = app.documents.get_by_path(T, P, "documents/report.pdf")
    assert doc is not None and doc.index_state is IndexState.INDEXED
    assert "autumn" in doc.content and "spring" not in doc.content
    assert doc.extraction_error is None


def test_a_budget_truncates_and_says_so(app: RagApp) -> None:
    app.settings.set(T, P, "rag.extract.maxPages", "2")
    pdf = fm.text_pdf(["first page", "second page", "third page about otters"])
    summary = app.importer.import_sources(T, P, [ImportSource("long.pdf", data=pdf)])
    assert [(t.path, "rag.extract.maxPages" in t.reason) for t in summary.truncated_files] == [
        ("long.pdf", True)
    ]
    ticks_until_idle(app)
    doc = app.documents.get_by_path(T, P, "documents/long.pdf")
    assert doc is not None and doc.truncated and "otters" not in doc.content
    record = ExtractionRecord.from_json(doc.extraction)
    assert record is not None and "2 of 3 pages" in (record.truncated or "")
    assert app.project_rags.status(T, P).truncated_documents == 1


# -- hostile files ------------------------------------------------------------------------------


HOSTILE = {
    "bomb.docx": (fm.zip_bomb("word/document.xml"), "larger than"),
    "bomb.xlsx": (fm.zip_bomb("xl/worksheets/sheet1.xml"), "zip bomb"),
    "huge.pdf": (fm.many_pages_pdf(10_000), None),  # read up to the page budget: truncated
    "loop.pdf": (fm.looping_pdf(), "PDF"),
    "nested.html": (fm.nested_html(1_000_000), None),
    "empty.txt": (b"", "empty"),
    "locked.pdf": (fm.encrypted_pdf("secret plans"), "encrypted"),
    "locked.docx": (fm.encrypted_office(), "encrypted"),
}


def test_hostile_files_end_in_bounded_time_and_lose_nothing_else(app: RagApp, files: Path) -> None:
    # Each file ends by its own budget (pages, sizes, ratios), not by the time limit: the
    # limit is far above any file's need (a second or two) even on a busy machine, and no
    # reason below may name it. A wall-clock bound would measure the machine's load.
    app.settings.set(T, None, "rag.extract.timeoutSeconds", "120")
    write_tree(files, {name: data for name, (data, _) in HOSTILE.items()})
    (files / "good.md").write_text("The ferry leaves at noon.")
    summary = app.importer.import_directory(T, P, files)
    failed = {f.path: f.reason for f in summary.failed_files}
    assert not [r for r in failed.values() if "timeoutSeconds" in r], failed
    for name, (_, reason) in HOSTILE.items():
        doc = app.documents.get_by_path(T, P, f"documents/{name}")
        assert doc is not None, name
        if reason is None:
            assert name not in failed, (name, failed.get(name))
        else:
            assert reason in failed.get(name, ""), (name, failed.get(name))
            assert doc.index_state is IndexState.FAILED
    assert "huge.pdf" in {t.path for t in summary.truncated_files}
    good = app.documents.get_by_path(T, P, "documents/good.md")
    assert good is not None and good.content == "The ferry leaves at noon."
    ticks_until_idle(app)
    assert "ferry leaves at noon" in context(app, "when does the ferry leave")
