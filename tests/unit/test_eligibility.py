"""Spec §4.1 filter, MIME classification and path-based MIME guessing."""

from __future__ import annotations

import mimetypes

import pytest

from vancetope_rag.domain.eligibility import (
    CODE_MIME_WHITELIST,
    guess_mime_type,
    is_rag_eligible,
    is_textual,
)

MIMES = (
    "text/markdown",
    "application/json",
    "text/x-python",
    "image/png",
    "application/octet-stream",
    None,
)

# override, path, then the expected result for each MIME in MIMES, in that order.
TRUTH_TABLE: list[tuple[bool | None, str, tuple[bool, bool, bool, bool, bool, bool]]] = [
    (None, "documents/notes/a.md", (True, True, True, False, False, False)),
    (None, "_vance/state.md", (False, False, False, False, False, False)),
    (None, "other/a.md", (False, False, False, False, False, False)),
    (None, "documents_old/a.md", (False, False, False, False, False, False)),
    (True, "documents/notes/a.md", (True, True, True, True, True, True)),
    (True, "_vance/state.md", (True, True, True, True, True, True)),
    (True, "other/a.md", (True, True, True, True, True, True)),
    (True, "documents_old/a.md", (True, True, True, True, True, True)),
    (False, "documents/notes/a.md", (False, False, False, False, False, False)),
    (False, "_vance/state.md", (False, False, False, False, False, False)),
    (False, "other/a.md", (False, False, False, False, False, False)),
    (False, "documents_old/a.md", (False, False, False, False, False, False)),
]

CASES = [
    pytest.param(override, path, mime, row[i], id=f"{override}-{path}-{mime}")
    for override, path, row in TRUTH_TABLE
    for i, mime in enumerate(MIMES)
]


def test_truth_table_covers_every_combination() -> None:
    assert len(CASES) == 3 * 4 * 6


@pytest.mark.parametrize(("override", "path", "mime", "expected"), CASES)
def test_is_rag_eligible_truth_table(
    override: bool | None, path: str, mime: str | None, expected: bool
) -> None:
    assert is_rag_eligible(path, mime, override) is expected


@pytest.mark.parametrize(
    "path",
    [
        "_vance/trash/a.md",
        "_chatbox/a.md",
        "_slart/a.md",
        "xdocuments/a.md",
        "documents",
        "Documents/a.md",
        "/documents/a.md",
        "documents_old/x.md",
    ],
)
def test_paths_outside_documents_need_the_override(path: str) -> None:
    assert is_rag_eligible(path, "text/markdown", None) is False
    assert is_rag_eligible(path, "text/markdown", True) is True


@pytest.mark.parametrize(
    ("mime", "expected"),
    [
        ("text/plain", True),
        ("text/plain; charset=utf-8", True),
        ("TEXT/Markdown", True),
        ("  text/csv ; charset=latin-1", True),
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/yaml", True),
        ("application/x-ipynb+json", True),
        ("application/vnd.api+json", True),
        ("application/atom+xml", True),
        ("application/xhtml+xml", True),
        ("image/svg+xml", True),
        ("application/typescript", True),
        ("application/x-sh", True),
        ("application/sql", True),
        ("image/png", False),
        ("application/pdf", False),
        ("application/octet-stream", False),
        ("application/zip", False),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", False),
        ("application/jsonx", False),
        ("text", False),
        ("text/", False),
        ("/json", False),
        ("", False),
        (None, False),
    ],
)
def test_is_textual(mime: str | None, expected: bool) -> None:
    assert is_textual(mime) is expected


def test_whitelist_is_frozen_and_textual() -> None:
    assert isinstance(CODE_MIME_WHITELIST, frozenset)
    assert "application/json" in CODE_MIME_WHITELIST
    assert all(is_textual(mime) for mime in CODE_MIME_WHITELIST)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("documents/a.md", "text/markdown"),
        ("A.MD", "text/markdown"),
        ("x.py", "text/x-python"),
        ("x.ts", "application/typescript"),
        ("x.tsx", "application/typescript"),
        ("x.yaml", "application/yaml"),
        ("x.yml", "application/yaml"),
        ("x.toml", "application/toml"),
        ("x.rs", "text/x-rust"),
        ("x.go", "text/x-go"),
        ("x.java", "text/x-java"),
        ("x.kt", "text/x-kotlin"),
        ("x.sh", "application/x-sh"),
        ("x.sql", "application/sql"),
        ("x.ipynb", "application/x-ipynb+json"),
        ("x.jsonl", "application/x-ndjson"),
        ("x.json", "application/json"),
        ("x.csv", "text/csv"),
        ("x.rst", "text/x-rst"),
        ("x.txt", "text/plain"),
        ("x.html", "text/html"),
        ("x.c", "text/x-c"),
        ("x.pdf", "application/pdf"),
        ("x.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
        ("x.png", "image/png"),
        ("a/b.c/Makefile", "text/x-makefile"),
        ("dir\\sub\\x.md", "text/markdown"),
        ("x.unknownext", "application/octet-stream"),
        ("noextension", "application/octet-stream"),
        (".bashrc", "application/octet-stream"),
        ("", "application/octet-stream"),
        ("archive.tar.gz", "application/gzip"),
        ("data:x.md", "text/markdown"),
        ("q?.md", "text/markdown"),
    ],
)
def test_guess_mime_type(path: str, expected: str) -> None:
    assert guess_mime_type(path) == expected


def test_stdlib_fallback_for_extensions_outside_the_table() -> None:
    assert guess_mime_type("clip.mp4") == "video/mp4"
    assert guess_mime_type("song.mp3") == "audio/mpeg"


def test_guess_ignores_the_host_mime_database(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hosts map .ts to video/mp2t; a host db must never change our answers.
    monkeypatch.setattr(mimetypes, "guess_type", lambda *a, **k: ("video/mp2t", None))
    assert guess_mime_type("x.ts") == "application/typescript"
    assert guess_mime_type("x.md") == "text/markdown"
    assert guess_mime_type("x.unknownext") == "application/octet-stream"
