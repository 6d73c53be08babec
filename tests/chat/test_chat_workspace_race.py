"""The path jail under a race: a directory swapped for a symlink (and back) while files are read.

Regression: the jail resolved the path with ``realpath()`` and opened it
afterwards, so a directory swapped for a symlink in between let the read leave the workspace
(about 1 escape in 150 tries), and the vanishing directory surfaced as an uncaught
``FileNotFoundError`` ("internal error"). Each test swaps for about two seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.errors import DocumentNotFoundError, PathNotAllowedError
from vancetope_rag.services.workspace import read_workspace_file

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks")

SECRET_MARKER = "OUTSIDE-SECRET-4b1d-race"
INSIDE_TEXT = "Inside notes about the zebra migration schedule."
SWAP_SECONDS = 2.0

AppFactory = Callable[..., RagApp]


def _swap(root: Path, stop: threading.Event) -> None:
    """Make ``root/d`` a real directory, then a symlink to the outside, over and over."""
    real, link, parked = root / "d", root / "d_link", root / "d_parked"
    while not stop.is_set():
        os.rename(real, parked)  # d is gone for a moment ...
        os.rename(link, real)  # ... then a symlink out of the workspace ...
        os.rename(real, link)
        os.rename(parked, real)  # ... then the real directory again


@pytest.fixture
def racing_root(tmp_path: Path) -> Iterator[Path]:
    """A workspace whose ``d/f.txt`` is swapped with an outside ``f.txt`` while the test runs."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(f"outside the workspace: {SECRET_MARKER}")
    root = tmp_path / "ws" / T / P
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text(INSIDE_TEXT)
    os.symlink(outside, root / "d_link")
    stop = threading.Event()
    swapper = threading.Thread(target=_swap, args=(root, stop), daemon=True)
    swapper.start()
    try:
        yield root
    finally:
        stop.set()
        swapper.join(5)


def test_read_never_leaves_the_workspace_while_a_directory_is_swapped(racing_root: Path) -> None:
    reads = refusals = 0
    deadline = time.monotonic() + SWAP_SECONDS
    while time.monotonic() < deadline:
        try:
            _, data = read_workspace_file(racing_root, "d/f.txt", max_bytes=10_000)
        except (PathNotAllowedError, DocumentNotFoundError):
            refusals += 1  # a clear refusal is the right answer while the path is a symlink
            continue
        assert SECRET_MARKER.encode() not in data, "the read escaped the workspace"
        assert data == INSIDE_TEXT.encode()
        reads += 1
    assert reads > 0 and refusals > 0  # the race really ran both ways


def test_tool_never_returns_outside_text_nor_internal_errors(
    racing_root: Path, tmp_path: Path, make_app: AppFactory
) -> None:
    app = make_app(config={"workspaces_dir": str(tmp_path / "ws")})
    app.bring(T, P)
    tools = app.tools(T, P)
    rag_id = call_tool(tools, "rag_create", name="race")["ragId"]
    codes: dict[str, int] = {}
    calls = 0
    deadline = time.monotonic() + SWAP_SECONDS
    while time.monotonic() < deadline:
        result = call_tool(
            tools, "rag_add_workspace_file", ragId=rag_id, path="d/f.txt", sourceRef=f"r{calls}"
        )
        code = result.get("code", "OK")
        codes[code] = codes.get(code, 0) + 1
        calls += 1
    assert set(codes) <= {"OK", "PATH_NOT_ALLOWED", "DOCUMENT_NOT_FOUND"}, codes
    assert codes.get("OK", 0) > 0
    hits = call_tool(tools, "rag_query", ragId=rag_id, query=f"{SECRET_MARKER} outside", topK=1000)
    assert [h for h in hits["hits"] if SECRET_MARKER in h["text"]] == []
