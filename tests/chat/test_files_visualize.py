"""``files_visualize``: a bounded, text-first reading of one file, as a tool and on the CLI.

Every file is written here (``filemakers``); the store is the real SQLite one, extraction runs
in the real worker processes, and vision goes to a loopback chat-completions server
(``vision_server``) that counts the images it is shown, so "no model call" is observed, not
assumed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import filemakers as fm
import hostile_extractors
from bridge_vision_server import KEY, MODEL, SEEN, VisionServer, vision_server
from fakes import P, T
from media_makers import LEGACY_DOC, LEGACY_PPT, LEGACY_XLS, needs_ffmpeg, needs_soffice, video
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.errors import ExtractorDependencyMissingError
from vancetope_rag.extraction.sandbox import ExtractionSandbox
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.services.importer import ImportSource

#: Per file: its bytes and the sentence that is only inside it.
TEXT_TYPES: dict[str, tuple[bytes, str]] = {
    "notes/plan.md": (b"# Plan\n\nThe ferry leaves from pier nine at dawn.\n", "ferry leaves"),
    "src/app.py": (b"def f():\n    return 'the owl counts backwards'\n", "owl counts"),
    "data/t.csv": (b"name,fact\nmoth,the moth prefers linen\n", "moth prefers linen"),
    "data/t.tsv": (b"name\tfact\nnewt\tthe newt hums quietly\n", "newt hums"),
    "data/c.json": (b'{"fact": "the heron waits by the weir"}', "heron waits"),
    "data/c.yaml": (b"fact: the badger digs at midnight\n", "badger digs"),
    "data/c.xml": (b"<r><fact>the otter keeps a diary</fact></r>", "otter keeps a diary"),
    "web/p.html": (
        b"<html><body><p>The kestrel hovers over the car park.</p></body></html>",
        "kestrel hovers",
    ),
    "subs/a.srt": (b"1\n00:00:01,000 --> 00:00:02,000\nThe lamp is lit at six.\n", "lamp is lit"),
    "subs/a.vtt": (
        b"WEBVTT\n\n00:01.000 --> 00:02.000\nThe bell rings twice.\n",
        "bell rings twice",
    ),
    "papers/x.tex": (
        b"\\documentclass{article}\\begin{document}\\section{Intro}The comet returns in spring."
        b"\\end{document}",
        "comet returns",
    ),
    "art/d.svg": (
        b'<svg xmlns="http://www.w3.org/2000/svg"><text>The fox sleeps below</text></svg>',
        "fox sleeps",
    ),
    "art/d.drawio": (
        b'<mxfile><diagram><mxCell value="The pump feeds tank seven"/></diagram></mxfile>',
        "pump feeds tank seven",
    ),
    "books/q.xlsx": (
        fm.xlsx({"Intro": [["x"]], "Facts": [["The ledger closes on Fridays"]]}),
        "ledger closes",
    ),
    "books/q.ods": (fm.ods({"Facts": ["The quarry floods every April"]}), "quarry floods"),
    "docs/m.docx": (fm.docx(["Minutes.", "The choir rehearses on Tuesdays"]), "choir rehearses"),
    "decks/r.pptx": (
        fm.pptx([("Welcome", "Agenda", ""), ("Roadmap", "The tram line opens in June", "")]),
        "tram line opens",
    ),
    "nb/a.ipynb": (
        json.dumps(
            {
                "cells": [
                    {"cell_type": "markdown", "source": ["The glacier retreats yearly"]},
                    {"cell_type": "code", "source": ["speed = 'the snail sprints'"], "outputs": []},
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ).encode(),
        "glacier retreats",
    ),
}


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with vision_server() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspaces" / T / P
    root.mkdir(parents=True)
    return root


@pytest.fixture
def app(make_app: Any, tmp_path: Path, workspace: Path) -> RagApp:
    app: RagApp = make_app(config={"workspaces_dir": str(tmp_path / "workspaces")})
    app.bring(T, P)
    return app


def write(root: Path, rel: str, data: bytes) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def use_vision(app: RagApp, server: VisionServer, tenant: str = T) -> None:
    app.settings.set(tenant, None, "rag.extract.ocr", "vision")
    app.settings.set(tenant, None, "rag.extract.vision.model", MODEL)
    app.settings.set(tenant, None, "rag.extract.vision.baseUrl", server.url)
    app.settings.set(tenant, None, "rag.extract.vision.apiKey", KEY)


def visualize(app: RagApp, **kwargs: Any) -> tuple[bool, dict[str, Any]]:
    """(whether the call failed, its JSON), through the FunctionTool a model calls."""
    tool = next(t for t in app.tools(T, P) if t.metadata.name == "files_visualize")
    output = tool.call(**kwargs)
    return bool(output.is_error), json.loads(output.content)


def ok(app: RagApp, **kwargs: Any) -> dict[str, Any]:
    failed, body = visualize(app, **kwargs)
    assert not failed, body
    return body


def text_of(body: dict[str, Any]) -> str:
    return "".join(s["text"] for s in body["sections"])


# -- text first: every type comes back, no model call -----------------------------------------


def test_every_text_type_is_read_locally_with_no_model_call(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)  # configured, and still never called
    for rel, (data, _) in TEXT_TYPES.items():
        write(workspace, rel, data)
    for rel, (_, sentence) in TEXT_TYPES.items():
        body = ok(app, filePath=rel)
        assert sentence in text_of(body), rel
        assert body["vision"]["used"] is False and body["truncated"] is False
        assert body["limits"]["maxChars"] == 40_000
    assert vision.calls == 0
    sheets = ok(app, filePath="books/q.xlsx")
    assert [s["title"] for s in sheets["sections"]] == ["sheet Intro", "sheet Facts"]
    slides = ok(app, filePath="decks/r.pptx", pages="2")
    assert [s["title"] for s in slides["sections"]] == ["slide 2: Roadmap"]


def test_pdf_pages_with_a_text_layer_are_read_up_to_the_char_budget(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)
    write(
        workspace, "long.pdf", fm.text_pdf([f"Page {n} says the tide turns" for n in range(1, 11)])
    )
    body = ok(app, filePath="long.pdf")
    assert [s["title"] for s in body["sections"]] == [f"page {n}" for n in range(1, 11)]
    assert vision.calls == 0  # ten pages, far over visionMaxPages: the cap is for vision only
    assert ok(app, filePath="long.pdf", pages="4-5")["sections"][0]["title"] == "page 4"


# -- vision: only where there is no text layer, or when asked; bounded; cached -----------------


def test_a_scan_goes_to_the_vision_model_bounded_and_continued_by_page_range(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)
    write(workspace, "scan.pdf", fm.scanned_pdf("ONE", "TWO", "THREE", "FOUR", "FIVE"))
    body = ok(app, filePath="scan.pdf")
    assert vision.calls == 2 and body["vision"]["pages"] == [1, 2]
    assert SEEN in text_of(body) and body["truncated"] is True
    assert "rag.bridge.visionMaxPages" in body["truncatedReason"]
    assert body["next"] == {"pages": "3-4"}
    more = ok(app, filePath="scan.pdf", pages="3-4")
    assert vision.calls == 4 and more["vision"]["pages"] == [3, 4]
    assert [s["title"] for s in more["sections"]] == ["page 3", "page 4"]
    assert more["next"] == {"pages": "5-6"}
    assert vision.auth == {f"Bearer {KEY}"}


def test_a_second_call_pays_no_vision_call(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)
    write(workspace, "photo.png", fm.text_image("HARBOUR"))
    first = ok(app, filePath="photo.png")
    assert vision.calls == 1 and first["cached"] is False
    again = ok(app, filePath="photo.png")
    assert vision.calls == 1 and again["cached"] is True
    assert text_of(again) == text_of(first)
    # another model is another configuration: read again
    app.settings.set(T, None, "rag.extract.vision.model", "vision-max")
    assert ok(app, filePath="photo.png")["cached"] is False and vision.calls == 2


def test_vision_true_looks_at_pages_that_have_text(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)
    write(workspace, "chart.pdf", fm.text_pdf(["Revenue chart", "Cost chart", "Appendix"]))
    body = ok(app, filePath="chart.pdf", vision=True)
    assert vision.calls == 2 and body["vision"]["pages"] == [1, 2]
    assert "Revenue chart" in text_of(body) and SEEN in text_of(body)


# -- budgets and hard caps ---------------------------------------------------------------------


def test_max_chars_truncates_and_the_offset_continues(app: RagApp, workspace: Path) -> None:
    text = "".join(f"line {n:06d} of the long log\n" for n in range(5000))  # 130,000 chars
    write(workspace, "big.log", text.encode())
    first = ok(app, filePath="big.log")
    assert first["chars"] == 40_000 and first["truncated"] and first["next"] == {"offset": 40_000}
    assert "offset 40000" in first["truncatedReason"]
    pieces = [text_of(first)]
    follow = first["next"]
    while follow:
        body = ok(app, filePath="big.log", offset=follow["offset"])
        pieces.append(text_of(body))
        follow = body["next"]
    assert "".join(pieces) == text and body["truncated"] is False
    failed, bad = visualize(app, filePath="big.log", offset=len(text) + 5)
    assert failed and "offset" in bad["error"]


def test_budgets_come_from_settings_then_environment_and_are_hard_capped(
    make_app: Any, tmp_path: Path, workspace: Path, vision: VisionServer
) -> None:
    app: RagApp = make_app(
        config={
            "workspaces_dir": str(tmp_path / "workspaces"),
            "bridge_max_chars": 50,
            "bridge_vision_max_pages": 40,
            "bridge_max_frames": 3,
        }
    )
    app.bring(T, P)
    use_vision(app, vision)
    write(workspace, "a.txt", b"x" * 500)
    limits = ok(app, filePath="a.txt")["limits"]
    assert (limits["maxChars"], limits["visionMaxPages"], limits["maxFrames"]) == (50, 6, 3)
    assert limits["sources"]["rag.bridge.maxChars"] == "environment"
    assert limits["capped"] == {"rag.bridge.visionMaxPages": {"asked": 40}}
    app.settings.set(T, None, "rag.bridge.maxChars", 500_000)
    app.settings.set(T, P, "rag.bridge.maxFrames", 99)
    limits = ok(app, filePath="a.txt")["limits"]
    assert limits["maxChars"] == 120_000 and limits["sources"]["rag.bridge.maxChars"] == "tenant"
    assert limits["maxFrames"] == 12 and limits["sources"]["rag.bridge.maxFrames"] == "project"
    write(workspace, "scan.pdf", fm.scanned_pdf(*[f"PAGE {n}" for n in range(8)]))
    body = ok(app, filePath="scan.pdf")
    assert vision.calls == 6 and body["next"] == {"pages": "7-12"}  # the hard cap of 6 pages


def test_indexing_keeps_its_own_budgets(app: RagApp, vision: VisionServer) -> None:
    use_vision(app, vision)
    app.settings.set(T, None, "rag.bridge.visionMaxPages", 1)
    pdf = fm.scanned_pdf("ONE", "TWO", "THREE")
    app.importer.import_sources(T, P, [ImportSource("scan.pdf", data=pdf)])
    assert vision.calls == 3  # rag.extract.vision.maxPages (50), not the tool's 1


# -- named errors, never an empty result --------------------------------------------------------


def test_a_scan_without_vision_names_the_missing_sidecar(app: RagApp, workspace: Path) -> None:
    write(workspace, "scan.pdf", fm.scanned_pdf("ONE"))
    failed, body = visualize(app, filePath="scan.pdf")
    assert failed and body["code"] == "MM_BRIDGE_VISION_NOT_CONFIGURED"
    assert body["cause"] == "EXTRACT_NO_TEXT_LAYER" and "rag.extract.vision.model" in body["error"]
    write(workspace, "a.md", b"# words")
    failed, body = visualize(app, filePath="a.md", vision=True)
    assert failed and body["code"] == "MM_BRIDGE_VISION_NOT_CONFIGURED"


def _missing_reader(data: bytes, path: str) -> str:
    raise ExtractorDependencyMissingError("reading .blend scenes", "blender")


class _BlendPlugin:
    @hookimpl
    def register_extractors(self, register: Any) -> None:
        register(("model/x-blend",), _missing_reader, extensions=(".blend",), isolated=False)


class _HangPlugin:
    @hookimpl
    def register_extractors(self, register: Any) -> None:
        register(("application/x-hang",), hostile_extractors.hang, extensions=(".hang",))


def test_a_missing_dependency_is_named_with_what_to_install(
    make_app: Any, tmp_path: Path, workspace: Path
) -> None:
    pm = get_plugin_manager()
    pm.register(_BlendPlugin())  # a plugin's type is served as the built-in ones are
    app: RagApp = make_app(config={"workspaces_dir": str(tmp_path / "workspaces")}, plugins=pm)
    app.bring(T, P)
    write(workspace, "scene.blend", b"BLENDER-v300")
    failed, body = visualize(app, filePath="scene.blend")
    assert failed and body["code"] == "MM_BRIDGE_DEPENDENCY_MISSING"
    assert body["cause"] == "EXTRACT_DEPENDENCY_MISSING"
    assert "pip install 'vancetope-rag[blender]'" in body["error"]


@pytest.mark.parametrize(
    ("rel", "data", "code", "cause"),
    [
        (
            "a.zip",
            b"PK\x03\x04" + b"\x00" * 40,
            "MM_BRIDGE_UNSUPPORTED_TYPE",
            "EXTRACT_UNSUPPORTED_TYPE",
        ),
        ("empty.md", b"", "MM_BRIDGE_UNREADABLE", "EXTRACT_NO_TEXT"),
        ("broken.pdf", b"%PDF-1.4 not really", "MM_BRIDGE_UNREADABLE", "EXTRACTION_FAILED"),
    ],
)
def test_unreadable_files_are_named_errors(
    app: RagApp, workspace: Path, rel: str, data: bytes, code: str, cause: str
) -> None:
    write(workspace, rel, data)
    failed, body = visualize(app, filePath=rel)
    assert failed and (body["code"], body["cause"]) == (code, cause)
    assert body["error"]


def test_a_file_over_the_limits_is_a_named_error(
    make_app: Any, tmp_path: Path, workspace: Path
) -> None:
    pm = get_plugin_manager()
    pm.register(_HangPlugin())
    app: RagApp = make_app(config={"workspaces_dir": str(tmp_path / "workspaces")}, plugins=pm)
    app.bring(T, P)
    app.settings.set(T, None, "rag.extract.timeoutSeconds", 0.5)
    write(workspace, "loop.hang", b"forever")
    failed, body = visualize(app, filePath="loop.hang")
    assert failed and (body["code"], body["cause"]) == ("MM_BRIDGE_LIMIT", "EXTRACT_TIMEOUT")
    write(workspace, "huge.txt", b"x" * (20 * 1024 * 1024 + 1))
    failed, body = visualize(app, filePath="huge.txt")
    assert failed and (body["code"], body["cause"]) == ("MM_BRIDGE_LIMIT", "EXTRACT_TOO_LARGE")


def test_a_vision_outage_is_named_then_refused_without_a_call(
    app: RagApp, workspace: Path, vision: VisionServer, caplog: pytest.LogCaptureFixture
) -> None:
    use_vision(app, vision)
    vision.status = 503
    write(workspace, "photo.png", fm.text_image("HARBOUR"))
    caplog.set_level(logging.DEBUG)
    failed, body = visualize(app, filePath="photo.png")
    assert failed and body["code"] == "MM_BRIDGE_VISION_UNAVAILABLE"
    failed, again = visualize(app, filePath="photo.png")  # the circuit is open: no request
    assert failed and again["code"] == "MM_BRIDGE_VISION_UNAVAILABLE"
    assert vision.calls == 0
    vision.status = 401
    later = time.monotonic() + 3600  # the circuit's wait is over: the next call is its trial
    app.rags.circuits.clock = lambda: later
    failed, refused = visualize(app, filePath="photo.png")
    assert failed
    shown = json.dumps([body, again, refused]) + caplog.text
    assert KEY not in shown  # the server echoed the key: it never reaches a result or a log


# -- refusals -----------------------------------------------------------------------------------


def test_dotfiles_dot_directories_and_runtime_state_are_refused(
    make_app: Any, tmp_path: Path, workspace: Path
) -> None:
    # the store lives inside the workspace: its file, journals and cache are not readable
    store_app: RagApp = make_app(
        config={
            "workspaces_dir": str(tmp_path / "workspaces"),
            "store": f"sqlite:///{workspace}/rag.db",
        }
    )
    store_app.bring(T, P)
    write(workspace, ".env", b"SECRET=1")
    write(workspace, ".git/config", b"[core]")
    write(workspace, "fine.md", b"fine words")
    ok(store_app, filePath="fine.md")  # writes the cache beside the store
    os.symlink(workspace / "rag.db", workspace / "innocent.txt")
    refused = [".env", ".git/config", "a/../.env", "rag.db", "rag.db-wal", "innocent.txt"]
    refused += [
        f"rag.db.bridge/{p.parent.name}/{p.name}"
        for p in (workspace / "rag.db.bridge").rglob("*.json")
    ]
    assert len(refused) == 7
    for rel in refused:
        failed, body = visualize(store_app, filePath=rel)
        assert failed and body["code"] == "PATH_NOT_ALLOWED", rel


def test_a_document_id_returns_its_stored_sections_with_no_model_call(
    app: RagApp, vision: VisionServer
) -> None:
    use_vision(app, vision)
    book = fm.xlsx({"Summary": [["Q3"]], "Maintenance": [["Oil is replaced every 900 hours"]]})
    app.importer.import_sources(T, P, [ImportSource("q3.xlsx", data=book)])
    doc = app.documents.get_by_path(T, P, "documents/q3.xlsx")
    assert doc is not None
    body = ok(app, documentId=doc.id)
    assert body["source"] == "document" and body["path"] == "documents/q3.xlsx"
    assert [s["title"] for s in body["sections"]] == ["sheet Summary", "sheet Maintenance"]
    assert "900 hours" in ok(app, documentId=doc.id, pages="2")["sections"][0]["text"]
    assert vision.calls == 0
    # another tenant's project never sees it
    other = app.tools("t2", P)
    tool = next(t for t in other if t.metadata.name == "files_visualize")
    out = tool.call(documentId=doc.id)
    assert out.is_error and json.loads(out.content)["code"] == "DOCUMENT_NOT_FOUND"


def test_arguments_are_checked(app: RagApp, workspace: Path) -> None:
    write(workspace, "a.md", b"words")
    for kwargs in (
        {},
        {"filePath": "a.md", "documentId": "x"},
        {"filePath": "a.md", "pages": "4-2"},
    ):
        failed, body = visualize(app, **kwargs)
        assert failed and body["code"] in ("INVALID_INPUT", "INVALID_ARGUMENT"), kwargs


# -- legacy Office and video, through the tool ------------------------------------------------

SUBTITLE = "The night tram to the harbour is cancelled on Sundays"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A 200 s video with a subtitle track: room for 20 frames at one per 10 s, more than the
    hard cap allows."""
    if os.system("command -v ffmpeg >/dev/null 2>&1") != 0:
        pytest.skip("ffmpeg is not installed (Debian's ffmpeg)")
    return video(
        tmp_path_factory.mktemp("clip"),
        "harbour.mkv",
        seconds=200,
        size="64x48",
        subtitles=[(2.0, 6.0, SUBTITLE)],
    )


def test_legacy_office_files_come_back_through_the_tool(
    app: RagApp, workspace: Path, legacy: dict[str, bytes], vision: VisionServer
) -> None:
    use_vision(app, vision)  # configured: text is still read with no model call
    for name, data in legacy.items():
        write(workspace, f"office/{name}", data)
    expected = {
        "office/report.doc": (LEGACY_DOC, None),
        "office/budget.xls": (LEGACY_XLS, "sheet Costs"),
        "office/deck.ppt": (LEGACY_PPT, "slide 2: Harbour"),
    }
    for rel, (sentence, title) in expected.items():
        body = ok(app, filePath=rel)
        [section] = [s for s in body["sections"] if sentence in s["text"]]
        assert section["title"] == title, rel
        assert body["vision"]["used"] is False
    assert vision.calls == 0


@needs_soffice
def test_vision_true_shows_a_presentations_slides_within_the_page_budget(
    app: RagApp, workspace: Path, legacy: dict[str, bytes], vision: VisionServer
) -> None:
    use_vision(app, vision)
    deck = fm.pptx([(f"Slide {n}", f"The buoy {n} is painted red", "") for n in range(1, 9)])
    write(workspace, "decks/buoys.pptx", deck)
    body = ok(app, filePath="decks/buoys.pptx", vision=True)
    assert vision.calls == 2 and body["vision"]["used"] is True
    assert body["vision"]["pages"] == [1, 2]
    looked = [s["title"] for s in body["sections"] if SEEN in s["text"]]
    assert looked == ["slide 1: Slide 1", "slide 2: Slide 2"]
    assert "The buoy 8 is painted red" in text_of(body)  # every slide's own text still there
    assert "rag.bridge.visionMaxPages" in body["truncatedReason"]
    app.settings.set(T, None, "rag.bridge.visionMaxPages", 40)  # asked 40: the hard cap is 6
    assert ok(app, filePath="decks/buoys.pptx", vision=True)["vision"]["pages"] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    assert vision.calls == 2 + 6
    write(workspace, "office/deck.ppt", legacy["deck.ppt"])  # two slides, through PPTX
    old = ok(app, filePath="office/deck.ppt", vision=True)
    assert old["vision"]["pages"] == [1, 2] and vision.calls == 8 + 2
    assert LEGACY_PPT in text_of(old) and SEEN in text_of(old)


@needs_ffmpeg
def test_a_video_subtitle_track_comes_back_as_text(
    app: RagApp, workspace: Path, clip: bytes
) -> None:
    write(workspace, "clips/harbour.mkv", clip)
    body = ok(app, filePath="clips/harbour.mkv")  # no vision model: subtitles only
    assert [s["title"] for s in body["sections"]] == ["subtitles"]
    assert SUBTITLE in text_of(body)
    assert body["vision"]["used"] is False and body["vision"]["frames"] == 0


@needs_ffmpeg
def test_video_frames_follow_max_frames_up_to_its_hard_cap(
    app: RagApp, workspace: Path, clip: bytes, vision: VisionServer
) -> None:
    use_vision(app, vision)
    write(workspace, "clips/harbour.mkv", clip)
    body = ok(app, filePath="clips/harbour.mkv")  # vision configured: frames are described
    frames = [s for s in body["sections"] if s["title"].startswith("frame ")]
    assert vision.calls == 6 and len(frames) == 6 and body["limits"]["maxFrames"] == 6
    assert body["vision"]["used"] is True and body["vision"]["frames"] == 6
    assert SUBTITLE in text_of(body) and SEEN in text_of(body)
    assert body["limits"]["visionMaxPages"] == 2  # the page budget does not bound frames
    assert ok(app, filePath="clips/harbour.mkv")["cached"] is True and vision.calls == 6
    app.settings.set(T, P, "rag.bridge.maxFrames", 99)  # 20 frames asked: 12 described
    capped = ok(app, filePath="clips/harbour.mkv")
    assert capped["limits"]["maxFrames"] == 12
    assert capped["limits"]["capped"] == {"rag.bridge.maxFrames": {"asked": 99}}
    assert vision.calls == 6 + 12 and capped["vision"]["frames"] == 12


@needs_ffmpeg
def test_video_frames_go_to_the_vision_model_and_scans_to_the_ocr_model(
    app: RagApp, workspace: Path, clip: bytes, vision: VisionServer
) -> None:
    """The dedicated OCR model reads receipts and scans only (second specification): a
    video's frames are described by the RAG's vision model, and the answer names it."""
    use_vision(app, vision)
    app.settings.set(T, None, "rag.extract.vision.ocrModel", "ocr-scans")
    write(workspace, "clips/harbour.mkv", clip)
    body = ok(app, filePath="clips/harbour.mkv")
    assert body["vision"]["frames"] == 6 and body["vision"]["model"] == MODEL
    assert set(vision.models) == {MODEL}
    write(workspace, "scan.pdf", fm.scanned_pdf("ONE"))
    scan = ok(app, filePath="scan.pdf")
    assert scan["vision"]["model"] == "ocr-scans" and vision.models[-1] == "ocr-scans"


def _without(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, app: RagApp) -> ExtractionSandbox:
    """No program on the PATH of this process and of a sandbox whose workers start now."""
    (tmp_path / "empty-bin").mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    sandbox = ExtractionSandbox(1)
    app.extraction._sandbox = sandbox
    return sandbox


@pytest.mark.parametrize(
    ("rel", "package"),
    [
        pytest.param("office/report.doc", "libreoffice-writer-nogui", marks=needs_soffice),
        pytest.param("clips/harbour.mkv", "ffmpeg", marks=needs_ffmpeg),
        ("scan.pdf", "tesseract-ocr"),
    ],
)
def test_a_missing_program_is_named_with_its_package(
    app: RagApp,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    rel: str,
    package: str,
) -> None:
    made = {
        "office/report.doc": lambda: request.getfixturevalue("legacy")["report.doc"],
        "clips/harbour.mkv": lambda: request.getfixturevalue("clip"),
        "scan.pdf": lambda: fm.scanned_pdf("GLACIER SURVEY"),
    }
    write(workspace, rel, made[rel]())
    app.settings.set(T, None, "rag.extract.ocr", "tesseract")
    sandbox = _without(monkeypatch, tmp_path, app)
    try:
        failed, body = visualize(app, filePath=rel)
    finally:
        sandbox.close()
    assert failed and body["code"] == "MM_BRIDGE_DEPENDENCY_MISSING", body
    assert body["cause"] == "EXTRACT_PROGRAM_MISSING"
    assert f"apt-get install {package}" in body["error"]


def test_an_unreachable_vision_model_is_not_a_missing_dependency(
    app: RagApp, workspace: Path, vision: VisionServer
) -> None:
    use_vision(app, vision)
    app.settings.set(T, None, "rag.extract.vision.baseUrl", "http://127.0.0.1:9/v1")
    write(workspace, "photo.png", fm.text_image("HARBOUR"))
    failed, body = visualize(app, filePath="photo.png")
    assert failed and body["code"] == "MM_BRIDGE_VISION_UNAVAILABLE", body


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_files_visualize(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "n.md").write_text("The canal freezes in January.\n" * 3000)
    (tmp_path / "ws" / "scan.pdf").write_bytes(fm.scanned_pdf("ONE"))
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path}/rag.db", "--tenant", T, "--project", P]
    ws = ["--workspace", str(tmp_path / "ws")]
    result = runner.invoke(cli, [*base, "files", "visualize", "--file-path", "n.md", *ws, "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["next"] == {"offset": 40_000} and "canal freezes" in body["sections"][0]["text"]
    result = runner.invoke(
        cli, [*base, "files", "visualize", "--file-path", "n.md", *ws, "--offset", "89000"]
    )
    assert result.exit_code == 0 and "canal" in result.stdout
    result = runner.invoke(cli, [*base, "files", "visualize", "--file-path", "scan.pdf", *ws])
    assert result.exit_code == 1 and "MM_BRIDGE_VISION_NOT_CONFIGURED" in result.stderr
    result = runner.invoke(cli, [*base, "files", "visualize", *ws])
    assert result.exit_code == 2
