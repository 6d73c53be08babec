"""Legacy Office files and videos written by the real programs, for the LibreOffice and ffmpeg
extractor tests: LibreOffice saves a generated HTML page, XLSX and PPTX as ``.doc``, ``.xls`` and
``.ppt``; ffmpeg's ``lavfi`` test sources make videos, with an SRT muxed in as a subtitle track.
Each maker returns the bytes; tests skip (with the Debian package to install) where the
program is missing.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import filemakers as fm

needs_soffice = pytest.mark.skipif(
    shutil.which("soffice") is None,
    reason="LibreOffice is not installed (Debian's libreoffice-writer-nogui, "
    "libreoffice-calc-nogui, libreoffice-impress-nogui)",
)
needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg is not installed (Debian's ffmpeg)",
)

#: The sentence only inside each file :func:`legacy_office` makes (the session's ``legacy``
#: fixture, ``tests/conftest.py``): ``report.doc``, ``budget.xls`` (sheet Costs) and
#: ``deck.ppt`` (slide 2: Harbour).
LEGACY_DOC = "The lighthouse keeper logs the fog horn every eleven minutes"
LEGACY_XLS = "Replacement ropes for the tender cost four hundred euros"
LEGACY_PPT = "Night ferries leave from pier nine after the spring equinox"


#: Legacy files already made in this test session, by their sentences: a LibreOffice start
#: costs seconds, and the unit and the import tests read the same files.
_MADE: dict[tuple[str, str, str], dict[str, bytes]] = {}


def legacy_office(work: Path, doc_text: str, xls_cell: str, ppt_body: str) -> dict[str, bytes]:
    """``report.doc``, ``budget.xls`` and ``deck.ppt``, each holding its sentence: their
    sources are written here and LibreOffice saves them in the 97-2003 formats (the three
    conversions run at once, each with its own profile), once per session."""
    key = (doc_text, xls_cell, ppt_body)
    if key not in _MADE:
        _MADE[key] = _legacy_office(work, doc_text, xls_cell, ppt_body)
    return dict(_MADE[key])


def _legacy_office(work: Path, doc_text: str, xls_cell: str, ppt_body: str) -> dict[str, bytes]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "report.html").write_text(
        f"<html><body><h1>Quarterly report</h1><p>{doc_text}</p></body></html>"
    )
    (work / "budget.xlsx").write_bytes(
        fm.xlsx({"Intro": [["Budget", 2026]], "Costs": [["Item", xls_cell]]})
    )
    (work / "deck.pptx").write_bytes(
        fm.pptx([("Welcome", "Agenda for today", ""), ("Harbour", ppt_body, "")])
    )
    jobs = {"report.html": "doc:MS Word 97", "budget.xlsx": "xls", "deck.pptx": "ppt"}
    running = [
        subprocess.Popen(
            [
                "soffice",
                f"-env:UserInstallation={(work / f'profile-{n}').as_uri()}",
                "--headless",
                "--norestore",
                "--convert-to",
                target,
                "--outdir",
                str(work / "out"),
                str(work / name),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for n, (name, target) in enumerate(jobs.items())
    ]
    for process in running:
        process.wait(120)
    return {
        name: (work / "out" / name).read_bytes()
        for name in ("report.doc", "budget.xls", "deck.ppt")
    }


def srt(cues: list[tuple[float, float, str]]) -> str:
    def stamp(seconds: float) -> str:
        ms = round(seconds * 1000)
        return (
            f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"
        )

    return "".join(
        f"{i}\n{stamp(a)} --> {stamp(b)}\n{text}\n\n" for i, (a, b, text) in enumerate(cues, 1)
    )


def video(
    work: Path,
    name: str,
    *,
    seconds: float,
    subtitles: list[tuple[float, float, str]] | None = None,
    size: str = "160x120",
    rate: str = "1",
    source: str = "testsrc",
) -> bytes:
    """A ``lavfi`` test-source video of ``seconds`` (container by ``name``'s extension), with
    ``subtitles`` muxed in as its subtitle track."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / name
    args = ["ffmpeg", "-v", "error", "-y", "-f", "lavfi"]
    joined = ":" if "=" in source else "="
    args += ["-i", f"{source}{joined}duration={seconds:g}:size={size}:rate={rate}"]
    if subtitles is not None:
        (work / f"{name}.srt").write_text(srt(subtitles))
        args += ["-i", str(work / f"{name}.srt"), "-map", "0:v", "-map", "1:s"]
    suffix = out.suffix
    codec = {".webm": "libvpx", ".mp4": "mpeg4", ".mov": "mpeg4"}.get(suffix, "mpeg4")
    subtitle_codec = {".mp4": "mov_text", ".mov": "mov_text", ".webm": "webvtt"}.get(suffix, "srt")
    args += ["-c:v", codec]
    if subtitles is not None:
        args += ["-c:s", subtitle_codec]
    subprocess.run([*args, str(out)], check=True, timeout=120)
    return out.read_bytes()


def claim_duration(mkv: bytes, seconds: float) -> bytes:
    """The Matroska file with its Segment Info Duration rewritten to ``seconds`` (a crafted
    duration: the container claims far more than it holds)."""
    at = mkv.find(b"\x44\x89\x88")  # Duration element, 8-byte float, in milliseconds
    assert at > 0, "no 8-byte Duration element in the file"
    value = struct.pack(">d", seconds * 1000.0)
    return mkv[: at + 3] + value + mkv[at + 11 :]
