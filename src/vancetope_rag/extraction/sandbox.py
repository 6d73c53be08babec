"""Extraction in worker processes, under a wall-time and a memory limit.

A pathological file (a PDF whose object graph loops, a zip bomb, a million nested tags) must
not hang an import or a chat turn's tool call, and a thread cannot be stopped. So every
extraction whose extractor can be sent to another process runs in one of a few long-lived
worker processes (fresh interpreters started with ``python -c``: they share no lock or thread
with the caller, and unlike multiprocessing's ``spawn`` they never import the caller's main
module, so a host script without an ``if __name__ == "__main__"`` guard works); one that
passes its time limit is killed and replaced, and the call fails with
:class:`~.registry.ExtractionTimeoutError`. A worker also runs with an address-space
limit, so a file that would fill memory fails there instead of taking the host down.

A worker leads its own process group and has a temp directory of its own (its ``TMPDIR``): a
program an extractor runs (LibreOffice, ffmpeg; :mod:`.programs`) joins that group and writes
there, so a kill at the time limit stops the whole process tree and the directory is removed
with the worker.

An extractor that cannot be pickled (a lambda, a closure a plugin registered) runs in the
calling process, without the time limit; name a module-level function to get it. So does one
defined in the host's main script (``__main__``): it pickles, but a worker's ``__main__`` is not
that script, so no worker could load it; that one is named in a warning, once, saying to move
it into a module.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from vancetope_rag.errors import ExtractionError, RagError
from vancetope_rag.extraction import programs
from vancetope_rag.extraction.registry import (
    ExtractedText,
    ExtractOptions,
    ExtractorEntry,
    error_from_code,
    extraction_error,
    run_extractor,
)
from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

#: Worker processes at most (the machines this runs on have few cores; extraction is CPU work).
MAX_WORKERS = 2
#: Address-space limit of a worker process, in bytes.
WORKER_MEMORY_BYTES = 3 * 1024**3


@dataclass(frozen=True)
class _Job:
    entry: ExtractorEntry
    data: bytes
    path: str
    mime: str
    options: ExtractOptions
    budget: int


def child_main(read_fd: int, write_fd: int) -> None:
    """A worker process's entry point: take the caller's import path and memory limit from
    the first message, then serve jobs until the pipe closes."""
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    path, memory_bytes = inbox.recv()
    sys.path[:] = path  # the caller's: its plugins' extractors import as they do there
    programs.enter_worker()
    _serve(inbox, outbox, memory_bytes)


def _serve(inbox: Connection, outbox: Connection, memory_bytes: int) -> None:
    """A worker's loop: run jobs until the pipe closes."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform: no memory limit
        pass
    while True:
        try:
            job: _Job = inbox.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # the message came whole, but this interpreter cannot load it
            try:
                outbox.send(("error", ExtractionError.code, _unloadable_message(exc), None))
            except (OSError, ValueError):
                return
            continue
        try:
            reply: tuple[Any, ...] = (
                "ok",
                run_extractor(job.entry, job.data, job.path, job.mime, job.options, job.budget),
            )
        except RagError as exc:
            reply = ("error", exc.code, exc.message, getattr(exc, "extra", None))
        except MemoryError:
            reply = ("error", ExtractionError.code, _memory_message(job.path, memory_bytes), None)
        except BaseException as exc:  # the worker must answer whatever happens
            reason = f"the extraction was interrupted ({type(exc).__name__}: {exc})"
            reply = (
                "error",
                ExtractionError.code,
                extraction_error(job.path, reason).message,
                None,
            )
        try:
            outbox.send(reply)
        except (OSError, ValueError):
            return


def _unloadable_message(exc: Exception) -> str:
    return (
        "cannot extract text: the extraction process could not load the extractor "
        f"({type(exc).__name__}: {exc}); register a function of a module that a fresh Python "
        "interpreter can import (on sys.path, not defined at run time)"
    )


def _memory_message(path: str, memory_bytes: int) -> str:
    return (
        f"cannot extract text from {path!r}: reading it needs more than "
        f"{memory_bytes // 1024**2} MiB of memory (a hostile or very large file)"
    )


_CHILD = (
    "import sys; from vancetope_rag.extraction.sandbox import child_main; "
    "child_main(int(sys.argv[1]), int(sys.argv[2]))"
)


class _MainFinder(pickle.Pickler):
    """Pickles into nothing, noting the first function or class pickled by reference to the
    main script (``__main__``): a worker cannot import it."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.from_main: str | None = None

    def persistent_id(self, obj: Any) -> None:  # called for every object pickled
        # functions and classes pickle by reference (module and name); nothing else does
        by_reference = isinstance(obj, type) or callable(obj)
        if (
            self.from_main is None
            and by_reference
            and getattr(obj, "__module__", None) == "__main__"
        ):
            self.from_main = getattr(obj, "__qualname__", repr(obj))


def _main_script_reference(entry: ExtractorEntry) -> str | None:
    """The name of what ``entry`` holds from ``__main__``, or None.

    Raises:
        Exception: ``entry`` cannot be pickled at all (a lambda, a closure).
    """
    finder = _MainFinder()
    finder.dump(entry)
    return finder.from_main


class _Worker:
    """One worker process and the two pipes to it."""

    def __init__(self, memory_bytes: int) -> None:
        #: The worker's TMPDIR: what its extractors and their programs write goes here.
        self.tmp = tempfile.mkdtemp(prefix="vancetope-extract-")
        to_child, inbox_w = os.pipe()
        outbox_r, from_child = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(to_child), str(from_child)],
                pass_fds=(to_child, from_child),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # an extractor's prints must not mix into ours
                env={**os.environ, "TMPDIR": self.tmp},
                start_new_session=True,  # its own group: killed whole, programs included
            )
        except BaseException:
            for fd in (inbox_w, outbox_r):
                os.close(fd)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self.outbox = Connection(inbox_w, readable=False)
        self.inbox = Connection(outbox_r, writable=False)
        self.outbox.send((list(sys.path), memory_bytes))

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            # the group first: the programs the worker runs die with it, not after it
            os.killpg(self.process.pid, signal.SIGKILL)
        try:
            self.process.kill()
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self.outbox.close()
            self.inbox.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


class ExtractionSandbox:
    """A small pool of worker processes that run extractions with a time limit."""

    def __init__(
        self, max_workers: int = MAX_WORKERS, *, memory_bytes: int = WORKER_MEMORY_BYTES
    ) -> None:
        self.max_workers = max_workers
        self.memory_bytes = memory_bytes
        self._idle: list[_Worker] = []
        self._started = 0
        self._cond = threading.Condition()
        self._pid = os.getpid()
        #: Extractors of the main script already named in a warning.
        self._warned: set[str] = set()

    def run(
        self,
        entry: ExtractorEntry,
        data: bytes,
        path: str,
        mime: str,
        options: ExtractOptions,
        budget: int,
        *,
        timeout_s: float,
    ) -> ExtractedText:
        """Run one extraction in a worker; in this process when ``entry`` cannot be sent.

        Raises:
            ExtractionTimeoutError: It ran past ``timeout_s`` (the worker was killed).
            ExtractionError: It failed, or its worker died (a crash, the memory limit).
        """
        job = _Job(entry, data, path, mime, options, budget)
        try:
            from_main = _main_script_reference(entry)
        except Exception:  # a lambda or closure: no worker can receive it
            log.debug("extractor %s cannot be pickled; extracting in process", entry.name)
            return run_extractor(entry, data, path, mime, options, budget)
        if from_main is not None:
            self._warn_main_script(entry, from_main, timeout_s)
            return run_extractor(entry, data, path, mime, options, budget)
        worker = self._acquire()
        healthy = False
        try:
            worker.outbox.send(job)
            if not worker.inbox.poll(timeout_s):
                raise programs.timeout_error(path, timeout_s)
            reply = worker.inbox.recv()
            healthy = True
        except (EOFError, OSError, BrokenPipeError):
            try:  # the pipe closes before the process is reaped
                code: int | None = worker.process.wait(2)
            except subprocess.TimeoutExpired:
                code = None
            raise ExtractionError(
                f"cannot extract text from {path!r}: the extraction process ended "
                f"(exit code {code}); the file may be hostile or need more memory than allowed"
            ) from None
        finally:
            self._release(worker, healthy)
        if reply[0] == "ok":
            result: ExtractedText = reply[1]
            return result
        raise error_from_code(reply[1], reply[2], reply[3])

    def _warn_main_script(self, entry: ExtractorEntry, name: str, timeout_s: float) -> None:
        with self._cond:
            if entry.name in self._warned:
                return
            self._warned.add(entry.name)
        log.warning(
            "extractor %s uses %s of the main script (__main__), which a worker process "
            "cannot import: it runs in this process, without the %g s time limit "
            "(rag.extract.timeoutSeconds) and the memory limit. To run it in a worker, move "
            "it into a module on sys.path (e.g. shiplog.py next to the script) and import it "
            "from there",
            entry.name,
            name,
            timeout_s,
        )

    def _acquire(self) -> _Worker:
        with self._cond:
            if os.getpid() != self._pid:  # forked: the parent's workers are not ours
                self._idle, self._started, self._pid = [], 0, os.getpid()
            while True:
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    worker.kill()
                    self._started -= 1
                if self._started < self.max_workers:
                    self._started += 1
                    break
                self._cond.wait()
        try:
            return _Worker(self.memory_bytes)
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._cond:
            if healthy and worker.alive():
                self._idle.append(worker)
            else:
                worker.kill()
                self._started -= 1
            self._cond.notify()

    def close(self) -> None:
        """Stop the idle workers (busy ones stop when their job ends and they are released)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for worker in idle:
            worker.kill()


_SHARED: ExtractionSandbox | None = None
_SHARED_LOCK = threading.Lock()


def shared_sandbox() -> ExtractionSandbox:
    """The process's sandbox, shared by every app (workers are costly to start)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ExtractionSandbox()
            atexit.register(_SHARED.close)
        return _SHARED
