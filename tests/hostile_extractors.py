"""Extractors that misbehave on purpose, importable by an extraction worker process (module-
level functions pickle by reference; a test module would drag pytest into the worker)."""

from __future__ import annotations

import os
import time


def hang(data: bytes, path: str) -> str:
    """Never returns (a file that loops an extractor forever)."""
    while True:
        time.sleep(0.05)


def crash(data: bytes, path: str) -> str:
    """Kills its process (a segfault in a C library)."""
    os._exit(3)


def hog(data: bytes, path: str) -> str:
    """Asks for more memory than a worker may have."""
    blocks = [bytearray(256 * 1024 * 1024) for _ in range(64)]
    return str(len(blocks))


def count_calls(data: bytes, path: str) -> str:
    """Echoes the text and appends the path to the file named by $HOSTILE_CALLS (works across
    processes: the worker writes the same file)."""
    log = os.environ.get("HOSTILE_CALLS")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(path + "\n")
    return data.decode()


def pid(data: bytes, path: str) -> str:
    """The process it runs in."""
    return str(os.getpid())
