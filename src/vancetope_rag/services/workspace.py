"""The path jail behind ``rag_add_workspace_file``: only regular files inside the workspace.

The user's path is checked lexically first (no absolute paths, ``..``, backslashes, control
characters or dot-components), then opened race-free: walked from a directory file descriptor
of the root one component at a time, never resolved by name and opened afterwards. Symlinks are
followed by hand and only while they stay inside the root and outside dot-directories; the
file must be a regular file with one hard link, and ``file.txt/`` (a trailing slash) is refused.

The walk and the bounded read are shared: ``import DIR`` reads each file it listed through
:func:`open_below` (symlinks not followed at all) and :func:`read_open_file`.
"""

from __future__ import annotations

import errno
import os
import pathlib
import re
import stat
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vancetope_rag.errors import (
    DocumentNotFoundError,
    ExtractionError,
    FileChangedWhileReadError,
    InvalidInputError,
    PathNotAllowedError,
    RagError,
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
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_NOFOLLOW | _O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY
#: Symlinks followed for one path before it counts as a loop (Linux's own limit).
_MAX_SYMLINKS = 40


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


def _canonical_root(root: str | os.PathLike[str]) -> tuple[str, tuple[str, ...]]:
    """The root's canonical path and the prefixes an absolute symlink inside may name it by."""
    given = os.path.abspath(os.fspath(root))
    real_root = os.path.realpath(given)
    if not os.path.isdir(real_root):
        raise InvalidInputError("the workspace root is not an existing directory")
    return real_root, tuple(dict.fromkeys((real_root, given)))


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def _wants_directory(user_path: str) -> bool:
    """``notes/`` and ``notes/.`` name a directory: on a file they are an error, as in POSIX."""
    last = user_path.rstrip().rsplit("/", 1)
    return len(last) == 2 and last[1] in ("", ".")


def _link_parts(
    target: str, prefixes: tuple[str, ...], here: list[str], rules: WalkRules
) -> list[str]:
    """Components, from the root, that a symlink in directory ``here`` points to."""
    if target.startswith("/"):
        for prefix in prefixes:
            if target == prefix or target.startswith(prefix.rstrip("/") + "/"):
                return target[len(prefix) :].split("/")
        raise rules.refuse(_OUTSIDE)
    return [*here, *target.split("/")]


@dataclass(frozen=True)
class WalkRules:
    """What a walk below a root accepts, and how it words a refusal.

    Attributes:
        refuse: The error to raise for a reason (``"it is not a regular file ..."``).
        not_found: The error to raise when a component does not exist (any more).
        follow_symlinks: Follow symlinks by hand while they stay inside the root; when
            ``False`` a symlink anywhere on the path is refused.
        single_link: Refuse a file with more than one hard link.
    """

    refuse: Callable[[str], RagError]
    not_found: Callable[[], RagError]
    follow_symlinks: bool = True
    single_link: bool = True


_SYMLINK = "it is a symbolic link (not followed)"


def _workspace_rules(user_path: str) -> WalkRules:
    return WalkRules(
        refuse=lambda reason: _refuse(user_path, reason), not_found=lambda: _not_found(user_path)
    )


class _Walk:
    """Opens a path below a directory fd of the root, one component at a time.

    Every directory is opened ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's fd and the
    file ``O_NOFOLLOW | O_NONBLOCK``, so nothing is resolved by name twice: a directory
    swapped for a symlink between two steps is seen as a symlink, never followed blindly.
    Symlinks are followed by hand (read with ``readlink``, spliced into the remaining path,
    walked again from the root), so one that stays inside the workspace works and one that
    leaves it, or reaches a dot-directory, is refused; with ``rules.follow_symlinks`` off,
    every symlink is refused. ``..`` can only come from a symlink's target; it moves up the
    components walked so far, never above the root.
    """

    def __init__(self, root_fd: int, prefixes: tuple[str, ...], rules: WalkRules) -> None:
        self.root_fd = root_fd
        self.prefixes = prefixes
        self.rules = rules
        self.fd = root_fd  # the directory reached so far
        self.here: list[str] = []  # its components below the root (no symlinks among them)

    def _enter(self, fd: int, name: str) -> None:
        if self.fd != self.root_fd:
            os.close(self.fd)
        self.fd = fd
        self.here.append(name)

    def _restart(self) -> None:
        if self.fd != self.root_fd:
            os.close(self.fd)
        self.fd, self.here = self.root_fd, []

    def close(self) -> None:
        self._restart()

    def open(self, parts: list[str], wants_dir: bool) -> tuple[int, list[str]]:
        """The fd of the file ``parts`` names and its symlink-free components."""
        pending = list(parts)
        hops = 0
        via_link = False
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if not self.here:
                    raise self.rules.refuse(_OUTSIDE)
                pending = [*self.here[:-1], *pending]
                self._restart()
                continue
            if name.startswith("."):
                raise self.rules.refuse(
                    "it resolves (through a symlink) to a dotfile or dot-directory"
                    if via_link
                    else f"dotfiles and dot-directories are not allowed ({name!r})",
                )
            last = not any(p not in ("", ".") for p in pending)
            as_file = last and not wants_dir
            try:
                fd = os.open(name, _FILE_FLAGS if as_file else _DIR_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                target = self._symlink_target(name, exc, trailing_slash=last and wants_dir)
                if not self.rules.follow_symlinks:
                    raise self.rules.refuse(_SYMLINK) from None
                hops += 1
                if hops > _MAX_SYMLINKS:
                    raise self.rules.refuse("it is a symlink loop") from None
                pending = [*_link_parts(target, self.prefixes, self.here, self.rules), *pending]
                via_link = True
                self._restart()
                continue
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode) and not last:
                self._enter(fd, name)
                continue
            try:
                _check_final(self.rules, info, wants_dir)
            except BaseException:
                os.close(fd)
                raise
            return fd, [*self.here, name]
        raise self.rules.refuse("it resolves to the workspace root itself, not a file")

    def _symlink_target(self, name: str, exc: OSError, *, trailing_slash: bool) -> str:
        """The target of symlink ``name``; any other failure of opening it as an error."""
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            try:
                return os.readlink(name, dir_fd=self.fd)
            except OSError:
                pass  # not a symlink: a file where a directory was expected
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            if exc.errno == errno.ENOTDIR and trailing_slash:
                raise self.rules.refuse(_TRAILING_SLASH) from None
            raise self.rules.not_found() from None
        raise self.rules.refuse(f"it cannot be opened ({_os_reason(exc)})") from None


_OUTSIDE = "it resolves (through a symlink) to a place outside the workspace"
_TRAILING_SLASH = "a trailing '/' names a directory, but it is a file"


def _check_final(rules: WalkRules, info: os.stat_result, wants_dir: bool) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise rules.refuse("it is a directory; name a file inside it")
    if wants_dir:
        raise rules.refuse(_TRAILING_SLASH)
    if not stat.S_ISREG(info.st_mode):
        raise rules.refuse("it is not a regular file (device, FIFO or socket)")
    if rules.single_link and info.st_nlink != 1:
        # A hard link is the same file under two names; the other may be outside the workspace.
        raise rules.refuse("it has more than one hard link")


def open_below(
    root: str | os.PathLike[str], parts: Sequence[str], rules: WalkRules, *, wants_dir: bool = False
) -> tuple[int, str, list[str]]:
    """Open the regular file that ``parts`` (components, no separators) names below ``root``,
    race-free (see :class:`_Walk`): each component relative to its parent's fd, ``O_NOFOLLOW``,
    the file ``O_NONBLOCK`` (a FIFO cannot block), and ``fstat`` of what was opened.

    Returns:
        The file's fd (the caller closes it), the canonical root and the symlink-free
        components of the file.

    Raises:
        RagError: What ``rules`` make of a refusal or a missing component.
        InvalidInputError: ``root`` is not a directory or cannot be opened.
    """
    real_root, prefixes = _canonical_root(root)
    try:
        root_fd = os.open(real_root, _DIR_FLAGS)
    except OSError as exc:
        reason = _os_reason(exc)
        raise InvalidInputError(f"the workspace root cannot be opened ({reason})") from None
    walk = _Walk(root_fd, prefixes, rules)
    try:
        fd, resolved = walk.open(list(parts), wants_dir)
    finally:
        walk.close()
        os.close(root_fd)
    return fd, real_root, resolved


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``'s current offset: fewer only at the end of the file."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(_READ_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_open_file(
    fd: int,
    max_bytes: int,
    *,
    too_large: Callable[[], RagError],
    changed: Callable[[], RagError],
) -> bytes:
    """The bytes of the regular file open as ``fd``, whole and of one version.

    A file larger than ``max_bytes`` by ``fstat`` is refused unread; otherwise at most
    ``max_bytes + 1`` bytes are read, so one that grew past the budget meanwhile is refused
    without reading the rest. Size and ``st_mtime_ns`` of the open file are compared before
    and after the read: a file that changed is read once more from the start, and if it
    changed again it is refused (``changed``) rather than returned as a mix of two versions.
    The caller closes ``fd``.
    """
    for _ in range(2):
        before = os.fstat(fd)
        if before.st_size > max_bytes:
            raise too_large()
        os.lseek(fd, 0, os.SEEK_SET)
        data = _read_at_most(fd, max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large()
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns):
            return data
    raise changed()


def _open_file(root: str | os.PathLike[str], raw_path: object) -> tuple[int, str, str, list[str]]:
    """(fd of the file, canonical root, normalised user path, symlink-free components)."""
    user_path, parts = _lexical_parts(raw_path)
    fd, real_root, resolved = open_below(
        root, parts, _workspace_rules(user_path), wants_dir=_wants_directory(user_path)
    )
    return fd, real_root, "/".join(parts), resolved


def resolve_workspace_path(root: str | os.PathLike[str], user_path: str) -> pathlib.Path:
    """Resolve a user-supplied path to a regular file inside the workspace root.

    Args:
        root: The workspace root directory (trusted, from configuration).
        user_path: The untrusted path from the tool call, relative to ``root``.

    Returns:
        The canonical absolute path of the file (symlinks resolved). Only for display: to
        read the file, use :func:`read_workspace_file`, which never opens a path by name.

    Raises:
        PathNotAllowedError: The path is not a string, empty, absolute, uses ``\\``, ``~``,
            ``..``, control characters or dot-components, is too long, leaves the root or
            reaches a dot-directory through a symlink, names a file with a trailing ``/``, or
            is not a regular file with a single hard link.
        DocumentNotFoundError: The path is acceptable but no such file exists.
        InvalidInputError: ``root`` is not an existing directory.
    """
    fd, real_root, _, resolved = _open_file(root, user_path)
    os.close(fd)
    return pathlib.Path(real_root, *resolved)


def read_workspace_file(
    root: str | os.PathLike[str], user_path: str, *, max_bytes: int
) -> tuple[str, bytes]:
    """Read a file from the workspace through the path jail, race-free.

    The path is walked from a directory fd of the root one component at a time (see
    :class:`_Walk`); what is read is the file descriptor that walk opened, checked with
    ``fstat``: a regular file with one hard link. No path is resolved and then opened again,
    so swapping a directory for a symlink meanwhile cannot lead the read out of the root.
    The read is bounded and of one version (see :func:`read_open_file`).

    Args:
        root: The workspace root directory.
        user_path: The untrusted path from the tool call, relative to ``root``.
        max_bytes: Largest file size accepted, in bytes (at least 1).

    Returns:
        The normalised relative path as the user named it (``/`` separators, ``.`` and empty
        components dropped) and the file's bytes.

    Raises:
        PathNotAllowedError: See :func:`resolve_workspace_path`.
        DocumentNotFoundError: No such file exists.
        ExtractionError: The file is larger than ``max_bytes``.
        FileChangedWhileReadError: The file changed while it was read, twice.
        InvalidInputError: ``max_bytes`` is not a positive integer or ``root`` is not a
            directory.
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidInputError(f"max_bytes must be a positive integer, got {max_bytes!r}")
    fd, _, relative, _ = _open_file(root, user_path)
    try:
        data = read_open_file(
            fd,
            max_bytes,
            too_large=lambda: _too_large(user_path, max_bytes),
            changed=lambda: FileChangedWhileReadError(
                f"workspace file {_show(user_path)} changed while it was read; "
                "try again once it is no longer being written"
            ),
        )
    finally:
        os.close(fd)
    return relative, data


def _too_large(user_path: str, max_bytes: int) -> ExtractionError:
    return ExtractionError(
        f"workspace file {_show(user_path)} is larger than the limit of {max_bytes} bytes; "
        "split it into smaller files or add its text with rag_add_text"
    )
