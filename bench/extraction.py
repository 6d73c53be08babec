#!/usr/bin/env python
"""What isolating extraction costs, and what an unchanged re-import costs.

Side by side in one run, on the same generated files (Markdown, DOCX-free office files: XLSX,
PPTX, ODT, EPUB, text PDFs), on fresh SQLite stores:

1. import them with every extraction in the worker process (the default) and in the calling
   process (``isolate=False``: no time limit), ``--rounds`` times each, alternating; median
   seconds per file and the ratio;
2. re-import the unchanged folder (no extractor runs: hashes and fingerprints match) and
   compare with the first import;
3. import each hostile file of the tests alone (zip bombs, a 10,000-page PDF, a looping page
   tree, 1 million nested tags, an encrypted PDF) and time it, with its outcome.

Needs the ``office`` and ``pdf`` extras (``make setup`` installs them).

    python bench/extraction.py [--files 200] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _machine import machine_line

import filemakers as fm
from vancetope_rag import EngineConfig, RagApp
from vancetope_rag.services.importer import ImportSource

T, P = "bench", "files"


def make_files(root: Path, n: int) -> None:
    makers = [
        ("md", lambda i: f"# Note {i}\n\nThe pump in bay {i} is serviced monthly.".encode()),
        ("xlsx", lambda i: fm.xlsx({"Log": [["bay", i], ["pump", "monthly"]] * 20})),
        ("pptx", lambda i: fm.pptx([("Bay", f"Pump {i}", "notes"), ("Plan", "monthly", "")])),
        ("odt", lambda i: fm.odt([f"Pump {i} is serviced monthly."] * 10)),
        ("epub", lambda i: fm.epub([("One", f"Pump {i}"), ("Two", "monthly service")])),
        ("pdf", lambda i: fm.text_pdf([f"Pump {i} page one", "page two"])),
    ]
    for i in range(n):
        ext, make = makers[i % len(makers)]
        (root / f"f{i:05d}.{ext}").write_bytes(make(i))


def import_once(root: Path, isolate: bool) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        app = RagApp.open(EngineConfig(store=f"sqlite:///{tmp}/rag.db"))
        try:
            app.extraction.isolate = isolate
            app.bring(T, P)
            started = time.perf_counter()
            first = app.importer.import_directory(T, P, root)
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            again = app.importer.import_directory(T, P, root)
            again_s = time.perf_counter() - started
            assert first.failed == 0, first.failed_files[:3]
            assert again.unchanged == first.created
            return first_s, again_s, first.created
        finally:
            app.close()


def hostile() -> dict[str, tuple[float, str]]:
    """Seconds and outcome of importing each hostile file alone (the tests' files)."""
    files = {
        "bomb.docx": fm.zip_bomb("word/document.xml"),
        "bomb.xlsx": fm.zip_bomb("xl/worksheets/sheet1.xml"),
        "huge.pdf (10,000 pages)": fm.many_pages_pdf(10_000),
        "loop.pdf": fm.looping_pdf(),
        "nested.html (1M tags)": fm.nested_html(1_000_000),
        "locked.pdf": fm.encrypted_pdf("secret"),
    }
    out: dict[str, tuple[float, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        app = RagApp.open(EngineConfig(store=f"sqlite:///{tmp}/rag.db"))
        try:
            app.bring(T, P)
            app.importer.import_sources(T, P, [ImportSource("warm.pdf", data=fm.text_pdf(["x"]))])
            for name, data in files.items():
                path = name.split(" ")[0]
                started = time.perf_counter()
                summary = app.importer.import_sources(T, P, [ImportSource(path, data=data)])
                took = time.perf_counter() - started
                if summary.failed_files:
                    outcome = "failed: " + summary.failed_files[0].reason.split(": ", 1)[-1]
                elif summary.truncated_files:
                    outcome = "truncated: " + summary.truncated_files[0].reason
                else:
                    outcome = "imported"
                out[name] = (round(took, 2), outcome[:90])
        finally:
            app.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_files(root, args.files)
        import_once(root, True)  # start the worker processes and warm the imports
        runs: dict[str, list[tuple[float, float, int]]] = {"worker": [], "in-process": []}
        for _ in range(args.rounds):
            runs["worker"].append(import_once(root, True))
            runs["in-process"].append(import_once(root, False))
    result: dict[str, Any] = {"files": args.files, "rounds": args.rounds}
    for name, rows in runs.items():
        first = statistics.median(r[0] for r in rows)
        again = statistics.median(r[1] for r in rows)
        result[name] = {
            "import_s": round(first, 3),
            "ms_per_file": round(1000 * first / args.files, 2),
            "reimport_s": round(again, 3),
            "reimport_speedup": round(first / again, 1),
        }
    result["worker_vs_in_process"] = round(
        result["worker"]["import_s"] / result["in-process"]["import_s"], 2
    )
    result["hostile"] = hostile()
    result["machine"] = machine_line()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name in ("worker", "in-process"):
        r = result[name]
        print(
            f"{name:>10}: import {r['import_s']:.2f} s ({r['ms_per_file']:.1f} ms/file), "
            f"unchanged re-import {r['reimport_s']:.2f} s ({r['reimport_speedup']}x faster)"
        )
    print(f"worker / in-process: {result['worker_vs_in_process']}x")
    for name, (took, outcome) in result["hostile"].items():
        print(f"hostile {name:<26} {took:6.2f} s  {outcome}")
    print(result["machine"])


if __name__ == "__main__":
    main()
