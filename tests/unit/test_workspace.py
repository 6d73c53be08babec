"""The workspace path jail: hostile inputs are refused, real files inside are read."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

from vancetope_rag.errors import (
    DocumentNotFoundError,
    ExtractionError,
    FileChangedWhileReadError,
    InvalidInputError,
    PathNotAllowedError,
    RagError,
)
from vancetope_rag.services import workspace as workspace_module
from vancetope_rag.services.workspace import read_workspace_file, resolve_workspace_path

SECRET = "TOP-SECRET-7f3a9c"
LONG_COMPONENT = "x" * 300
LONG_PATH = "a/" * 2500  # 5000 characters


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "todo.md").write_text("# todo\n")
    (root / "a").mkdir()
    (root / "a" / "b").write_text("b")
    (root / "a.md").write_text("alpha")
    (root / "deep" / "nested" / "dir").mkdir(parents=True)
    (root / "deep" / "nested" / "dir" / "file.txt").write_text("deep")
    (root / "ünïcødé").mkdir()
    (root / "ünïcødé" / "文件 notes.md").write_text("unicode")
    (root / ".env").write_text(SECRET)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(SECRET)
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "linkdir_out").symlink_to(outside)
    (root / "link_dot").symlink_to(root / ".env")
    (root / "link_dotdir").symlink_to(root / ".git")
    (root / "link_in").symlink_to(root / "notes" / "todo.md")
    (root / "link_root").symlink_to(root)
    (root / "dangling").symlink_to(outside / "missing.txt")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe")
    return root


HOSTILE: list[Any] = [
    "../x",
    "../outside/secret.txt",
    "a/../../x",
    "notes/../a.md",
    "a/b/..",
    "..",
    "/etc/passwd",
    "//etc/passwd",
    "C:\\Windows\\x",
    "C:/Windows/x",
    "c:relative",
    "\\\\srv\\share",
    "..\\x",
    "a\\b",
    "~/x",
    "~root/.ssh/id_rsa",
    ".env",
    ".git/config",
    "a/.git/config",
    "notes/.hidden",
    ".ssh/x",
    "a\x00b",
    "a\nb",
    "a\tb",
    "\x1b[31mred",
    "a\x7fb",
    "\u202egpj.md",
    "a\udcffb",
    LONG_COMPONENT,
    f"notes/{LONG_COMPONENT}",
    LONG_PATH,
    "",
    "   ",
    "\t",
    ".",
    "./",
    "./.",
    "link_out",
    "linkdir_out/secret.txt",
    "dangling",
    "link_dot",
    "link_dotdir/config",
    "link_root",
    "loop1",
    "notes",
    "notes/",
    "deep/nested",
    None,
    42,
    b"a.md",
]
if hasattr(os, "mkfifo"):
    HOSTILE.append("pipe")

NOT_FOUND = ["%2e%2e/x", "%2e%2e%2fetc%2fpasswd", "missing.md", "notes/missing.md", "a.md/x"]


def _short_id(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def test_there_are_enough_hostile_inputs() -> None:
    assert len(HOSTILE) >= 25


@pytest.mark.parametrize("user_path", HOSTILE, ids=_short_id)
def test_hostile_paths_are_refused(workspace: pathlib.Path, user_path: Any) -> None:
    with pytest.raises(PathNotAllowedError) as info:
        resolve_workspace_path(workspace, user_path)
    message = str(info.value)
    assert "refused" in message or "must be a string" in message
    assert "Allowed:" in message
    assert info.value.code == "PATH_NOT_ALLOWED"
    assert len(message) < 600
    if isinstance(user_path, str) and len(user_path) > 100:
        assert user_path[:101] not in message


@pytest.mark.parametrize("user_path", NOT_FOUND)
def test_missing_files_are_not_found(workspace: pathlib.Path, user_path: str) -> None:
    with pytest.raises(DocumentNotFoundError, match="no such file in the workspace"):
        resolve_workspace_path(workspace, user_path)


@pytest.mark.parametrize("user_path", [*HOSTILE, *NOT_FOUND], ids=_short_id)
def test_secret_outside_or_in_dotfiles_is_never_returned(
    workspace: pathlib.Path, user_path: Any
) -> None:
    with pytest.raises(RagError) as info:
        read_workspace_file(workspace, user_path, max_bytes=1_000_000)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("user_path", "relative", "content"),
    [
        ("notes/todo.md", "notes/todo.md", b"# todo\n"),
        ("notes//todo.md", "notes/todo.md", b"# todo\n"),
        ("./notes/todo.md", "notes/todo.md", b"# todo\n"),
        ("a/./b", "a/b", b"b"),
        ("a.md", "a.md", b"alpha"),
        ("deep/nested/dir/file.txt", "deep/nested/dir/file.txt", b"deep"),
        ("ünïcødé/文件 notes.md", "ünïcødé/文件 notes.md", b"unicode"),
        ("link_in", "link_in", b"# todo\n"),
    ],
)
def test_files_inside_the_workspace_are_read(
    workspace: pathlib.Path, user_path: str, relative: str, content: bytes
) -> None:
    assert read_workspace_file(workspace, user_path, max_bytes=100) == (relative, content)


def test_resolve_returns_the_canonical_path(workspace: pathlib.Path) -> None:
    resolved = resolve_workspace_path(workspace, "link_in")
    assert resolved == (workspace / "notes" / "todo.md").resolve()
    assert resolved.is_absolute()


def test_root_given_through_a_symlink(workspace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    assert read_workspace_file(str(alias), "a.md", max_bytes=10) == ("a.md", b"alpha")
    with pytest.raises(PathNotAllowedError):
        resolve_workspace_path(alias, "link_out")


def test_missing_root_is_invalid_input(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidInputError):
        resolve_workspace_path(tmp_path / "nope", "a.md")


def test_file_over_the_limit_is_an_extraction_error(workspace: pathlib.Path) -> None:
    assert read_workspace_file(workspace, "a.md", max_bytes=5)[1] == b"alpha"
    with pytest.raises(ExtractionError, match="limit of 4 bytes"):
        read_workspace_file(workspace, "a.md", max_bytes=4)


@pytest.mark.parametrize("rewrites", [1, 2])
def test_a_file_rewritten_while_read_is_read_again_once(
    workspace: pathlib.Path, monkeypatch: pytest.MonkeyPatch, rewrites: int
) -> None:
    """A writer caught mid-read: read once more; changed again, refused, never two versions."""
    target = workspace / "a.md"
    real = workspace_module._read_at_most
    reads: list[int] = []

    def read(fd: int, limit: int) -> bytes:
        data = real(fd, limit)
        reads.append(limit)
        if len(reads) <= rewrites:
            with open(target, "ab") as f:
                f.write(b"+")
            ns = target.stat().st_mtime_ns + 1_000_000_000 * len(reads)
            os.utime(target, ns=(ns, ns))
        return data

    monkeypatch.setattr(workspace_module, "_read_at_most", read)
    if rewrites == 1:
        assert read_workspace_file(workspace, "a.md", max_bytes=100) == ("a.md", b"alpha+")
    else:
        with pytest.raises(FileChangedWhileReadError) as info:
            read_workspace_file(workspace, "a.md", max_bytes=100)
        assert info.value.code == "EXTRACT_CHANGED_WHILE_READ"
        assert "changed while it was read" in info.value.message
    assert reads == [101, 101]  # at most the limit plus one byte, and one retry


@pytest.mark.parametrize("max_bytes", [0, -1, True])
def test_max_bytes_must_be_positive(workspace: pathlib.Path, max_bytes: int) -> None:
    with pytest.raises(InvalidInputError):
        read_workspace_file(workspace, "a.md", max_bytes=max_bytes)


def test_symlink_swapped_in_just_before_the_open_is_refused(
    workspace: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = workspace / "a.md"
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "a.md":
            target.unlink()
            target.symlink_to(tmp_path / "outside" / "secret.txt")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(PathNotAllowedError, match="outside the workspace") as info:
        read_workspace_file(workspace, "a.md", max_bytes=1000)
    assert SECRET not in str(info.value)


def test_directory_swapped_for_a_symlink_mid_walk_is_refused(
    workspace: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk holds the fd of each directory it entered; a name is never resolved twice."""
    (tmp_path / "outside" / "b").write_text(SECRET)
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "a" and (workspace / "a").is_dir() and not (workspace / "a").is_symlink():
            (workspace / "a").rename(workspace / "a_parked")
            (workspace / "a").symlink_to(tmp_path / "outside")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(PathNotAllowedError, match="outside the workspace") as info:
        read_workspace_file(workspace, "a/b", max_bytes=1000)
    assert SECRET not in str(info.value)


def test_a_file_with_a_second_hard_link_is_refused(
    workspace: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    os.link(tmp_path / "outside" / "secret.txt", workspace / "hard.txt")
    with pytest.raises(PathNotAllowedError, match="more than one hard link") as info:
        read_workspace_file(workspace, "hard.txt", max_bytes=1000)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("user_path", ["a.md/", "a.md/.", "notes/todo.md/", "link_in/"])
def test_a_trailing_slash_on_a_file_is_refused(workspace: pathlib.Path, user_path: str) -> None:
    with pytest.raises(PathNotAllowedError, match="trailing '/'"):
        read_workspace_file(workspace, user_path, max_bytes=1000)


def test_relative_symlinks_inside_the_root_are_followed(workspace: pathlib.Path) -> None:
    (workspace / "deep" / "up").symlink_to("../notes")
    (workspace / "deep" / "nested" / "rel.md").symlink_to("../../a.md")
    assert read_workspace_file(workspace, "deep/up/todo.md", max_bytes=100)[1] == b"# todo\n"
    assert read_workspace_file(workspace, "deep/nested/rel.md", max_bytes=100)[1] == b"alpha"
    assert (
        resolve_workspace_path(workspace, "deep/up/todo.md")
        == (workspace / "notes" / "todo.md").resolve()
    )


@pytest.mark.parametrize("target", ["../outside/secret.txt", "../../x", "notes/../../outside"])
def test_relative_symlinks_leaving_the_root_are_refused(
    workspace: pathlib.Path, target: str
) -> None:
    (workspace / "rel_out").symlink_to(target)
    with pytest.raises(PathNotAllowedError, match="outside the workspace"):
        read_workspace_file(workspace, "rel_out", max_bytes=1000)
