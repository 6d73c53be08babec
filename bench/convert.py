#!/usr/bin/env python
"""What reading a legacy Office file through LibreOffice and a video through ffmpeg costs.

Side by side in one run, through an extraction worker (as imports run them), ``--rounds``
times each, alternating, medians in seconds:

1. ``.doc`` / ``.xls`` / ``.ppt`` (LibreOffice converts, then the OOXML reader reads) against
   the DOCX-free successors ``.xlsx`` / ``.pptx`` read directly: the ratio is what the
   conversion adds;
2. a 30 s video's subtitle track, the same with 3 frames described by a loopback vision
   server, and a ten-hour video with 6 frames (the frame budget, whatever the duration).

Needs LibreOffice and ffmpeg (``scripts/ensure-system-packages.sh``) and the ``office`` extra.

    python bench/convert.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _machine import machine_line

import filemakers as fm
from fakes import default_extractors
from media_makers import legacy_office, video
from vancetope_rag.domain.eligibility import guess_mime_type
from vancetope_rag.extraction.registry import ExtractOptions
from vancetope_rag.extraction.sandbox import ExtractionSandbox
from vision_server import serve_vision

REGISTRY = default_extractors()


def timed(sandbox: ExtractionSandbox, data: bytes, name: str, options: ExtractOptions) -> float:
    mime = guess_mime_type(name)
    entry = REGISTRY.find_entry(mime, name)
    assert entry is not None, name
    started = time.perf_counter()
    result = sandbox.run(entry, data, name, mime, options, 1_000_000, timeout_s=300)
    elapsed = time.perf_counter() - started
    assert result.text.strip(), name
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve_vision() as vision:
        work = Path(tmp)
        legacy = legacy_office(work / "office", "Fog horn log", "Rope costs", "Night ferries")
        files = {
            **legacy,
            "budget.xlsx": fm.xlsx({"Intro": [["Budget", 2026]], "Costs": [["Item", "Rope"]]}),
            "deck.pptx": fm.pptx([("Welcome", "Agenda", ""), ("Harbour", "Night ferries", "")]),
        }
        cues = [(1.0, 4.0, "The ferry timetable changes on the first of May")]
        clip = video(work, "clip.mkv", seconds=30, subtitles=cues)
        long = video(work, "long.mkv", seconds=36_000, size="16x16", rate="1/10", subtitles=cues)
        plain = ExtractOptions()
        seeing = ExtractOptions(ocr=vision.config())
        cases = {
            "doc (LibreOffice)": (files["report.doc"], "report.doc", plain),
            "xls (LibreOffice)": (files["budget.xls"], "budget.xls", plain),
            "xlsx (direct)": (files["budget.xlsx"], "budget.xlsx", plain),
            "ppt (LibreOffice)": (files["deck.ppt"], "deck.ppt", plain),
            "pptx (direct)": (files["deck.pptx"], "deck.pptx", plain),
            "video 30 s, subtitles": (clip, "clip.mkv", plain),
            "video 30 s, + 3 frames": (clip, "clip.mkv", seeing),
            "video 10 h, + 6 frames": (long, "long.mkv", seeing),
        }
        sandbox = ExtractionSandbox(1)
        try:
            timed(sandbox, b"warm", "w.txt", plain)  # start the worker outside the timing
            seconds: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, (data, path, options) in cases.items():
                    seconds[name].append(timed(sandbox, data, path, options))
        finally:
            sandbox.close()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    ratios = {
        "xls / xlsx": medians["xls (LibreOffice)"] / medians["xlsx (direct)"],
        "ppt / pptx": medians["ppt (LibreOffice)"] / medians["pptx (direct)"],
        "10 h / 30 s video, with frames": medians["video 10 h, + 6 frames"]
        / medians["video 30 s, + 3 frames"],
    }
    if args.json:
        print(json.dumps({"medians_s": medians, "ratios": ratios, "machine": machine_line()}))
        return
    print(machine_line())
    print(f"rounds: {args.rounds} (median seconds per file, through one extraction worker)")
    for name, value in medians.items():
        print(f"  {name:<26} {value:8.3f} s")
    for name, value in ratios.items():
        print(f"  ratio {name:<28} {value:6.1f}x")


if __name__ == "__main__":
    main()
