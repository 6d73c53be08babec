"""Failed reads: the machine's failures are read again without a new import, the file's wait for
the file to change; the OCR model reads scans and re-reads exactly them when it changes.

Real parts throughout: the SQLite store, the extraction worker process, Debian's ``tesseract``
(taken off the PATH by the test, then given back) and a loopback chat-completions server that
reads every image as a sentence naming the model it was asked for, and can be taken down
(HTTP 503) and brought back. Retry times run on the test's clock (conftest's ``clock``).
"""

from __future__ import annotations

import json
import os
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

KEY = "sk-vision-retry-0123456789abcdef"
needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="no tesseract-ocr installed"
)


@pytest.fixture
def app(make_app: Any, clock: Any) -> RagApp:
    app: RagApp = make_app(clock=clock)
    app.extraction.circuits.clock = clock  # the vision circuit's waits too
    app.bring(T, P)
    return app


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "files").mkdir()
    return tmp_path / "files"


@pytest.fixture
def vision() -> Iterator[dict[str, Any]]:
    """Chat-completions on loopback: each image read as a sentence naming the model; answers
    ``seen["status"]`` instead while it is not 200 (down)."""
    seen: dict[str, Any] = {"models": Counter(), "status": 200, "requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = seen["status"]
            seen["requests"] += 1
            if status != 200:
                self.send_error(status)
                return
            model = body["model"]
            assert any(p["type"] == "image_url" for p in body["messages"][0]["content"])
            seen["models"][model] += 1
            text = f"Scanned memo read by {model}: the glacier survey resumes in March"
            send_json(self, {"choices": [{"message": {"content": text}}]})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen["url"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield seen
    server.shutdown()
    server.server_close()


def counting(app: RagApp) -> Counter[str]:
    return count_extractions(app)


def ticks_until_idle(app: RagApp) -> None:
    for _ in range(100):
        if not app.scheduler.tick().claimed:
            return
    raise AssertionError("the indexer never went idle")


def context(app: RagApp, question: str) -> str:
    recipe = RagParams(auto_inject=AutoInject.ON, min_score=0.0, top_k=3)
    return "\n".join(app.pre_turn(T, P, [question], recipe))


def record(app: RagApp, path: str) -> ExtractionRecord:
    doc = app.documents.get_by_path(T, P, path)
    assert doc is not None
    found = ExtractionRecord.from_json(doc.extraction)
    assert found is not None
    return found


def use_vision(app: RagApp, url: str, **settings: str) -> None:
    app.settings.set(T, None, "rag.extract.vision.baseUrl", url)
    app.settings.set(T, None, "rag.extract.vision.apiKey", KEY)
    for key, value in settings.items():
        app.settings.set(T, None, f"rag.extract.{key}", value)


# -- the machine's failures -------------------------------------------------------------------


@needs_tesseract
def test_a_scan_fails_without_tesseract_then_is_read_when_it_returns_without_an_import(
    app: RagApp, files: Path, clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (files / "scan.pdf").write_bytes(fm.scanned_pdf("GLACIER SURVEY RESUMES IN MARCH"))
    app.settings.set(T, None, "rag.extract.ocr", "tesseract")
    path = os.environ["PATH"]
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))

    summary = app.importer.import_directory(T, P, files)
    [failed] = summary.failed_files
    assert "tesseract program" in failed.reason and "read again at" in failed.reason
    first = record(app, "documents/scan.pdf")
    assert first.error_code == "EXTRACT_PROGRAM_MISSING"
    assert "apt-get install tesseract-ocr" in failed.reason
    assert first.retries == 1 and first.retry_at == pytest.approx(clock.now + 60)
    doc = app.documents.get_by_path(T, P, "documents/scan.pdf")
    assert doc is not None and doc.index_state is IndexState.FAILED
    assert "read again at" in (doc.index_last_error or "")

    calls = counting(app)
    app.scheduler.tick()
    assert calls["scan.pdf"] == 0  # not due yet
    clock.advance(61)
    app.scheduler.tick()  # due: read again, Tesseract still missing
    assert calls["scan.pdf"] == 1
    second = record(app, "documents/scan.pdf")
    assert second.retries == 2 and second.retry_at == pytest.approx(clock.now + 120)

    monkeypatch.setenv("PATH", path)  # the program is back
    clock.advance(121)
    app.scheduler.tick()
    assert calls["scan.pdf"] == 2
    ticks_until_idle(app)
    doc = app.documents.get_by_path(T, P, "documents/scan.pdf")
    assert doc is not None and doc.index_state is IndexState.INDEXED
    assert doc.extraction_error is None and record(app, doc.path).retry_at is None
    assert "documents/scan.pdf — page 1" in context(app, "glacier survey resumes")


def test_a_corrupt_file_is_not_read_again_until_it_changes(
    app: RagApp, files: Path, clock: Any
) -> None:
    (files / "broken.pdf").write_bytes(b"%PDF-1.7\n this is not a PDF at all")
    app.importer.import_directory(T, P, files)
    broken = record(app, "documents/broken.pdf")
    assert broken.failed and broken.retry_at is None and broken.retries == 0
    assert "read again" not in (broken.error or "")
    calls = counting(app)
    clock.advance(86_400)
    app.scheduler.tick()
    app.importer.import_directory(T, P, files)
    assert calls["broken.pdf"] == 0
    (files / "broken.pdf").write_bytes(fm.text_pdf(["Harbour dues rise in spring"]))
    app.importer.import_directory(T, P, files)
    assert calls["broken.pdf"] == 1
    assert not record(app, "documents/broken.pdf").failed


def test_a_vision_server_down_keeps_the_last_text_until_it_is_back(
    app: RagApp, files: Path, clock: Any, vision: dict[str, Any]
) -> None:
    """The OCR model alone turns vision on for scans (rag.extract.ocr stays none, the
    fallback toggle off); while the server is down, the document keeps its last text and
    says when it is read again; once the server is back, a tick reads the new scan."""
    use_vision(app, vision["url"], **{"vision.ocrModel": "ocr-mini"})
    (files / "memo.png").write_bytes(fm.text_image("MEMO ONE"))
    app.importer.import_directory(T, P, files)
    ticks_until_idle(app)
    assert "documents/memo.png" in context(app, "glacier survey resumes")

    vision["status"] = 503
    (files / "memo.png").write_bytes(fm.text_image("MEMO TWO"))
    summary = app.importer.import_directory(T, P, files)
    assert "HTTP 503" in summary.failed_files[0].reason
    doc = app.documents.get_by_path(T, P, "documents/memo.png")
    assert doc is not None and doc.index_state is IndexState.INDEXED
    [attention] = app.project_rags.status(T, P).needs_attention
    assert "read again at" in attention.error and "last readable version" in attention.error
    assert "documents/memo.png" in context(app, "glacier survey resumes")  # nothing lost
    assert KEY not in (doc.extraction or "") + attention.error

    clock.advance(61)
    app.scheduler.tick()  # still down: backs off further
    assert record(app, doc.path).retries == 2
    vision["status"] = 200
    clock.advance(121)
    app.scheduler.tick()
    ticks_until_idle(app)
    after = record(app, doc.path)
    assert not after.failed and after.file_hash != record_hash_of(fm.text_image("MEMO ONE"))
    assert app.project_rags.status(T, P).needs_attention == []
    assert vision["models"] == Counter({"ocr-mini": 2})


def record_hash_of(data: bytes) -> str:
    from vancetope_rag.extraction.records import file_hash

    return file_hash(data)


def test_a_file_gone_from_its_folder_stops_being_retried(
    app: RagApp, files: Path, clock: Any, vision: dict[str, Any]
) -> None:
    use_vision(app, vision["url"], ocr="vision", **{"vision.model": "vision-mini"})
    vision["status"] = 503
    (files / "memo.png").write_bytes(fm.text_image("MEMO"))
    app.importer.import_directory(T, P, files)
    (files / "memo.png").unlink()
    clock.advance(61)
    app.scheduler.tick()
    stopped = record(app, "documents/memo.png")
    assert stopped.retry_at is None
    doc = app.documents.get_by_path(T, P, "documents/memo.png")
    assert doc is not None and "not read again in the background" in (doc.extraction_error or "")
    calls = counting(app)
    clock.advance(3600)
    app.scheduler.tick()
    assert calls == Counter()


# -- the OCR model and the fingerprint --------------------------------------------------------


def test_changing_the_ocr_model_re_reads_exactly_the_scans(
    app: RagApp, files: Path, vision: dict[str, Any]
) -> None:
    fm_files = {
        "scan.png": fm.text_image("SCAN"),
        "scanned.pdf": fm.scanned_pdf("SCANNED"),
        "layer.pdf": fm.text_pdf(["Quartz resonators drift less than two parts per million"]),
        "notes.md": b"Otters hold hands while they sleep.",
    }
    for name, data in fm_files.items():
        (files / name).write_bytes(data)
    use_vision(app, vision["url"], ocr="vision", **{"vision.model": "vision-a"})
    app.importer.import_directory(T, P, files)
    calls = counting(app)

    app.settings.set(T, None, "rag.extract.vision.ocrModel", "ocr-b")
    app.importer.import_directory(T, P, files)
    assert set(calls) == {"scan.png", "scanned.pdf"}
    doc = app.documents.get_by_path(T, P, "documents/scan.png")
    assert doc is not None and "read by ocr-b" in doc.content

    calls.clear()  # the vision model no longer reads scans: changing it re-reads nothing
    app.settings.set(T, None, "rag.extract.vision.model", "vision-c")
    app.importer.import_directory(T, P, files)
    assert calls == Counter()

    app.settings.set(T, None, "rag.extract.vision.ocrModel", None)  # inherits vision-c
    app.importer.import_directory(T, P, files)
    assert set(calls) == {"scan.png", "scanned.pdf"}
    doc = app.documents.get_by_path(T, P, "documents/scanned.pdf")
    assert doc is not None and "read by vision-c" in doc.content


def test_the_environment_defaults_sit_beneath_the_tenant_settings(
    make_app: Any, files: Path, vision: dict[str, Any]
) -> None:
    """DOC_VISION_FALLBACK_ENABLED and DOC_VISION_MODEL read scans for a tenant that set
    nothing; the tenant's own values win over them."""
    app: RagApp = make_app(
        config={"doc_vision_fallback_enabled": True, "doc_vision_model": "env-model"}
    )
    app.bring(T, P)
    use_vision(app, vision["url"])
    (files / "scan.png").write_bytes(fm.text_image("SCAN"))
    app.importer.import_directory(T, P, files)
    doc = app.documents.get_by_path(T, P, "documents/scan.png")
    assert doc is not None and "read by env-model" in doc.content

    app.settings.set(T, None, "rag.extract.vision.model", "tenant-model")
    app.importer.import_directory(T, P, files)
    doc = app.documents.get_by_path(T, P, "documents/scan.png")
    assert doc is not None and "read by tenant-model" in doc.content

    app.settings.set(T, P, "rag.extract.vision.fallback", "false")  # the project opts out
    summary = app.importer.import_directory(T, P, files)
    assert "no text layer" in summary.failed_files[0].reason


@needs_tesseract
def test_tesseract_first_then_the_vision_fallback_for_what_it_cannot_read(
    app: RagApp, files: Path, vision: dict[str, Any]
) -> None:
    (files / "typed.png").write_bytes(fm.text_image("HARBOUR DUES RISE IN SPRING"))
    (files / "blank.png").write_bytes(fm.text_image(" "))
    use_vision(app, vision["url"], ocr="tesseract", **{"vision.ocrModel": "ocr-mini"})
    summary = app.importer.import_directory(T, P, files)
    assert summary.failed_files == []
    typed = app.documents.get_by_path(T, P, "documents/typed.png")
    blank = app.documents.get_by_path(T, P, "documents/blank.png")
    assert typed is not None and "HARBOUR" in typed.content.upper()
    assert blank is not None and "read by ocr-mini" in blank.content
    assert vision["models"] == Counter({"ocr-mini": 1})  # the typed one never went to vision


def test_a_vision_outage_found_by_one_file_spares_the_next_ones_a_call(
    app: RagApp, files: Path, clock: Any, vision: dict[str, Any]
) -> None:
    """The vision model's circuit: the first scan that finds it down opens it; the other
    scans of the import fail at once, named paused, with no call; once the circuit's wait
    is over and the model is back, the next read goes through and closes it."""
    use_vision(app, vision["url"], ocr="vision", **{"vision.model": "vision-mini"})
    vision["status"] = 503
    for n in range(3):
        (files / f"memo{n}.png").write_bytes(fm.text_image(f"MEMO {n}"))
    summary = app.importer.import_directory(T, P, files)
    reasons = sorted(f.reason for f in summary.failed_files)
    assert len(reasons) == 3
    assert sum("HTTP 503" in r for r in reasons) == 1
    assert sum("is paused after failing" in r for r in reasons) == 2
    assert all(record(app, f"documents/memo{n}.png").retry_at for n in range(3))
    assert vision["requests"] == 1
    vision["status"] = 200
    clock.advance(61)  # past the circuit's wait and the files' back-off
    app.scheduler.tick()
    assert vision["models"] == Counter({"vision-mini": 3})
    assert not any(record(app, f"documents/memo{n}.png").failed for n in range(3))
