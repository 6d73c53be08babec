"""The path jail behind ``rag_add_workspace_file``: only regular files inside the workspace.

The user's path is checked lexically first (no absolute paths, ``..``, backslashes, control
characters or dot-components), then canonically: after resolving symlinks the file must still
be inside the root, outside any dot-directory, and a regular file. Reading re-checks the open
file descriptor so a file swapped between the check and the read is refused.
"""

from __future__ import annotations

import errno
import os
import pathlib
import re
import stat
import unicodedata

from vancetope_rag.errors import (
    DocumentNotFoundError,
    ExtractionError,
    InvalidInputError,
    PathNotAllowedError,
)

MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4096

_ALLOWED = (
    "Allowed: a relative path to a regular file inside the workspace, with '/' separators, "
    "no '..', no dotfiles or dot-directories, and no symlinks leading outside the workspace"
)
_SHOWN_CHARS = 100
_DRIVE = re.compile(r"^[A-Za-z]:")
# Bidirectional overrides make a displayed name differ from the real one.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_O_NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in must not block open()
_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_O_BINARY: int = getattr(os, "O_BINARY", 0)
_READ_CHUNK = 1 << 20


def _show(user_path: str) -> str:
    """The user's input for a message: ``repr`` of at most 100 characters."""
    if len(user_path) > _SHOWN_CHARS:
        return f"{user_path[:_SHOWN_CHARS]!r}… ({len(user_path)} characters)"
    return repr(user_path)


def _refuse(user_path: str, reason: str) -> PathNotAllowedError:
    return PathNotAllowedError(f"workspace path {_show(user_path)} refused: {reason}. {_ALLOWED}.")


def _not_found(user_path: str) -> DocumentNotFoundError:
    return DocumentNotFoundError(
        f"no such file in the workspace: {_show(user_path)}; "
        "give the path relative to the workspace root, e.g. 'notes/todo.md'"
    )


def _lexical_parts(user_path: object) -> tuple[str, list[str]]:
    """Check the path as text; return it and its components (``.`` and empty ones dropped)."""
    if not isinstance(user_path, str):
        raise PathNotAllowedError(
            f"workspace path must be a string, got {type(user_path).__name__}. {_ALLOWED}."
        )
    if not user_path.strip():
        raise _refuse(user_path, "the path is empty")
    # Length first, so a huge input costs nothing more; surrogates are refused just below.
    if len(user_path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise _refuse(user_path, f"it is longer than {MAX_PATH_BYTES} bytes")
    for char in user_path:
        category = unicodedata.category(char)
        if category in ("Cc", "Cs") or char in _BIDI_CONTROLS:
            raise _refuse(user_path, f"it contains the control character U+{ord(char):04X}")
    if "\\" in user_path:
        raise _refuse(user_path, "backslashes are not allowed; use '/' as separator")
    if user_path.startswith("/") or _DRIVE.match(user_path):
        raise _refuse(user_path, "absolute paths are not allowed")
    if user_path.startswith("~"):
        raise _refuse(user_path, "'~' home-directory paths are not allowed")
    parts: list[str] = []
    for part in user_path.split("/"):
        if part in ("", "."):
            continue  # 'a//b' and 'a/./b' name the same file as 'a/b'
        if part == "..":
            raise _refuse(user_path, "'..' components are not allowed")
        if part.startswith("."):
            raise _refuse(user_path, f"dotfiles and dot-directories are not allowed ({part!r})")
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _refuse(user_path, f"a path component is longer than {MAX_COMPONENT_BYTES} bytes")
        parts.append(part)
    if not parts:
        raise _refuse(user_path, "it names the workspace root itself, not a file")
    return user_path, parts


def _canonical_root(root: str | os.PathLike[str]) -> str:
    real_root = os.path.realpath(os.fspath(root))
    if not os.path.isdir(real_root):
        raise InvalidInputError("the workspace root is not an existing directory")
    return real_root


def _resolve(root: str | os.PathLike[str], raw_path: object) -> tuple[str, str, os.stat_result]:
    """Return (canonical path, normalised relative path, stat of the file)."""
    user_path, parts = _lexical_parts(raw_path)
    real_root = _canonical_root(root)
    real = os.path.realpath(os.path.join(real_root, *parts))
    try:
        inside = os.path.commonpath([real_root, real]) == real_root
    except ValueError:  # different drives on Windows
        inside = False
    if not inside:
        raise _refuse(user_path, "it resolves (through a symlink) to a place outside the workspace")
    relative = os.path.relpath(real, real_root)
    if relative == os.curdir:
        raise _refuse(user_path, "it resolves to the workspace root itself, not a file")
    if any(part.startswith(".") for part in pathlib.PurePath(relative).parts):
        raise _refuse(user_path, "it resolves (through a symlink) to a dotfile or dot-directory")
    try:
        info = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        raise _not_found(user_path) from None
    except OSError as exc:
        raise _refuse(user_path, f"it cannot be inspected ({_os_reason(exc)})") from None
    _check_regular(user_path, info)
    return real, "/".join(parts), info


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def _check_regular(user_path: str, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise _refuse(user_path, "it is a directory; name a file inside it")
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(user_path, "it is not a regular file (device, FIFO or socket)")


def resolve_workspace_path(root: str | os.PathLike[str], user_path: str) -> pathlib.Path:
    """Resolve a user-supplied path to a regular file inside the workspace root.

    Args:
        root: The workspace root directory (trusted, from configuration).
        user_path: The untrusted path from the tool call, relative to ``root``.

    Returns:
        The canonical absolute path of the file (symlinks resolved).

    Raises:
        PathNotAllowedError: The path is not a string, empty, absolute, uses ``\\``, ``~``,
            ``..``, control characters or dot-components, is too long, leaves the root or
            reaches a dot-directory through a symlink, or is not a regular file.
        DocumentNotFoundError: The path is acceptable but no such file exists.
        InvalidInputError: ``root`` is not an existing directory.
    """
    real, _, _ = _resolve(root, user_path)
    return pathlib.Path(real)


def read_workspace_file(
    root: str | os.PathLike[str], user_path: str, *, max_bytes: int
) -> tuple[str, bytes]:
    """Read a file from the workspace through the path jail.

    The file is opened with ``O_NOFOLLOW`` and checked again with ``fstat``: it must still be
    a regular file and the same file (device and inode) that was resolved, which narrows the
    window for swapping in a symlink or another file between the check and the read.

    Args:
        root: The workspace root directory.
        user_path: The untrusted path from the tool call, relative to ``root``.
        max_bytes: Largest file size accepted, in bytes (at least 1).

    Returns:
        The normalised relative path as the user named it (``/`` separators, ``.`` and empty
        components dropped) and the file's bytes.

    Raises:
        PathNotAllowedError: See :func:`resolve_workspace_path`, or the file changed between
            the check and the read.
        DocumentNotFoundError: No such file exists.
        ExtractionError: The file is larger than ``max_bytes``.
        InvalidInputError: ``max_bytes`` is not a positive integer or ``root`` is not a
            directory.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidInputError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    real, relative, expected = _resolve(root, user_path)
    flags = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise _not_found(user_path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink swapped in after the check
            raise _refuse(user_path, "it was replaced by a symlink while being opened") from None
        raise _refuse(user_path, f"it cannot be opened ({_os_reason(exc)})") from None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        info = os.fstat(handle.fileno())
        _check_regular(user_path, info)
        if (info.st_dev, info.st_ino) != (expected.st_dev, expected.st_ino):
            raise _refuse(user_path, "the file changed while it was being opened")
        if info.st_size > max_bytes:
            raise _too_large(user_path, max_bytes)
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:  # the file may grow after fstat
            chunk = handle.read(min(_READ_CHUNK, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size > max_bytes:
        raise _too_large(user_path, max_bytes)
    return relative, b"".join(chunks)


def _too_large(user_path: str, max_bytes: int) -> ExtractionError:
    return ExtractionError(
        f"workspace file {_show(user_path)} is larger than the limit of {max_bytes} bytes; "
        "split it into smaller files or add its text with rag_add_text"
    )
