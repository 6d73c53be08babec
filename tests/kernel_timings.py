"""Kernel timings to inject into the vector cache's kernel selection (tests never assert
which kernel wins a real timing)."""

from __future__ import annotations

from vancetope_rag.store.inprocess.scan_kernels import (
    FLOAT32,
    INT_MM,
    PACKED,
    WEIGHT_INT8,
    KernelChoice,
    KernelSelector,
)

#: The Intel Xeon of docs/benchmarks.md (2 cores, torch 2.13.0, two threads), ms of a pass
#: over 100k × 384 for 1, 2 and 8 queries ("The int8 pass on prepacked rows": packed, and
#: the plain kernels: weight-only for 1-2 queries, ``_int_mm`` for 8; "Pre-turn hook
#: latency": numpy's float32 product on one BLAS thread, 11.8 ms for one query, and no less
#: for more, reading the same 150 MB).
INTEL_XEON = {
    PACKED: (1.72, 1.92, 2.73),
    WEIGHT_INT8: (2.01, 2.44, None),
    INT_MM: (None, None, 4.19),
    FLOAT32: (11.8, 11.8, 11.8),
}
#: An AMD EPYC (Zen 4) measured, same torch: the packed kernel 447 ms a call, stopped.
AMD_EPYC = {
    PACKED: (447.0, None, None),
    WEIGHT_INT8: (1.6, 2.2, 9.0),
    INT_MM: (4.5, 4.6, 5.4),
    FLOAT32: (7.0, 7.5, 9.5),
}
#: The kernels that served before the selection: weight-only for one or two queries,
#: ``_int_mm`` for more, never the packed rows.
PLAIN = {
    PACKED: (None, None, None),
    WEIGHT_INT8: (2.0, 2.4, 9.0),
    INT_MM: (4.3, 4.4, 4.4),
    FLOAT32: (11.8, 11.8, 11.8),
}
ONLY_FLOAT32 = {FLOAT32: (11.8, 11.8, 11.8)}


def choice(
    dim: int, timings: dict[str, tuple[float | None, ...]], stopped: tuple[str, ...] = ()
) -> KernelChoice:
    return KernelChoice("injected", dim, 100_000, 2, timings, stopped)


def fixed(dim: int, timings: dict[str, tuple[float | None, ...]]) -> KernelSelector:
    """A selector serving ``timings`` for ``dim``-dimensional rows, never measuring."""
    return KernelSelector.fixed(choice(dim, timings))
