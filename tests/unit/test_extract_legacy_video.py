"""Legacy Office files through LibreOffice and videos through ffmpeg, with the real programs:
a sentence only inside the file comes back; budgets, the time limit (the whole process tree
is killed) and hostile videos (ten hours long, a crafted duration, a broken container) end
within their limits; a missing program is a named error naming the Debian package.

Every fixture is written by the programs themselves (:mod:`media_makers`), once per session.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes import default_extractors
from filemakers import titles
from media_makers import LEGACY_DOC as DOC
from media_makers import LEGACY_PPT as PPT
from media_makers import LEGACY_XLS as XLS
from media_makers import claim_duration, needs_ffmpeg, needs_soffice, video
from vancetope_rag.default_plugins.extractors import video as extract_video
from vancetope_rag.errors import (
    ExtractionError,
    ExtractionTimeoutError,
    ExtractorProgramMissingError,
    FileTooLargeError,
    NoTextLayerError,
)
from vancetope_rag.extraction.registry import ExtractedText, ExtractOptions, extract_text
from vancetope_rag.extraction.sandbox import ExtractionSandbox
from vancetope_rag.extraction.types import error_from_code
from vision_server import TRANSCRIPTION, VisionServer, serve_vision

BUILTINS = default_extractors()
SUBTITLE = "The ferry timetable changes on the first of May"
LATE = "The harbour master retires at the end of the season"


def extract(data: bytes, path: str, **options: Any) -> ExtractedText:
    return extract_text(data, path=path, registry=BUILTINS, options=ExtractOptions(**options))


@pytest.fixture(scope="session")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if os.system("command -v ffmpeg >/dev/null 2>&1") != 0:
        pytest.skip("ffmpeg is not installed (Debian's ffmpeg)")
    work = tmp_path_factory.mktemp("videos")
    cues = [(1.0, 4.0, SUBTITLE), (5.0, 8.0, "Second cue")]
    made = {
        name: video(work, name, seconds=30, subtitles=cues)
        for name in ("clip.mkv", "clip.mp4", "clip.webm", "clip.mov")
    }
    made["silent.mp4"] = video(work, "silent.mp4", seconds=12)
    # ten hours at one frame per ten seconds and 16x16: cheap to make, long to watch
    made["long.mkv"] = video(
        work,
        "long.mkv",
        seconds=36_000,
        size="16x16",
        rate="1/10",
        source="color=c=navy",
        subtitles=[(5.0, 8.0, SUBTITLE), (35_900.0, 35_905.0, LATE)],
    )
    short = video(work, "short.mkv", seconds=20, subtitles=cues)
    made["claims-ten-hours.mkv"] = claim_duration(short, 36_000)
    return made


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with serve_vision() as server:
        yield server


def processes_mentioning(text: str) -> list[str]:
    """Command lines of the running processes that contain ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(cmdline.decode(errors="replace"))
    return found


# --- legacy Office ------------------------------------------------------------------------


@needs_soffice
def test_a_doc_is_read_through_libreoffice(legacy: dict[str, bytes]) -> None:
    # .xls and .ppt: tests/services/test_import_legacy_video.py (a LibreOffice start costs
    # seconds; their sheets and slides are found there, labels and all)
    doc = extract(legacy["report.doc"], "report.doc")
    assert DOC in doc.text and "Quarterly report" in doc.text
    assert doc.extractor == "vancetope.doc@1"


@needs_soffice
@pytest.mark.slow
def test_xls_and_ppt_keep_their_sheets_and_slides(legacy: dict[str, bytes]) -> None:
    xls = extract(legacy["budget.xls"], "budget.xls")
    assert titles(xls) == ["sheet Intro", "sheet Costs"] and XLS in xls.text
    ppt = extract(legacy["deck.ppt"], "deck.ppt")
    assert titles(ppt) == ["slide 1: Welcome", "slide 2: Harbour"] and PPT in ppt.text


@needs_soffice
@pytest.mark.slow
def test_the_budgets_of_the_successor_format_apply(legacy: dict[str, bytes]) -> None:
    ppt = extract(legacy["deck.ppt"], "deck.ppt", max_slides=1)
    assert titles(ppt) == ["slide 1: Welcome"] and PPT not in ppt.text
    assert ppt.truncated_reason is not None and "rag.extract.maxSlides" in ppt.truncated_reason


def test_a_file_over_its_type_size_budget_is_refused_before_libreoffice_runs() -> None:
    with pytest.raises(FileTooLargeError, match=re.escape("rag.extract.maxLegacyOfficeBytes")):
        extract(b"\xd0\xcf\x11\xe0" + b"\0" * 2000, "big.doc", max_legacy_office_bytes=1000)


def test_without_libreoffice_the_error_names_the_debian_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExtractorProgramMissingError) as caught:
        extract(b"\xd0\xcf\x11\xe0", "deck.ppt")
    assert caught.value.code == "EXTRACT_PROGRAM_MISSING"
    assert caught.value.package == "libreoffice-impress-nogui"
    assert "apt-get install libreoffice-impress-nogui" in caught.value.message
    # recorded and raised again from its code (a worker's reply, a stored failure): the same
    again = error_from_code(caught.value.code, caught.value.message, caught.value.extra)
    assert isinstance(again, ExtractorProgramMissingError)
    assert again.package == "libreoffice-impress-nogui"


@needs_soffice
def test_the_time_limit_kills_the_whole_libreoffice_tree_in_process(
    legacy: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started = time.monotonic()
    with pytest.raises(ExtractionTimeoutError, match=re.escape("rag.extract.timeoutSeconds")):
        extract(legacy["report.doc"], "report.doc", timeout_s=0.5)
    # Killed by its limit and said so (the match above); the bound only guards against
    # waiting for LibreOffice to finish: 10x the limit plus a second to reap.
    assert time.monotonic() - started < 15
    assert processes_mentioning(str(tmp_path)) == []  # oosplash and soffice.bin are gone
    assert list(tmp_path.iterdir()) == []  # and so is what they wrote


@needs_soffice
def test_the_time_limit_kills_the_whole_libreoffice_tree_in_a_worker(
    legacy: dict[str, bytes],
) -> None:
    sandbox = ExtractionSandbox(1)
    entry = BUILTINS.find_entry("application/msword", "report.doc")
    text = BUILTINS.find_entry("text/plain", "x.txt")
    assert entry is not None and text is not None
    sandbox.run(text, b"warm-up", "x.txt", "text/plain", ExtractOptions(), 100, timeout_s=30)
    worker_tmp = sandbox._idle[0].tmp
    started = time.monotonic()
    with pytest.raises(ExtractionTimeoutError):
        sandbox.run(
            entry,
            legacy["report.doc"],
            "report.doc",
            "application/msword",
            ExtractOptions(),
            10_000,
            timeout_s=0.8,
        )
    assert time.monotonic() - started < 20  # 10x the limit plus a second to reap
    deadline = time.monotonic() + 30
    while processes_mentioning(worker_tmp) and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILL is delivered; the kernel reaps asynchronously
    assert processes_mentioning(worker_tmp) == []
    assert not Path(worker_tmp).exists()
    sandbox.close()


# --- videos -------------------------------------------------------------------------------


@needs_ffmpeg
@pytest.mark.parametrize("name", ["clip.mkv", "clip.mp4", "clip.webm", "clip.mov"])
def test_the_subtitle_track_is_read_without_vision(videos: dict[str, bytes], name: str) -> None:
    result = extract(videos[name], name)
    assert titles(result) == ["subtitles"]
    assert f"[0:00:01] {SUBTITLE}" in result.text and result.ocr
    assert result.extractor == "vancetope.video@1"


@needs_ffmpeg
def test_frames_are_described_by_the_vision_model(
    videos: dict[str, bytes], vision: VisionServer
) -> None:
    result = extract(videos["clip.mkv"], "clip.mkv", ocr=vision.config())
    # 30 s: one frame every max(10 s, 30 s / 6) = 10 s, in the middle of each step
    assert titles(result) == ["subtitles", "frame 0:00:05", "frame 0:00:15", "frame 0:00:25"]
    assert result.vision_frames == 3 and len(vision.requests) == 3
    assert result.text.count(f"{TRANSCRIPTION} (160px)") == 3
    prompt = vision.requests[0]["messages"][0]["content"][0]["text"]
    assert prompt == extract_video.FRAME_INSTRUCTION


@needs_ffmpeg
def test_max_frames_bounds_the_vision_calls(videos: dict[str, bytes], vision: VisionServer) -> None:
    result = extract(videos["clip.mp4"], "clip.mp4", ocr=vision.config(), max_frames=1)
    assert titles(result) == ["subtitles", "frame 0:00:15"] and len(vision.requests) == 1
    # a frame is an image sent to vision: rag.extract.vision.maxPages bounds them too
    capped = extract(videos["clip.mp4"], "clip.mp4", ocr=vision.config(max_pages=2))
    assert titles(capped) == ["subtitles", "frame 0:00:07", "frame 0:00:22"]
    assert len(vision.requests) == 3


@needs_ffmpeg
def test_a_video_without_subtitles_needs_vision(videos: dict[str, bytes]) -> None:
    with pytest.raises(NoTextLayerError, match=re.escape("set rag.extract.ocr to vision")):
        extract(videos["silent.mp4"], "silent.mp4")


@needs_ffmpeg
def test_a_ten_hour_video_is_sampled_across_its_length_within_the_frame_budget(
    videos: dict[str, bytes], vision: VisionServer
) -> None:
    started = time.monotonic()
    result = extract(videos["long.mkv"], "long.mkv", ocr=vision.config())
    assert time.monotonic() - started < 30
    hours = ["0:50:00", "2:30:00", "4:10:00", "5:50:00", "7:30:00", "9:10:00"]
    assert titles(result) == ["subtitles"] + [f"frame {h}" for h in hours]
    assert len(vision.requests) == 6
    assert f"[9:58:20] {LATE}" in result.text  # the subtitles of the whole video


@needs_ffmpeg
def test_a_crafted_duration_costs_no_more_than_the_frames_that_exist(
    videos: dict[str, bytes], vision: VisionServer
) -> None:
    started = time.monotonic()
    result = extract(videos["claims-ten-hours.mkv"], "claims.mkv", ocr=vision.config())
    assert time.monotonic() - started < 30
    assert titles(result) == ["subtitles"] and len(vision.requests) == 0


@needs_ffmpeg
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00\x18ftypmp42 truncated",
        b"#EXTM3U\n#EXTINF:10,\nhttp://127.0.0.1:9/x.ts\n",
    ],
    ids=["empty", "truncated", "playlist"],
)
def test_a_broken_container_is_a_named_failure(data: bytes) -> None:
    with pytest.raises(ExtractionError, match="not a readable video"):
        extract(data, "broken.mp4")


@needs_ffmpeg
def test_a_video_over_its_size_budget_is_refused(videos: dict[str, bytes]) -> None:
    with pytest.raises(FileTooLargeError, match=re.escape("rag.extract.maxVideoBytes")):
        extract(videos["clip.mp4"], "clip.mp4", max_video_bytes=1000)


def test_without_ffmpeg_the_error_names_the_debian_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExtractorProgramMissingError, match="apt-get install ffmpeg"):
        extract(b"\0\0\0\x18ftypmp42", "clip.mp4")


def test_frame_times_span_the_whole_video() -> None:
    assert extract_video.frame_times(30, 6) == [5.0, 15.0, 25.0]
    assert extract_video.frame_times(600, 6) == [50.0, 150.0, 250.0, 350.0, 450.0, 550.0]
    assert extract_video.frame_times(25, 6) == [5.0, 15.0]  # never closer than 10 s
    assert extract_video.frame_times(4, 6) == [2.0]  # shorter than half a step: its middle
    assert extract_video.frame_times(float("inf"), 6) == [0.0]
    assert len(extract_video.frame_times(1e12, 12)) == 12


def test_srt_cues_become_timed_lines() -> None:
    srt = "1\n00:01:05,000 --> 00:01:07,000\n<i>Hello</i> there\nsecond line\n\n2\n"
    assert extract_video.srt_text(srt) == "[0:01:05] Hello there\nsecond line"


@needs_soffice
def test_slides_render_as_images_for_a_vision_model(tmp_path: Path) -> None:
    import io

    from PIL import Image

    import filemakers as fm
    from vancetope_rag.default_plugins.extractors.libreoffice import slide_images

    deck = fm.pptx([("One", "first", ""), ("Two", "second", ""), ("Three", "third", "")])
    images = slide_images(deck, "deck.pptx", max_slides=2, timeout_s=60)
    assert len(images) == 2
    for png in images:
        with Image.open(io.BytesIO(png)) as image:
            assert image.format == "PNG" and max(image.size) <= 2500
    with pytest.raises(ExtractionError, match="not a presentation"):
        slide_images(deck, "deck.docx", max_slides=2, timeout_s=60)
