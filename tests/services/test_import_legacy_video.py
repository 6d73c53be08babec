"""Legacy Office files and videos imported end to end: what LibreOffice and ffmpeg read is
indexed and comes back from ``pre_turn`` with its section in the label; a video's frames are
described only with vision configured, and the summary counts those calls; a missing program
fails the file with the Debian package to install, and the next import, once it is there,
reads it without a change to the file.

Fixtures are written by the real programs (:mod:`media_makers`); the store is the real SQLite
one, the provider the lexical ``hashing`` one and the vision model the loopback server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import P, T
from media_makers import LEGACY_DOC as DOC
from media_makers import LEGACY_PPT as PPT
from media_makers import LEGACY_XLS as XLS
from media_makers import needs_ffmpeg, needs_soffice, video
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.extraction.sandbox import ExtractionSandbox
from vancetope_rag.recipes import RagParams
from vision_server import KEY, MODEL, TRANSCRIPTION, VisionServer, serve_vision

SUBTITLE = "The glacier ferry timetable changes on the first of May"


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A 30 s video with a subtitle track."""
    if os.system("command -v ffmpeg >/dev/null 2>&1") != 0:
        pytest.skip("ffmpeg is not installed (Debian's ffmpeg)")
    work = tmp_path_factory.mktemp("media")
    clip = video(work, "harbour.mkv", seconds=30, subtitles=[(1.0, 4.0, SUBTITLE)])
    return {"clips/harbour.mkv": clip}


@pytest.fixture(scope="module")
def office(legacy: dict[str, bytes]) -> dict[str, bytes]:
    """The session's .doc, .xls and .ppt, saved by LibreOffice, in a folder ``office``."""
    return {f"office/{name}": data for name, data in legacy.items()}


@pytest.fixture
def app(make_app: Any) -> RagApp:
    app: RagApp = make_app()
    app.bring(T, P)
    return app


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with serve_vision() as server:
        yield server


def write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def index(app: RagApp) -> None:
    for _ in range(200):
        if not app.scheduler.tick().claimed:
            return
    raise AssertionError("the indexer never went idle")


def first_hit(app: RagApp, question: str) -> str:
    recipe = RagParams(auto_inject=AutoInject.ON, min_score=0.0, top_k=3)
    block = "\n".join(app.pre_turn(T, P, [question], recipe))
    return block.split("- [S1] ", 1)[1]


@needs_soffice
@needs_ffmpeg
def test_legacy_office_and_video_subtitles_are_found_after_import(
    app: RagApp, media: dict[str, bytes], office: dict[str, bytes], tmp_path: Path
) -> None:
    root = write(tmp_path / "files", {**media, **office})
    summary = app.importer.import_directory(T, P, root)
    assert summary.failed_files == [] and summary.created == 4
    assert summary.vision_frames == 0  # no vision configured: subtitles only, no call
    index(app)
    expected = {
        DOC: "documents/office/report.doc",
        XLS: "documents/office/budget.xls — sheet Costs",
        PPT: "documents/office/deck.ppt — slide 2: Harbour",
        SUBTITLE: "documents/clips/harbour.mkv — subtitles",
    }
    for sentence, label in expected.items():
        hit = first_hit(app, sentence)
        assert hit.startswith(label) and sentence.split()[2] in hit, (label, hit)


@needs_ffmpeg
def test_video_frames_are_indexed_only_with_vision_and_the_calls_counted(
    app: RagApp, media: dict[str, bytes], tmp_path: Path, vision: VisionServer
) -> None:
    root = write(tmp_path / "files", {"harbour.mkv": media["clips/harbour.mkv"]})
    first = app.importer.import_directory(T, P, root)
    assert first.created == 1 and first.vision_frames == 0 and vision.requests == []

    app.settings.set(T, None, "rag.extract.ocr", "vision")
    app.settings.set(T, None, "rag.extract.vision.model", MODEL)
    app.settings.set(T, None, "rag.extract.vision.baseUrl", vision.base_url)
    app.settings.set(T, None, "rag.extract.vision.apiKey", KEY)
    again = app.importer.import_directory(T, P, root)
    # vision turned on re-reads the video: three frames of a 30 s video, three calls
    assert again.updated == 1 and again.vision_frames == 3 and len(vision.requests) == 3
    assert again.to_json()["visionFrames"] == 3
    index(app)
    assert first_hit(app, TRANSCRIPTION).startswith("documents/harbour.mkv — frame 0:00:")
    unchanged = app.importer.import_directory(T, P, root)
    assert unchanged.unchanged == 1 and unchanged.vision_frames == 0
    assert len(vision.requests) == 3  # nothing changed: no call made again
    doc = app.documents.get_by_path(T, P, "documents/harbour.mkv")
    assert doc is not None and KEY not in (doc.extraction or "") + doc.content


@needs_ffmpeg
def test_a_missing_program_fails_the_file_until_it_is_installed(
    app: RagApp, media: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write(tmp_path / "files", {"harbour.mkv": media["clips/harbour.mkv"]})
    real_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sandbox = ExtractionSandbox(1)  # workers started now see the PATH without ffmpeg
    app.extraction._sandbox = sandbox
    try:
        summary = app.importer.import_directory(T, P, root)
    finally:
        sandbox.close()
    assert [f.path for f in summary.failed_files] == ["harbour.mkv"]
    assert "apt-get install ffmpeg" in summary.failed_files[0].reason
    doc = app.documents.get_by_path(T, P, "documents/harbour.mkv")
    assert doc is not None and doc.index_state is IndexState.FAILED
    assert '"errorCode":"EXTRACT_PROGRAM_MISSING"' in (doc.extraction or "")

    monkeypatch.setenv("PATH", real_path)
    sandbox = ExtractionSandbox(1)
    app.extraction._sandbox = sandbox
    try:
        again = app.importer.import_directory(T, P, root)  # the same bytes: read again
    finally:
        sandbox.close()
    assert again.failed_files == [] and again.updated == 1
    index(app)
    assert first_hit(app, SUBTITLE).startswith("documents/harbour.mkv — subtitles")
