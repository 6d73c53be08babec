"""The path jail, seen through ``rag_add_workspace_file``: hostile paths are error results."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.errors import InvalidInputError

SECRET_MARKER = "SECRET-MARKER-c0ffee-91d2"
LEGIT_TEXT = "Workspace notes: the quarterly review covers zebra migration."

AppFactory = Callable[..., RagApp]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")


@pytest.fixture
def ws(tmp_path: Path, make_app: AppFactory) -> tuple[RagApp, Path, str]:
    """(app, workspace root, id of a manual RAG); secrets lie around the root."""
    root = tmp_path / "ws" / T / P
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "ok.md").write_text(LEGIT_TEXT)
    (root / "notes" / ".hidden.md").write_text(SECRET_MARKER)
    (root / ".env").write_text(f"API_KEY={SECRET_MARKER}")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f"[remote] url={SECRET_MARKER}")
    (tmp_path / "secret.txt").write_text(f"outside the root: {SECRET_MARKER}")
    other = tmp_path / "ws" / "t2" / P
    other.mkdir(parents=True)
    (other / "b.md").write_text(f"tenant t2 file {SECRET_MARKER}")

    os.symlink(tmp_path / "secret.txt", root / "link_out.txt")
    os.symlink(tmp_path, root / "linkdir")
    os.symlink(root / ".env", root / "to_dot.txt")
    os.symlink(root / ".git", root / "gitlink")
    os.symlink("loop.md", root / "loop.md")
    os.mkfifo(root / "pipe")

    app = make_app(config={"workspaces_dir": str(tmp_path / "ws")})
    app.bring(T, P)
    rag = call_tool(app.tools(T, P), "rag_create", name="workspace")
    return app, tmp_path, rag["ragId"]


REFUSED = "PATH_NOT_ALLOWED"
MISSING = "DOCUMENT_NOT_FOUND"

#: (hostile path, expected code, words the message must contain). ``{tmp}`` = the test folder.
HOSTILE: list[tuple[object, str, str]] = [
    ("../secret.txt", REFUSED, "'..' components are not allowed"),
    ("../../../secret.txt", REFUSED, "'..'"),
    ("notes/../../secret.txt", REFUSED, "'..'"),
    ("../../t2/p1/b.md", REFUSED, "'..'"),
    ("{tmp}/secret.txt", REFUSED, "absolute paths are not allowed"),
    ("/etc/passwd", REFUSED, "absolute paths are not allowed"),
    ("//etc/passwd", REFUSED, "absolute"),
    ("link_out.txt", REFUSED, "outside the workspace"),
    ("linkdir/secret.txt", REFUSED, "outside the workspace"),
    ("to_dot.txt", REFUSED, "dotfile"),
    ("gitlink/config", REFUSED, "dotfile"),
    (".env", REFUSED, "dotfiles and dot-directories are not allowed"),
    (".git/config", REFUSED, "dotfiles"),
    ("notes/.hidden.md", REFUSED, "dotfiles"),
    ("notes/ok.md\x00.txt", REFUSED, "control character U+0000"),
    ("notes/\u202eevil.md", REFUSED, "control character U+202E"),
    ("x" * 300 + ".md", REFUSED, "longer than 255 bytes"),
    ("a/" * 3000 + "b.md", REFUSED, "longer than 4096 bytes"),
    ("..\\secret.txt", REFUSED, "backslashes are not allowed"),
    ("notes\\ok.md", REFUSED, "backslashes"),
    ("~/secret.txt", REFUSED, "'~' home-directory paths"),
    ("~root/.bashrc", REFUSED, "'~'"),
    ("C:/Windows/win.ini", REFUSED, "absolute"),
    ("c:secret.txt", REFUSED, "absolute"),
    ("pipe", REFUSED, "not a regular file"),
    ("notes", REFUSED, "it is a directory"),
    ("notes/", REFUSED, "directory"),
    ("loop.md", REFUSED, "symlink loop"),
    ("", REFUSED, "the path is empty"),
    ("   ", REFUSED, "empty"),
    (".", REFUSED, "workspace root itself"),
    ("./", REFUSED, "root itself"),
    ("%2e%2e/secret.txt", MISSING, "no such file in the workspace"),
    ("notes/missing.md", MISSING, "no such file"),
    # the schema check answers first, naming the parameter
    (123, "INVALID_ARGUMENT", "parameter 'path' is wrong"),
]


def _chunks_with_marker(app: RagApp) -> list[str]:
    texts: list[str] = []
    for rag in app.rags.list_rags(T, P):
        if app.rags.chunk_count(rag):
            hits = app.rags.query(rag, f"{SECRET_MARKER} secret api key url", top_k=1000)
            texts += [h.text for h in hits if SECRET_MARKER in h.text]
    return texts


def test_hostile_paths_are_error_results(ws: tuple[RagApp, Path, str]) -> None:
    app, tmp, rag_id = ws
    tools = app.tools(T, P)
    assert len(HOSTILE) >= 20
    for raw, code, words in HOSTILE:
        path = raw.replace("{tmp}", str(tmp)) if isinstance(raw, str) else raw
        result = call_tool(tools, "rag_add_workspace_file", ragId=rag_id, path=path)
        extra = {"parameter"} if code == "INVALID_ARGUMENT" else set()
        assert set(result) == {"error", "code"} | extra, (raw, result)
        assert result["code"] == code, (raw, result)
        assert words in result["error"], (raw, result["error"])
        assert SECRET_MARKER not in result["error"]
        if code == REFUSED and not isinstance(raw, int):
            assert "Allowed: a relative path" in result["error"]  # says what would work

    rag = app.rags.get(T, P, rag_id)
    assert app.rags.chunk_count(rag) == 0
    assert _chunks_with_marker(app) == []


def test_legit_file_is_indexed(ws: tuple[RagApp, Path, str]) -> None:
    app, _, rag_id = ws
    tools = app.tools(T, P)
    for path in ("notes/ok.md", "./notes//ok.md"):
        result = call_tool(tools, "rag_add_workspace_file", ragId=rag_id, path=path)
        assert result == {
            "ragId": rag_id,
            "sourceRef": "workspace:notes/ok.md",
            "path": "notes/ok.md",
            "chunks": 1,
            "truncated": False,
            "truncatedReason": None,
            "sections": 0,
        }
    rag = app.rags.get(T, P, rag_id)
    assert app.rags.chunk_count(rag) == 1  # the same source replaced, not duplicated
    hits = call_tool(tools, "rag_query", ragId=rag_id, query="zebra migration review")["hits"]
    assert hits[0]["path"] == "notes/ok.md" and "quarterly review" in hits[0]["text"]
    assert _chunks_with_marker(app) == []


def test_symlink_inside_the_root_is_followed(ws: tuple[RagApp, Path, str]) -> None:
    app, tmp, rag_id = ws
    root = tmp / "ws" / T / P
    os.symlink(root / "notes" / "ok.md", root / "alias.md")
    tools = app.tools(T, P)
    result = call_tool(tools, "rag_add_workspace_file", ragId=rag_id, path="alias.md")
    assert result["chunks"] == 1 and result["path"] == "alias.md"


def test_no_workspace_configured(app: RagApp) -> None:
    app.bring(T, P)
    tools = app.tools(T, P)
    result = call_tool(tools, "rag_add_workspace_file", ragId="_documents", path="notes/ok.md")
    assert result["code"] == "INVALID_INPUT"
    assert "no workspace folder configured" in result["error"]


def test_workspace_root_is_per_tenant_and_project(make_app: AppFactory, tmp_path: Path) -> None:
    app = make_app(config={"workspaces_dir": str(tmp_path / "ws")})
    assert app.workspace_root(T, P) is None  # not created yet
    (tmp_path / "ws" / T / P).mkdir(parents=True)
    assert app.workspace_root(T, P) == tmp_path / "ws" / T / P
    assert app.workspace_root("t2", P) is None


@pytest.mark.parametrize(
    ("tenant", "project"),
    [(T, ".."), (T, "."), ("..", "t2"), (T, "../t2"), ("t1/../t2", P)],
)
def test_ids_cannot_move_the_workspace_root(
    make_app: AppFactory, tmp_path: Path, tenant: str, project: str
) -> None:
    """A tenant or project id is one path component: '..' or '/' would widen the jail."""
    other = tmp_path / "ws" / "t2" / P
    other.mkdir(parents=True)
    (other / "b.md").write_text(f"tenant t2 file {SECRET_MARKER}")
    (tmp_path / "ws" / T / P).mkdir(parents=True)
    app = make_app(config={"workspaces_dir": str(tmp_path / "ws")}, tenant=T)
    assert app.workspace_root(tenant, project) is None
    # and such ids are no ids at all: every host method refuses them with InvalidInputError
    with pytest.raises(InvalidInputError, match="must be 1-200 characters"):
        app.bring(tenant, project)
    with pytest.raises(InvalidInputError):
        app.tools(tenant, project)


def test_a_workbook_is_read_by_sheet_and_cited_with_it(ws: tuple[RagApp, Path, str]) -> None:
    """The workspace tool extracts like an import, with sections in the label."""
    import filemakers as fm

    app, tmp_path, rag_id = ws
    book = fm.xlsx({"Intro": [["hello"]], "Maintenance": [["pump seals every 90 days"]]})
    (tmp_path / "ws" / T / P / "q3.xlsx").write_bytes(book)
    tools = app.tools(T, P)
    added = call_tool(tools, "rag_add_workspace_file", ragId=rag_id, path="q3.xlsx")
    assert added["sections"] == 2 and added["chunks"] == 2
    hits = call_tool(tools, "rag_query", ragId=rag_id, query="pump seals")["hits"]
    assert hits[0]["source"] == "q3.xlsx — sheet Maintenance"


def test_an_unreadable_file_is_an_error_result(ws: tuple[RagApp, Path, str]) -> None:
    import filemakers as fm

    app, tmp_path, rag_id = ws
    (tmp_path / "ws" / T / P / "scan.png").write_bytes(fm.text_image("SCAN"))
    result = call_tool(app.tools(T, P), "rag_add_workspace_file", ragId=rag_id, path="scan.png")
    assert result["code"] == "EXTRACT_NO_TEXT_LAYER"
    assert "configure an OCR/vision extractor" in result["error"]
    (tmp_path / "ws" / T / P / "empty.md").write_bytes(b"")
    empty = call_tool(app.tools(T, P), "rag_add_workspace_file", ragId=rag_id, path="empty.md")
    assert empty["code"] == "EXTRACT_NO_TEXT" and "the file is empty" in empty["error"]
