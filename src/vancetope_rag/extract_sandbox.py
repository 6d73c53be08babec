"""Extraction in worker processes, under a wall-time and a memory limit.

A pathological file (a PDF whose object graph loops, a zip bomb, a million nested tags) must
not hang an import or a chat turn's tool call, and a thread cannot be stopped. So every
extraction whose extractor can be sent to another process runs in one of a few long-lived
worker processes (``spawn``ed: they share no lock or thread with the caller); one that passes
its time limit is killed and replaced, and the call fails with
:class:`~vancetope_rag.extract.ExtractionTimeoutError`. A worker also runs with an address-space
limit, so a file that would fill memory fails there instead of taking the host down.

An extractor that cannot be pickled (a lambda, a closure a plugin registered) runs in the
calling process, without the time limit; name a module-level function to get it.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from vancetope_rag.errors import ExtractionError, RagError
from vancetope_rag.extract import (
    ExtractedText,
    ExtractionTimeoutError,
    ExtractOptions,
    ExtractorEntry,
    error_from_code,
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


def _serve(conn: Connection, memory_bytes: int) -> None:
    """A worker's loop: run jobs until the pipe closes."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform: no memory limit
        pass
    while True:
        try:
            job: _Job = conn.recv()
        except (EOFError, OSError):
            return
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
            reply = ("error", ExtractionError.code, f"{type(exc).__name__}: {exc}", None)
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


def _memory_message(path: str, memory_bytes: int) -> str:
    return (
        f"cannot extract text from {path!r}: reading it needs more than "
        f"{memory_bytes // 1024**2} MiB of memory (a hostile or very large file)"
    )


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(
            target=_serve,
            args=(child, memory_bytes),
            name="vancetope-rag-extract",
            daemon=True,
        )
        self.process.start()
        child.close()

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(5)
        finally:
            self.conn.close()


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
            pickle.dumps(entry)
        except Exception:  # a lambda or closure: no worker can receive it
            log.debug("extractor %s cannot be pickled; extracting in process", entry.name)
            return run_extractor(entry, data, path, mime, options, budget)
        worker = self._acquire()
        healthy = False
        try:
            worker.conn.send(job)
            if not worker.conn.poll(timeout_s):
                raise ExtractionTimeoutError(
                    f"cannot extract text from {path!r}: extraction took longer than "
                    f"{timeout_s:g} s and was stopped (rag.extract.timeoutSeconds); the file "
                    "may be hostile or too large: split it, or raise the limit"
                )
            reply = worker.conn.recv()
            healthy = True
        except (EOFError, OSError, BrokenPipeError):
            worker.process.join(2)  # the pipe closes before the process is reaped
            code = worker.process.exitcode
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
