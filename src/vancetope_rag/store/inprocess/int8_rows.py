"""A RAG's rows as int8 × a per-row scale, and the passes that score queries against them.

What :mod:`.vector_cache` scans first: a pass gives every row an approximate score for each
query, and per query a bound on the error that holds for every row; the cache then rescores
exactly every row the bound leaves in doubt.

The kernels (which serves is timed on each machine: :mod:`.scan_kernels`; figures:
docs/benchmarks.md, "The int8 pass on prepacked rows" and "Kernels per CPU"):

- **Rows prepacked for oneDNN's int8 matmul** (``torch.ops.onednn.qlinear_pointwise``), the
  queries rounded to int8 in two steps (the query, then what that rounding left, each with
  a scale of its own: an error ~1/250 of one step's, smaller than a bfloat16 query's). On an
  Intel Xeon one pass reads the rows once, near memory speed: over 100k × 384 a pass of 1 to
  8 queries took 2.5–4.0 ms on one thread against 6.2–8.2 ms on the plain kernels
  (``bench/int8_pass.py``); on an AMD EPYC (Zen 4) it took 0.45-2.5 s. Packing takes
  ~0.16-0.7 s per 100k rows, so one thread of the process does it, one RAG's rows at a time,
  and only where this kernel was chosen. The rows written since (the tail) are
  scored in the same pass by ``torch._int_mm``, with the very same arithmetic, and the rows
  are packed again once the tail outgrows :data:`PACK_TAIL_MIN` and an eighth of the packed
  rows.
- **Torch's weight-only kernel** (``torch._weight_int8pack_mm``, bfloat16 queries).
- **``torch._int_mm``** with the queries rounded to int8 too.
- **The float32 rows** (numpy, one BLAS thread): what serves until the timings land, and
  wherever no int8 kernel beat it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from vancetope_rag.store.inprocess.background import SerialWorker
from vancetope_rag.store.inprocess.scan_kernels import (
    FLOAT32,
    INT_MM,
    PACKED,
    WEIGHT_INT8,
    KernelChoice,
    KernelSelector,
    PassMaker,
    time_kernels,
)

log = logging.getLogger(__name__)

#: The fewest rows written since the last packing that make the rows be packed again (and
#: an eighth of the packed rows: a 100k-row RAG is packed again every 12.5k rows written).
PACK_TAIL_MIN = 4096
PACK_TAIL_FRACTION = 8


#: One pass: (queries, rows) → approximate scores and each query's bound.
_Pass = Callable[
    [npt.NDArray[np.float32], int], tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]
]


@dataclass(frozen=True)
class _Packed:
    """The first ``rows`` rows in oneDNN's layout (they never change: rows are only
    appended, a deleted row is masked by the cache)."""

    rows: int
    weights: Any
    zero_points: Any  # int64 zeros, one per row


class Int8Rows:
    """Rows as int8 × per-row scale in buffers with spare rows (see :class:`.vector_cache._Rows`),
    scored by the kernel ``kernels`` chose for this machine (None: the float32 rows, never
    packed). ``floats``: the float32 buffer the rows are written to first (the cache's);
    None keeps a copy of its own."""

    # Relative rounding of a bfloat16 value (8 significant bits), applied generously below.
    _BF16 = 2.0**-8

    def __init__(
        self,
        torch: Any,
        matrix: npt.NDArray[np.float32],
        capacity: int,
        *,
        floats: npt.NDArray[np.float32] | None = None,
        kernels: KernelSelector | None = None,
    ) -> None:
        self.torch = torch
        self.kernels = kernels
        self._own_floats = floats is None
        self.floats = (
            np.zeros((capacity, matrix.shape[1]), dtype=np.float32) if floats is None else floats
        )
        #: The kernel of the last pass (what serves, for status and tests).
        self.last_kernel = FLOAT32
        self.weights = torch.zeros((capacity, matrix.shape[1]), dtype=torch.int8)
        self.scales = torch.ones(capacity, dtype=torch.bfloat16)
        self.scales_f32 = torch.ones(capacity, dtype=torch.float32)  # the same values
        self.int_mm = hasattr(torch, "_int_mm")
        #: torch's weight-only kernel reads past the rows when the dimension is not a multiple
        #: of 16 on CPU (torch 2.13: a segfault at 8, 24 or 40 dimensions over 100k rows):
        #: never run there, neither timed nor served.
        self.weight_only = matrix.shape[1] % WEIGHT_ONLY_MULTIPLE == 0
        self.row_error = 0.0
        self.max_row_norm = 0.0
        self.max_float_norm = 0.0
        self.used = 0
        #: Whether rows are packed for oneDNN (False: never, or a packing failed).
        self.packs = self.int_mm and onednn_int8(torch)
        self.packed: _Packed | None = None
        #: Set while no packing of these rows is queued or running.
        self._settled = threading.Event()
        self._settled.set()
        self._queue_lock = threading.Lock()
        self.write(0, matrix)

    def write(self, at: int, matrix: npt.NDArray[np.float32]) -> None:
        """Quantize ``matrix`` into rows ``at``… The error bounds are maxima over every row
        ever written (a row deleted since leaves them larger than needed, never too small),
        so the rescoring stays exact for every entry that reads these buffers."""
        torch = self.torch
        q8, scale = _to_int8(matrix)
        # Per-row reconstruction error, with the scale as the kernel will see it (bfloat16).
        scale_bf16 = torch.from_numpy(scale).to(torch.bfloat16)
        recon = q8.astype(np.float32) * scale_bf16.float().numpy()[:, None]
        error = float(np.linalg.norm(matrix - recon, axis=1).max(initial=0.0))
        norm = float(np.linalg.norm(recon, axis=1).max(initial=0.0))
        self.max_float_norm = max(
            self.max_float_norm, float(np.linalg.norm(matrix, axis=1).max(initial=0.0))
        )
        if self._own_floats:
            self.floats[at : at + len(matrix)] = matrix
        self.weights[at : at + len(matrix)] = torch.from_numpy(q8)
        self.scales[at : at + len(matrix)] = scale_bf16
        self.scales_f32[at : at + len(matrix)] = scale_bf16.float()
        self.row_error = max(self.row_error, error)
        self.max_row_norm = max(self.max_row_norm, norm)
        self.used = max(self.used, at + len(matrix))
        self._pack_if_due()

    def scores(
        self, queries: npt.NDArray[np.float32], n: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """Approximate scores of the first ``n`` rows for each query (a row of ``queries``),
        in one pass over the rows, and per query a bound on |approximate - exact| valid for
        every row."""
        packed = self.packed
        if self._due(packed):
            self._pack_if_due()  # e.g. in a process forked while the packer ran
        for kernel in self.ranked(len(queries)):
            if kernel == PACKED and (packed is None or packed.rows > n):
                continue  # not packed yet, or an older prefix than the packed rows
            if (kernel == INT_MM and not self.int_mm) or (
                kernel == WEIGHT_INT8 and not self.weight_only
            ):
                continue
            self.last_kernel = kernel
            if kernel == PACKED:
                assert packed is not None
                return self._scores_packed(queries, n, packed)
            return self._passes[kernel](queries, n)
        raise AssertionError("the float32 scan always serves")  # pragma: no cover

    def ranked(self, queries: int) -> tuple[str, ...]:
        """The kernels that may serve a pass of ``queries`` here, best first (the float32
        scan alone until the choice lands)."""
        choice = self.choice()
        return choice.ranked(queries) if choice is not None else (FLOAT32,)

    def choice(self) -> KernelChoice | None:
        return None if self.kernels is None else self.kernels.choice(self.weights.shape[1])

    @property
    def _passes(self) -> dict[str, _Pass]:
        return {
            WEIGHT_INT8: self._scores_weight_int8,
            INT_MM: self._scores_int8_queries,
            FLOAT32: self._scores_float32,
        }

    def _scores_weight_int8(
        self, queries: npt.NDArray[np.float32], n: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """:meth:`scores` by torch's weight-only kernel, the queries in bfloat16."""
        torch = self.torch
        qt = torch.from_numpy(queries).to(torch.bfloat16)
        weights, scales = self.weights[:n], self.scales[:n]  # prefixes: still contiguous
        approx = torch._weight_int8pack_mm(qt, weights, scales).float().numpy()
        q_err = np.linalg.norm(queries - qt.float().numpy(), axis=1)
        return approx, self._bound(approx, q_err, 3 * self._BF16)  # bfloat16 output

    def _scores_float32(
        self, queries: npt.NDArray[np.float32], n: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """:meth:`scores` on the float32 rows, one product per query (a product of several
        queries changes a query's last bits with the others: each query's scores are its
        own). The rounding of products of unit vectors is below ``dim`` × 2^-24; the
        rescoring's row-by-row products settle the last bits."""
        rows = self.floats[:n]
        approx = np.empty((len(queries), n), dtype=np.float32)
        for i, q in enumerate(queries):
            approx[i] = rows @ q
        dim = queries.shape[1]
        norms = np.linalg.norm(queries.astype(np.float64), axis=1) * max(self.max_float_norm, 1.0)
        return approx, norms * dim * 2.0**-23 + 1e-4

    def _scores_packed(
        self, queries: npt.NDArray[np.float32], n: int, packed: _Packed
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """:meth:`scores` on the packed rows, plus the tail written since by ``torch._int_mm``.

        Both give each row int32 products (exact) times the row's scale, rounded once to
        float32, so a row scores the same bits in the packed rows and in the tail; whatever
        else a pass holds, each query's scores are its own (no sum runs across queries)."""
        torch = self.torch
        q8, steps, recon = _two_step_int8(queries)
        x = torch.from_numpy(q8)
        head = torch.ops.onednn.qlinear_pointwise(
            x, 1.0, 0, packed.weights, self.scales_f32[: packed.rows], packed.zero_points,
            None, 1.0, 0, torch.float32, "none", [], "",
        )  # fmt: skip
        if n > packed.rows:
            tail = torch._int_mm(x, self.weights[packed.rows : n].t()).float()
            head = torch.cat([head, tail.mul_(self.scales_f32[packed.rows : n])], dim=1)
        b = len(queries)
        s = torch.from_numpy(steps)[:, None]
        approx = head[:b].mul_(s[:b]).add_(head[b:].mul_(s[b:])).numpy()
        q_err = np.linalg.norm(queries.astype(np.float64) - recon, axis=1)
        # four float32 roundings (each step's product and scale, the sum), on terms whose
        # size is at most the largest score plus the second step's share: 16 is generous
        return approx, self._bound(approx, q_err, 16 * 2.0**-24)

    def _scores_int8_queries(
        self, queries: npt.NDArray[np.float32], n: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """:meth:`scores` with the queries rounded to int8 (a scale per query): the products
        are exact integers, so the error is the two roundings and float32's."""
        torch = self.torch
        q8, q_scale = _to_int8(queries)
        q_err = np.linalg.norm(queries - q8.astype(np.float32) * q_scale[:, None], axis=1)
        dots = torch._int_mm(torch.from_numpy(q8), self.weights[:n].t())  # int32, exact
        scaled = dots.float().mul_(self.scales_f32[:n]).mul_(torch.from_numpy(q_scale)[:, None])
        approx = scaled.numpy()
        # float32 rounding: the int32 sum's conversion (past 2^24) and the two products
        return approx, self._bound(approx, q_err, 4 * 2.0**-24)

    def _bound(
        self, approx: npt.NDArray[np.float32], q_err: npt.NDArray[np.floating[Any]], rounding: float
    ) -> npt.NDArray[np.float64]:
        """Per query, a bound on |approximate - exact| for every row: exact - approx =
        (q - q̃)·x̃ + q·(x - x̃) + the output's rounding (``rounding`` relative to the largest
        score, at least 1), plus accumulation slack."""
        top = np.abs(approx).max(axis=1) if approx.shape[1] else np.zeros(len(approx))
        bound: npt.NDArray[np.float64] = (
            q_err * self.max_row_norm + self.row_error + rounding * np.maximum(top, 1.0)
        )
        return bound + 1e-4

    def _due(self, packed: _Packed | None) -> bool:
        """Whether the rows are to be packed (again): the packed kernel was chosen here, and
        they were never packed yet, or the tail written since ``packed`` outgrew
        :data:`PACK_TAIL_MIN` and an eighth of its rows."""
        if not self.packs:
            return False
        choice = self.choice()
        if choice is None or not choice.uses_packed:
            return False
        if packed is None:
            return True
        return self.used - packed.rows >= max(PACK_TAIL_MIN, packed.rows // PACK_TAIL_FRACTION)

    def _pack_if_due(self) -> None:
        """Queue these rows for the packer if they are due and not queued."""
        if not self._due(self.packed):
            return
        with self._queue_lock:
            queued = not self._settled.is_set()
            self._settled.clear()
        if queued:  # it looks again when it is done (in a forked process: once revived)
            _PACKER.revive()
        else:
            _PACKER.submit(self._pack_while_due)

    def _pack_while_due(self) -> None:
        try:
            while self._due(self.packed):
                self.pack(self.used)
        finally:
            self._settled.set()

    def pack(self, rows: int) -> None:
        """Pack the first ``rows`` rows (what the packer does; here, at once)."""
        torch = self.torch
        try:
            weights = torch.ops.onednn.qlinear_prepack(self.weights[:rows], None)
        except Exception as exc:  # torch's errors are RuntimeError and more
            log.warning("int8 rows not packed for oneDNN, the plain kernels serve: %s", exc)
            self.packs = False
            return
        self.packed = _Packed(rows, weights, torch.zeros(rows, dtype=torch.int64))

    def wait_packed(self, timeout: float | None = None) -> bool:
        """Wait until no packing of these rows is queued or running; True if none is due."""
        self._settled.wait(timeout)
        return self.packed is not None and not self._due(self.packed)


#: One thread packs for the whole process, one set of rows at a time: a process that loads
#: many RAGs at once must not start a packing thread (with torch's threads) for each.
_PACKER = SerialWorker("vancetope-rag-int8-pack")


def _to_int8(
    vectors: npt.NDArray[np.floating[Any]],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Each row rounded to int8 with a scale of its own (its largest magnitude over 127; 1 for
    a zero row), and the scales."""
    scale: npt.NDArray[np.float32] = (np.abs(vectors).max(axis=1) / 127.0).astype(np.float32)
    scale[scale == 0] = 1.0
    q8 = np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8)
    return q8, scale


def _two_step_int8(
    queries: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """Each query as int8 rows q1 (the query) and q2 (what q1 left), stacked [all q1; all q2],
    their scales, and what they stand for: ``s1·q1 + s2·q2`` per query, in float64."""
    q1, s1 = _to_int8(queries)
    rest = queries - q1.astype(np.float32) * s1[:, None]
    q2, s2 = _to_int8(rest)
    recon = q1.astype(np.float64) * s1[:, None] + q2.astype(np.float64) * s2[:, None]
    return np.concatenate([q1, q2]), np.concatenate([s1, s2]), recon


@functools.cache
def onednn_int8(torch: Any) -> bool:
    """Whether this torch has oneDNN's int8 matmul on prepacked rows and it gives exactly
    ``torch._int_mm``'s products times the row scales (checked once, on a small matrix)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        gen = torch.Generator().manual_seed(0)
        w = torch.randint(-127, 128, (40, 64), dtype=torch.int8, generator=gen)
        x = torch.randint(-127, 128, (3, 64), dtype=torch.int8, generator=gen)
        scales = torch.rand(40, generator=gen)
        got = torch.ops.onednn.qlinear_pointwise(
            x, 1.0, 0, torch.ops.onednn.qlinear_prepack(w, None), scales,
            torch.zeros(40, dtype=torch.int64), None, 1.0, 0, torch.float32, "none", [], "",
        )  # fmt: skip
        return bool(torch.equal(got, torch._int_mm(x, w.t()).float() * scales))
    except Exception as exc:  # any failure: the plain kernels serve
        log.info("no oneDNN int8 matmul on prepacked rows: %s", exc)
        return False


#: The dimensions torch's weight-only int8 kernel is safe at: multiples of this.
WEIGHT_ONLY_MULTIPLE = 16


def measure_rows(dim: int) -> int:
    """Rows the kernels are timed on: 100k at 384 dimensions (the pre-turn benchmark's size,
    past the caches of the CPUs measured), as many bytes at other dimensions."""
    return max(4096, min(100_000, 38_400_000 // max(dim, 1)))


def measure_kernels(torch: Any, dim: int, machine: str) -> KernelChoice:
    """Time each kernel's pass over random unit rows (:func:`.scan_kernels.time_kernels`)."""
    rows = measure_rows(dim)
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((rows, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    int8 = Int8Rows(torch, matrix, rows)  # no selector: it never packs by itself

    def queries(count: int) -> npt.NDArray[np.float32]:
        q = rng.standard_normal((count, dim), dtype=np.float32)
        unit: npt.NDArray[np.float32] = q / np.linalg.norm(q, axis=1, keepdims=True)
        return unit

    def packed(count: int) -> Any:
        if not int8.packs:
            return None
        if int8.packed is None:
            int8.pack(rows)  # packing is not part of a pass: done once, untimed
        done = int8.packed
        if done is None:
            return None
        q = queries(count)
        return lambda: int8._scores_packed(q, rows, done)

    def plain(kernel: str) -> PassMaker:
        def make(count: int) -> Any:
            if (kernel == INT_MM and not int8.int_mm) or (
                kernel == WEIGHT_INT8 and not int8.weight_only
            ):
                return None
            q, run = queries(count), int8._passes[kernel]
            return lambda: run(q, rows)

        return make

    passes: dict[str, PassMaker] = {
        FLOAT32: plain(FLOAT32),
        PACKED: packed,
        WEIGHT_INT8: plain(WEIGHT_INT8),
        INT_MM: plain(INT_MM),
    }
    timings, stopped = time_kernels(passes)
    return KernelChoice(machine, dim, rows, int(torch.get_num_threads()), timings, stopped)
