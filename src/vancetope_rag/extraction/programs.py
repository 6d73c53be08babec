"""Running a program an extractor needs (LibreOffice, ffmpeg) within the extraction's limits.

Such a program is a process tree (``soffice`` starts ``oosplash``, which starts
``soffice.bin``), and a tree has to be stopped whole: a converter left running after its
extraction was given up would keep a core busy and its temp files open. Two cases:

* In an extraction worker (:mod:`.sandbox`), the worker leads its own process group and the
  program joins it, so the sandbox's kill at ``rag.extract.timeoutSeconds`` takes the whole
  tree with the worker; the worker's own temp directory (``TMPDIR``), where the file's bytes
  and the program's profile were written, is removed with it.
* In the calling process (an extractor run without a worker), the program leads a new
  session of its own, and its group is killed at the deadline here.

Either way, once the program has exited, whatever it left behind in its group is killed, so
a daemonizing child never outlives its extraction.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vancetope_rag.errors import ExtractionTimeoutError, ExtractorProgramMissingError

__all__ = [
    "Deadline",
    "ProgramResult",
    "enter_worker",
    "require_program",
    "run_program",
    "timeout_error",
]

#: Bytes of a program's error output kept for a message.
STDERR_TAIL = 2_000
#: Seconds a program in a worker may run past the deadline: the sandbox kills the worker's
#: whole group at the deadline, so this only bounds a wait the sandbox did not end.
WORKER_GRACE_S = 5.0

_in_worker = False


def enter_worker() -> None:
    """Called by an extraction worker at start: programs join its process group, which the
    sandbox kills whole at the time limit."""
    global _in_worker
    _in_worker = True


@dataclass(frozen=True)
class Deadline:
    """When one extraction's wall time (``rag.extract.timeoutSeconds``) runs out."""

    at: float
    limit_s: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self, path: str) -> ExtractionTimeoutError:
        """The error of a file whose extraction ran out of time."""
        return timeout_error(path, self.limit_s)


def timeout_error(path: str, limit_s: float) -> ExtractionTimeoutError:
    """The error of a file whose extraction ran past ``limit_s`` and was stopped (by the
    sandbox, or here), worded alike wherever it was stopped."""
    return ExtractionTimeoutError(
        f"cannot extract text from {path!r}: extraction took longer than "
        f"{limit_s:g} s and was stopped (rag.extract.timeoutSeconds); the file "
        "may be hostile or too large: split it, or raise the limit"
    )


@dataclass(frozen=True)
class ProgramResult:
    returncode: int
    #: The end of what the program wrote to stderr, decoded leniently, for messages.
    stderr: str


def require_program(program: str, what: str, package: str) -> str:
    """The full path of ``program`` on the ``PATH``.

    Raises:
        ExtractorProgramMissingError: It is not there; the message names ``package``.
    """
    found = shutil.which(program)
    if found is None:
        raise ExtractorProgramMissingError(what, program, package)
    return found


def run_program(
    argv: Sequence[str],
    *,
    deadline: Deadline,
    path: str,
    cwd: Path,
    stdout: Path | None = None,
) -> ProgramResult:
    """Run ``argv`` to its end or the deadline, whichever comes first; its tree is killed.

    Args:
        argv: The program (a full path from :func:`require_program`) and its arguments.
        deadline: The extraction's deadline.
        path: The file being extracted, for messages.
        cwd: The working directory (the extraction's temp directory).
        stdout: A file its standard output is written to; discarded when ``None``.

    Raises:
        ExtractionTimeoutError: The deadline passed; the program's tree was killed.
    """
    remaining = deadline.remaining()
    if remaining <= 0:
        raise deadline.expired(path)
    with tempfile.TemporaryFile(dir=cwd) as err:
        out = open(stdout, "wb") if stdout is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=not _in_worker,
            )
        finally:
            if stdout is not None and not isinstance(out, int):
                out.close()
        try:
            code = process.wait(remaining + (WORKER_GRACE_S if _in_worker else 0.0))
        except subprocess.TimeoutExpired:
            raise deadline.expired(path) from None
        finally:
            _kill_tree(process)
        err.seek(max(0, err.seek(0, os.SEEK_END) - STDERR_TAIL))
        tail = err.read().decode("utf-8", "replace").strip()
    return ProgramResult(code, tail)


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """Kill the program and whatever it started that is still running, then reap it."""
    if _in_worker:
        _kill_own_group_members()
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


def _kill_own_group_members() -> None:
    """Kill every other process of this process group: in a worker, which leads its group,
    those are the programs it ran and their children (Linux: read from ``/proc``)."""
    me, group = os.getpid(), os.getpgrp()
    if group != me:  # not a group leader: the group may hold processes that are not ours
        return
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == group:
                os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue
