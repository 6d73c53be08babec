"""What a measured choice holds for, and how it is stored: shared by every choice made by
timing the machine that runs it (the embedded model's backend, the vector pass's kernel).

A choice is stored as one JSON file per *machine key* (the CPU, its flags, and whatever else
the caller says the timings depend on: threads, library versions), written atomically, so
processes on the same machine measure once and processes on another machine (an image run on
another CPU) measure again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import uuid
from collections.abc import Callable
from functools import cache
from pathlib import Path


def machine_key(*parts: object) -> str:
    """A key for timings taken here: architecture, CPU model and flags, and ``parts``
    (JSON-serialisable: threads, versions, settings the timings depend on)."""
    raw = json.dumps([platform.machine(), cpu_name(), cpu_flags(), *parts], sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@cache
def cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them ("" elsewhere: the CPU's name stands)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("flags", "Features"):
                return value.strip()
    except OSError:
        pass
    return ""


@cache
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def atomic_write(dest: Path, write: Callable[[Path], object]) -> None:
    """``write`` a temporary file beside ``dest``, then rename it over ``dest``: readers and
    concurrent writers only ever see a complete file (the last rename wins)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
