"""``import`` says how many video frames it had the vision model describe (each one call),
in its last line and in ``--json``; without vision it makes none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from media_makers import needs_ffmpeg, video
from vision_server import KEY, MODEL, VisionServer, serve_vision, vision_settings


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with serve_vision() as server:
        yield server


@needs_ffmpeg
def test_import_counts_the_frames_the_vision_model_described(
    run, tmp_path: Path, vision: VisionServer
) -> None:
    files = tmp_path / "files"
    video(files, "harbour.mkv", seconds=30, subtitles=[(1.0, 4.0, "Ferries leave at dawn")])
    (files / "harbour.mkv.srt").unlink()  # the maker's source, not part of the folder
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    plain = run("import", str(files), "--json")
    assert json.loads(plain.stdout)["visionFrames"] == 0 and vision.requests == []

    for key, value in {
        "rag.extract.ocr": "vision",
        "rag.extract.vision.model": MODEL,
        "rag.extract.vision.baseUrl": vision.base_url,
        "rag.extract.vision.apiKey": KEY,
    }.items():
        run("settings", "set", key, value, "--scope", "tenant")
    shown = run("import", str(files)).stdout
    assert "1 updated" in shown  # vision turned on re-reads the video, and only it
    assert shown.rstrip().endswith("3 video frames described by the vision model")
    assert len(vision.requests) == 3 and KEY not in shown


@needs_ffmpeg
def test_an_import_sends_frames_to_the_vision_model_not_the_ocr_model(
    run, tmp_path: Path, vision: VisionServer
) -> None:
    """The dedicated OCR model is for receipts and scans (second specification): a video's
    frames go to the RAG's vision model even when one is chosen."""
    files = tmp_path / "files"
    video(files, "harbour.mkv", seconds=30, subtitles=[(1.0, 4.0, "Ferries leave at dawn")])
    (files / "harbour.mkv.srt").unlink()
    settings = vision_settings(vision, **{"rag.extract.vision.ocrModel": "ocr-scans"})
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    for key, value in settings.items():
        run("settings", "set", key, value, "--scope", "tenant")
    assert json.loads(run("import", str(files), "--json").stdout)["visionFrames"] == 3
    assert [r["model"] for r in vision.requests] == [MODEL] * 3
