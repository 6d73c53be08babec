"""Which kernel scores the vector cache's first pass, chosen by timing them on this machine.

The kernels of :mod:`.int8_rows` rank differently by CPU: on an Intel Xeon (docs/benchmarks.md)
the rows prepacked for oneDNN's int8 matmul are the fastest (2.5-4 ms a pass over 100k × 384);
on an AMD EPYC (Zen 4) the same kernel takes 0.45-2.5 s a call, 60-300x the plain float32
scan, while torch's weight-only int8 kernel takes a few ms. So none is taken on faith: each
pass (whole, bound included) is timed once per *machine key* (CPU, flags, torch threads and
versions: :func:`vancetope_rag.machine.machine_key`) and per vector dimension, for 1, 2 and
:data:`QUERY_COUNTS`\\ [-1] queries, on random rows off the turn path (the packer's thread,
or ``vancetope-rag prepare``); the choice is stored in the directory the engine
configuration names (``VANCETOPE_RAG_KERNEL_CACHE_DIR``) so the next process reads it.

The guard: the float32 scan serves until the choice lands, and a kernel serves a pass only if
its timing beat the float32 scan's for that many queries. Timing a kernel stops at its first
call slower than the slowest float32 call (its first call, which sets a kernel up, may take
:data:`WARMUP_ALLOWANCE` times as long), so a slow kernel costs the measurement one call.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vancetope_rag.machine import atomic_write
from vancetope_rag.running import SEARCHES, Gauge

log = logging.getLogger(__name__)

FLOAT32 = "float32"
#: Rows prepacked for oneDNN's int8 matmul (``torch.ops.onednn.qlinear_pointwise``).
PACKED = "packed"
#: torch's weight-only int8 kernel (``torch._weight_int8pack_mm``), bfloat16 queries.
WEIGHT_INT8 = "weight_int8"
#: ``torch._int_mm``, the queries rounded to int8 too.
INT_MM = "int_mm"
KERNELS = (PACKED, WEIGHT_INT8, INT_MM)
#: The pass sizes timed; a pass of more queries than one size takes the next size's choice.
QUERY_COUNTS = (1, 2, 8)
#: Timed calls per kernel and pass size (after one untimed warm-up call).
CALLS = 5
#: How much slower than the float32 scan a kernel's first call may be (it may set the kernel
#: up) before its timing stops.
WARMUP_ALLOWANCE = 10.0
#: Changes when what is timed changes: a stored choice of another recipe is measured again.
RECIPE = 1

#: One pass for a given number of queries: ``make(count)`` returns the call to time, or None
#: where the kernel does not exist here.
PassMaker = Callable[[int], Callable[[], object] | None]


@dataclass(frozen=True)
class KernelChoice:
    """The timings of one machine key and dimension, and the kernels they choose."""

    machine: str
    dim: int
    rows: int
    threads: int
    #: Milliseconds of one pass (median), by kernel, one per :data:`QUERY_COUNTS`; None where
    #: not timed (no such kernel here, or its timing stopped at a smaller pass).
    timings: Mapping[str, tuple[float | None, ...]]
    #: Kernels whose timing stopped at a call slower than the float32 scan: never chosen.
    stopped: tuple[str, ...] = ()
    #: Whether it was read from the directory (False: measured by this process).
    stored: bool = field(default=False, compare=False)

    def ranked(self, queries: int) -> tuple[str, ...]:
        """The kernels that may serve a pass of ``queries``, fastest first: those timed faster
        than the float32 scan, then the float32 scan."""
        at = next((i for i, c in enumerate(QUERY_COUNTS) if c >= queries), len(QUERY_COUNTS) - 1)
        base = self.timings[FLOAT32][at]
        faster: list[tuple[float, str]] = []
        for name in KERNELS:
            ms = self.timings.get(name, (None,) * len(QUERY_COUNTS))[at]
            if name not in self.stopped and ms is not None and base is not None and ms < base:
                faster.append((ms, name))
        return (*(name for _, name in sorted(faster)), FLOAT32)

    def first(self, queries: int) -> str:
        return self.ranked(queries)[0]

    @property
    def uses_packed(self) -> bool:
        return any(self.first(c) == PACKED for c in QUERY_COUNTS)

    def describe(self) -> str:
        """One line: the kernel of each pass size, and the timings behind it."""
        parts = []
        for at, count in enumerate(QUERY_COUNTS):
            ms = ", ".join(
                f"{name} {_ms(self.timings.get(name, ())[at : at + 1])}"
                for name in (*KERNELS, FLOAT32)
                if name in self.timings
            )
            parts.append(
                f"{count} quer{'y' if count == 1 else 'ies'} on {self.first(count)} ({ms})"
            )
        stopped = f"; stopped at a call slower than float32: {', '.join(self.stopped)}"
        where = "stored" if self.stored else "measured now"
        return (
            f"vector pass (dim {self.dim}, {self.rows} rows, {self.threads} torch threads, "
            f"{where}): " + "; ".join(parts) + (stopped if self.stopped else "")
        )

    def to_json(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "dim": self.dim,
            "rows": self.rows,
            "threads": self.threads,
            "timings": {k: list(v) for k, v in self.timings.items()},
            "stopped": list(self.stopped),
            "recipe": RECIPE,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> KernelChoice:
        timings = data["timings"]
        stopped = data["stopped"]
        if data.get("recipe") != RECIPE or not isinstance(timings, dict):
            raise ValueError("another recipe")
        assert isinstance(stopped, list)
        return cls(
            str(data["machine"]),
            int(str(data["dim"])),
            int(str(data["rows"])),
            int(str(data["threads"])),
            {str(k): tuple(None if x is None else float(x) for x in v) for k, v in timings.items()},
            tuple(str(s) for s in stopped),
            stored=True,
        )


def _ms(value: tuple[float | None, ...]) -> str:
    return "-" if not value or value[0] is None else f"{value[0]:.1f} ms"


def time_kernels(
    passes: Mapping[str, PassMaker],
    *,
    calls: int = CALLS,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, tuple[float | None, ...]], tuple[str, ...]]:
    """Median milliseconds of each kernel's pass (``passes``: :data:`FLOAT32` and any of
    :data:`KERNELS`) for each of :data:`QUERY_COUNTS`, and the kernels whose timing stopped.

    The float32 scan is timed first at each size; a kernel's timing stops at its first call
    slower than the slowest float32 call (the warm-up call: :data:`WARMUP_ALLOWANCE` times
    that), and it is then timed at no larger size."""
    timings: dict[str, list[float | None]] = {name: [] for name in passes}
    stopped: list[str] = []

    def timed(call: Callable[[], object]) -> float:
        start = clock()
        call()
        return (clock() - start) * 1000

    for count in QUERY_COUNTS:
        make = passes[FLOAT32](count)
        assert make is not None, "the float32 scan always exists"
        timed(make)
        base = [timed(make) for _ in range(calls)]
        timings[FLOAT32].append(statistics.median(base))
        limit = max(base)
        for name, maker in passes.items():
            if name == FLOAT32:
                continue
            call = None if name in stopped else maker(count)
            if call is None:
                timings[name].append(None)
                continue
            samples = [timed(call)]
            if samples[0] > WARMUP_ALLOWANCE * limit:
                stopped.append(name)
            else:
                samples = []
                while len(samples) < calls:
                    samples.append(timed(call))
                    if samples[-1] > limit:
                        stopped.append(name)
                        break
            timings[name].append(statistics.median(samples))
    return {name: tuple(ms) for name, ms in timings.items()}, tuple(stopped)


class KernelSelector:
    """The kernel choice of each vector dimension in this process: read from ``directory``
    (a file per machine key and dimension), else measured once in the background by
    ``submit`` (the packer's thread) and stored there. Until it lands, :meth:`choice` is
    None: the float32 scan serves."""

    def __init__(
        self,
        directory: Path | None,
        machine: Callable[[], str],
        measure: Callable[[int], KernelChoice],
        submit: Callable[[Callable[[], object]], None],
        *,
        searches: Gauge = SEARCHES,
    ) -> None:
        self.directory = directory
        self._machine = machine
        self._measure = measure
        self._submit = submit
        self._searches = searches
        self._choices: dict[int, KernelChoice] = {}
        self._pending: set[int] = set()
        #: Dimensions whose timing failed: the float32 scan serves them for the process.
        self._failed: set[int] = set()
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, *choices: KernelChoice) -> KernelSelector:
        """A selector that serves ``choices`` and never measures (tests, benchmarks)."""

        def refuse(dim: int) -> KernelChoice:
            raise LookupError(f"no kernel choice for dimension {dim}")

        selector = cls(None, lambda: "fixed", refuse, lambda job: None)
        selector._choices = {c.dim: c for c in choices}
        return selector

    def choice(self, dim: int) -> KernelChoice | None:
        """The choice for ``dim``-dimensional rows, or None while it is measured (queued
        now if it is neither held nor stored)."""
        found = self._choices.get(dim)
        if found is not None:
            return found
        with self._lock:
            if dim in self._pending or dim in self._choices or dim in self._failed:
                return self._choices.get(dim)
            stored = self._read(dim)
            if stored is not None:
                self._choices[dim] = stored
                return stored
            self._pending.add(dim)
        self._submit(lambda: self._measure_in_background(dim))
        return None

    def measure_now(self, dim: int) -> KernelChoice:
        """The stored choice, else one measured now and stored (``vancetope-rag prepare``)."""
        with self._lock:
            held = self._choices.get(dim) or self._read(dim)
        if held is None:
            held = self._measured(dim)
        with self._lock:
            self._choices[dim] = held
        return held

    def held(self) -> list[KernelChoice]:
        """The choices this process holds, by dimension."""
        return [self._choices[d] for d in sorted(self._choices)]

    def stored(self) -> list[KernelChoice]:
        """The choices stored for this machine key (what a new process would serve with)."""
        if self.directory is None or not any(self.directory.glob("vector-pass-*.json")):
            return []  # the machine key (it imports torch) is not worked out for nothing
        found = []
        for path in sorted(self.directory.glob(f"vector-pass-{self._machine()}-*.json")):
            choice = _read_choice(path)
            if choice is not None:
                found.append(choice)
        return found

    def _measure_in_background(self, dim: int) -> None:
        try:
            measured = self._measured(dim)
        except Exception as exc:  # the float32 scan keeps serving
            log.warning("vector pass kernels not measured, the float32 scan serves: %s", exc)
            with self._lock:
                self._failed.add(dim)
            return
        finally:
            with self._lock:
                self._pending.discard(dim)
        with self._lock:
            self._choices[dim] = measured
        log.info("%s", measured.describe())

    def _measured(self, dim: int) -> KernelChoice:
        # Searches answered meanwhile skew the timings: such a choice serves this process
        # but is not stored (as the embedded backend's: the next process measures again).
        quiet, begun = self._searches.count == 0, self._searches.begun
        measured = self._measure(dim)
        if self.directory is not None and quiet and self._searches.begun == begun:
            try:
                path = self._path(dim)
                atomic_write(path, lambda tmp: tmp.write_text(json.dumps(measured.to_json())))
            except OSError as exc:
                log.warning("cannot store the vector pass's kernel choice: %s", exc)
        return measured

    def _path(self, dim: int) -> Path:
        assert self.directory is not None
        return self.directory / f"vector-pass-{self._machine()}-{dim}.json"

    def _read(self, dim: int) -> KernelChoice | None:
        if self.directory is None:
            return None
        choice = _read_choice(self._path(dim))
        return choice if choice is not None and choice.machine == self._machine() else None


def _read_choice(path: Path) -> KernelChoice | None:
    try:
        return KernelChoice.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return None  # absent or unreadable: measured again
