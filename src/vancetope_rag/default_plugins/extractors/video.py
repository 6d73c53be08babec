"""Videos (MP4, MKV, WebM, MOV) through ffmpeg: the subtitle track as text, always; frames
described by the vision model, when one is configured.

``ffprobe`` reads the duration and the streams; the first subtitle track is written out as
SRT (``ffmpeg -map 0:s:0 -f srt``) and becomes the section ``subtitles``; frames are sampled
every max(10 s, duration / ``rag.extract.maxFrames``) across the whole video, each one sent to
the vision model (``rag.extract.ocr = vision``, one call per frame, which an import's summary
counts) and kept as a section ``frame 0:05:00``. Without vision a video is read for its
subtitles only; one with neither fails with "no text layer", like a scan.

A hostile video cannot run away: the frames are at most ``maxFrames`` whatever the duration
claims (a frame past the real end is simply absent), every program runs within the
extraction's deadline as a tree killed whole (:mod:`vancetope_rag.extraction.programs`), the
demuxer is the one the extension names (a playlist renamed ``.mp4`` is not followed), only
local files may be opened, and the file is no larger than ``rag.extract.maxVideoBytes``.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vancetope_rag.default_plugins.extractors.guards import check_size
from vancetope_rag.default_plugins.extractors.ocr import recognize
from vancetope_rag.errors import NoTextError, NoTextLayerError
from vancetope_rag.extraction.programs import Deadline, require_program, run_program
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    RegisterExtractor,
    Section,
    extraction_error,
)

__all__ = ["VIDEO_TYPES", "extract_video", "frame_times", "register"]

#: MIME type → (extensions, the ffmpeg demuxer that reads them).
VIDEO_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "video/mp4": ((".mp4", ".m4v"), "mov"),
    "video/quicktime": ((".mov",), "mov"),
    "video/x-matroska": ((".mkv",), "matroska"),
    "video/webm": ((".webm",), "matroska"),
}
#: Frames are never closer together than this, however many are allowed.
MIN_FRAME_INTERVAL_S = 10.0
#: Longest side of a frame sent to the vision model.
MAX_FRAME_SIDE = 1280
#: Largest subtitle track read (SRT text; a film's is ~100 KB).
MAX_SUBTITLE_BYTES = 8 * 1024 * 1024
#: Largest ffprobe report read.
MAX_PROBE_BYTES = 1024 * 1024
#: What the vision model is asked for with each frame.
FRAME_INSTRUCTION = (
    "This image is one frame of a video. Describe what it shows in two or three plain "
    "sentences, and transcribe any visible text verbatim. Do not add headings or formatting."
)
_PACKAGE = "ffmpeg"
_SRT_TIME = re.compile(r"^\d+:\d\d:\d\d[,.]\d+\s*-->")


@dataclass(frozen=True)
class Probe:
    """What ffprobe says of a video."""

    duration_s: float | None
    video: bool
    subtitles: bool


def frame_times(duration_s: float, max_frames: int) -> list[float]:
    """When frames are sampled: the middle of each step of max(10 s, duration /
    ``max_frames``) that starts within the video (at most ``max_frames``); a video shorter than
    half a step, its middle. An unknown duration: the first frame."""
    if not math.isfinite(duration_s) or duration_s <= 0 or max_frames < 1:
        return [0.0]
    step = max(MIN_FRAME_INTERVAL_S, duration_s / max_frames)
    times = [(i + 0.5) * step for i in range(max_frames)]
    return [t for t in times if t < duration_s] or [duration_s / 2]


def clock(seconds: float) -> str:
    """``0:05:00``: a frame's time as its section title shows it."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def extract_video(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """The subtitles and (with vision) the described frames of a video.

    Raises:
        ExtractorProgramMissingError: ``ffmpeg``/``ffprobe`` is not installed.
        FileTooLargeError: Over ``rag.extract.maxVideoBytes``.
        NoTextLayerError: No subtitle track and no vision model to describe the frames.
        ExtractionTimeoutError: Past ``rag.extract.timeoutSeconds``.
        ExtractionError: Not a readable video (a broken container).
    """
    check_size(data, path, options.max_video_bytes, "maxVideoBytes", "video")
    extension, demuxer = _container(path)
    ffprobe = require_program("ffprobe", "Reading videos", _PACKAGE)
    ffmpeg = require_program("ffmpeg", "Reading videos", _PACKAGE)
    deadline = Deadline.after(options.timeout_s)
    # the RAG's vision model describes frames; the dedicated OCR model reads scans only
    frame_ocr = options.ocr.for_frames() if options.ocr is not None else None
    vision = frame_ocr is not None
    with tempfile.TemporaryDirectory(prefix="vancetope-video-") as scratch:
        work = Path(scratch)
        src = work / f"input{extension}"
        src.write_bytes(data)
        reader = _Reader(ffmpeg, demuxer, src, work, deadline, path)
        probe = reader.probe(ffprobe)
        sections: list[Section] = []
        if probe.subtitles:
            text = reader.subtitles()
            if text:
                sections.append(Section(text, "subtitles"))
        frames: list[tuple[float, bytes]] = []
        if vision and probe.video:
            # each frame is one image sent to vision: rag.extract.vision.maxPages bounds it too
            budget = min(options.max_frames, frame_ocr.max_pages if frame_ocr else 0)
            times = frame_times(probe.duration_s or 0.0, budget)
            frames = [(t, png) for t in times if (png := reader.frame(t)) is not None]
    if not vision and not sections:
        raise NoTextLayerError(
            extraction_error(
                path,
                "a video without a subtitle track: its frames need a vision model to be "
                "described — set rag.extract.ocr to vision and rag.extract.vision.model",
            ).message
        )
    described = 0
    if frames and frame_ocr is not None:
        texts = recognize(
            [png for _, png in frames], frame_ocr, path, instruction=FRAME_INSTRUCTION
        )
        described = len(texts)
        for (at, _), text in zip(frames, texts, strict=True):
            if text.strip():
                sections.append(Section(text.strip(), f"frame {clock(at)}"))
    if not sections:
        raise NoTextError(
            extraction_error(
                path, "no subtitles and no frame could be read or described in the video"
            ).message
        )
    return Extraction(tuple(sections), ocr=True, vision_frames=described)


def _container(path: str) -> tuple[str, str]:
    """The file's extension and the demuxer for it (never ffmpeg's guess from the bytes)."""
    suffix = Path(path).suffix.lower()
    for extensions, demuxer in VIDEO_TYPES.values():
        if suffix in extensions:
            return suffix, demuxer
    return ".mp4", "mov"  # by MIME type under another name: read as what most videos are


class _Reader:
    """ffmpeg on one video, within the deadline."""

    def __init__(
        self, ffmpeg: str, demuxer: str, src: Path, work: Path, deadline: Deadline, path: str
    ) -> None:
        self.ffmpeg = ffmpeg
        self.demuxer = demuxer
        self.src = src
        self.work = work
        self.deadline = deadline
        self.path = path

    def _input(self) -> list[str]:
        # the demuxer the extension names and local files only: a playlist or concat list
        # renamed .mp4 cannot make ffmpeg fetch a URL or read another file
        return ["-protocol_whitelist", "file", "-f", self.demuxer]

    def probe(self, ffprobe: str) -> Probe:
        out = self.work / "probe.json"
        result = run_program(
            [
                ffprobe,
                "-v",
                "error",
                *self._input(),
                "-show_entries",
                "format=duration:stream=codec_type,duration",
                "-of",
                "json",
                str(self.src),
            ],
            deadline=self.deadline,
            path=self.path,
            cwd=self.work,
            stdout=out,
        )
        report: Any = None
        if result.returncode == 0 and out.stat().st_size <= MAX_PROBE_BYTES:
            try:
                report = json.loads(out.read_bytes())
            except ValueError:
                report = None
        streams = report.get("streams") if isinstance(report, dict) else None
        if not isinstance(streams, list) or not streams:
            detail = f": {result.stderr[-300:]}" if result.stderr else ""
            raise extraction_error(
                self.path, f"not a readable video (ffprobe found no streams){detail}"
            )
        kinds = [s.get("codec_type") for s in streams if isinstance(s, dict)]
        durations = [_seconds(report.get("format", {}).get("duration"))]
        durations += [_seconds(s.get("duration")) for s in streams if isinstance(s, dict)]
        known = [d for d in durations if d is not None]
        return Probe(max(known) if known else None, "video" in kinds, "subtitle" in kinds)

    def subtitles(self) -> str:
        out = self.work / "subtitles.srt"
        run_program(
            [
                self.ffmpeg,
                "-nostdin",
                "-v",
                "error",
                *self._input(),
                "-i",
                str(self.src),
                "-map",
                "0:s:0",
                "-f",
                "srt",
                "-fs",
                str(MAX_SUBTITLE_BYTES),
                "-y",
                str(out),
            ],
            deadline=self.deadline,
            path=self.path,
            cwd=self.work,
        )
        if not out.is_file():
            return ""
        with out.open("rb") as file:
            raw = file.read(MAX_SUBTITLE_BYTES)
        return srt_text(raw.decode("utf-8", "replace"))

    def frame(self, at: float) -> bytes | None:
        """The PNG of the frame at ``at`` seconds, or None (past the real end, undecodable)."""
        out = self.work / "frame.png"
        out.unlink(missing_ok=True)
        side = MAX_FRAME_SIDE
        run_program(
            [
                self.ffmpeg,
                "-nostdin",
                "-v",
                "error",
                "-ss",
                f"{at:.3f}",
                *self._input(),
                "-i",
                str(self.src),
                "-map",
                "0:v:0",
                "-frames:v",
                "1",
                "-vf",
                f"scale='min({side},iw)':'min({side},ih)':force_original_aspect_ratio=decrease",
                "-f",
                "image2",
                "-c:v",
                "png",
                "-y",
                str(out),
            ],
            deadline=self.deadline,
            path=self.path,
            cwd=self.work,
        )
        return out.read_bytes() if out.is_file() and out.stat().st_size else None


def _seconds(value: object) -> float | None:
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def srt_text(srt: str) -> str:
    """An SRT's cues as lines ``[0:01:05] text``: the numbers and end times dropped."""
    lines: list[str] = []
    stamp = ""
    for raw in srt.splitlines():
        line = raw.strip()
        if not line or (line.isdigit() and not stamp):
            continue
        if _SRT_TIME.match(line):
            start = line.split("-->", 1)[0].strip().replace(",", ".")
            hours, minutes, rest = start.split(":")
            stamp = clock(int(hours) * 3600 + int(minutes) * 60 + float(rest))
            continue
        text = re.sub(r"<[^>]{0,200}>", "", line)  # <i>, <font ...>: markup, not words
        lines.append(f"[{stamp}] {text}" if stamp else text)
        stamp = ""
    return "\n".join(lines)


def register(register: RegisterExtractor) -> None:
    """Register this module's extractor (called by the default plugin's hook)."""
    register(
        tuple(VIDEO_TYPES),
        extract_video,
        extensions=[ext for extensions, _ in VIDEO_TYPES.values() for ext in extensions],
        name="vancetope.video",
        takes_options=("max_frames", "max_video_bytes"),
    )
