"""An in-process exact vector index per RAG, kept coherent with the SQLite store.

sqlite-vec's ``vec0`` KNN scans every vector of the partition through SQLite's virtual-table
machinery: ~80 ms per turn at 100k 384-dim chunks in ``bench/pre_turn.py``, too slow for a
pre-turn hook. The same exact search as one matrix-vector product takes a few ms (figures and
how they were taken: docs/benchmarks.md, "Pre-turn hook latency").

Coherence (:mod:`.inprocess.epoch_cache`): a query reads the RAG's epoch in its snapshot and
uses the matrix held at that epoch. This process's writes are absorbed as they commit; a
write of another process makes the matrix reload — unless it was loaded moments ago (the
RAG is being written right now), in which case the caller falls back to sqlite-vec. Results
are always exact and always reflect committed data; only the speed varies.

Absorbing a write costs its own rows, not the RAG's: the rows live in buffers with spare rows
(:class:`_Rows`), a write appends its rows in place and masks the rows it deleted, and the
entry before it keeps reading its own prefix. Past a quarter of deleted rows, or when the
spare rows run out, the live rows are copied into new buffers (figures: docs/benchmarks.md,
"Hybrid under writes").

Speed: a float32 scan of 100k × 384 reads 150 MB per query (memory-bound). When
torch is present, rows are also kept as int8 with a per-row scale (38 MB read) and scored
first by the kernel timed fastest on this machine (:mod:`.inprocess.scan_kernels`: one of
torch's int8 kernels of :mod:`.inprocess.int8_rows`, or the float32 rows themselves where none
beat them, and until the timings land). That approximation is then made
exact: every row whose approximate score is within a proven error bound of the k-th best
*exact* score is rescored in float32, row by row, so the top-k equals the float32 scan's
whichever pass found the candidates (equal scores rank in row order). Searches of one RAG
that arrive while its scans run (one per core the kernel's threads leave idle) wait and are
scanned together in the next pass: one read of the rows serves up to :data:`SCAN_CAP`
queries for little more than one, and a lone search never waits. BLAS runs with one thread
here: OpenBLAS's spinning worker threads otherwise starve the model's own threads on small
machines (query embedding 10 ms → 200-400 ms after a two-thread numpy product).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vancetope_rag.coalesce import Coalescer, slots_for
from vancetope_rag.machine import machine_key
from vancetope_rag.store.inprocess.epoch_cache import EpochCache, Key
from vancetope_rag.store.inprocess.int8_rows import _PACKER, Int8Rows, measure_kernels
from vancetope_rag.store.inprocess.scan_kernels import RECIPE, KernelChoice, KernelSelector


class _Rows:
    """A RAG's vectors (float32, and int8 when quantized) in buffers with spare rows, shared
    by the successive entries of one RAG. Each entry reads its own prefix of rows; the entry
    whose prefix ends where the written rows end may append in place (its readers and the
    older entries never look past their prefix). Any other entry copies into new buffers."""

    def __init__(
        self, matrix: npt.NDArray[np.float32], torch: Any | None, kernels: KernelSelector
    ) -> None:
        n, dim = matrix.shape
        capacity = n + max(64, n // 8)
        self.matrix = np.zeros((capacity, dim), dtype=np.float32)
        self.matrix[:n] = matrix
        self.int8 = (
            None
            if torch is None
            else Int8Rows(torch, matrix, capacity, floats=self.matrix, kernels=kernels)
        )
        self.used = n

    def append(self, at: int, vectors: npt.NDArray[np.float32]) -> bool:
        """Write ``vectors`` after the first ``at`` rows, if those are all the written rows
        and the spare rows suffice."""
        end = at + len(vectors)
        if at != self.used or end > len(self.matrix):
            return False
        self.matrix[at:end] = vectors
        if self.int8 is not None:
            self.int8.write(at, vectors)
        self.used = end
        return True


#: (query, k, masked) → (row indexes, exact scores) of a set that provably holds its top-k.
_Scan = tuple[npt.NDArray[np.float32], int, bool]
_Found = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]

#: The most concurrent searches of one RAG scanned in one pass over its int8 rows (16 gave
#: no more turns/s than 8 with 16 turns in flight: docs/benchmarks.md).
SCAN_CAP = 8


@dataclass
class _Entry:
    epoch: int
    rowids: npt.NDArray[np.int64]  # ascending; rows deleted since the load stay, masked
    alive: npt.NDArray[np.bool_]
    rows: _Rows  # the entry's vectors: its first len(rowids) rows, L2-normalised
    loaded_at: float
    previous: _Entry | None = None  # the entry before the last applied write, for old snapshots
    #: Concurrent searches of this entry share one int8 pass (a lone search runs at once).
    scans: Coalescer[_Scan, _Found] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        int8 = self.rows.int8
        threads = int8.torch.get_num_threads() if int8 is not None else 1
        self.scans = Coalescer(self._scan, SCAN_CAP, slots_for(threads))

    @property
    def matrix(self) -> npt.NDArray[np.float32]:
        return self.rows.matrix[: len(self.rowids)]

    @property
    def quantized(self) -> Int8Rows | None:
        return self.rows.int8

    @property
    def live(self) -> int:
        return int(np.count_nonzero(self.alive))

    def _scan(self, searches: Sequence[_Scan]) -> list[_Found]:
        quantized = self.quantized
        assert quantized is not None
        queries = np.stack([q for q, _, _ in searches])
        approx, bounds = quantized.scores(queries, len(self.rowids))
        return [
            _rescored(self, approx[i], float(bounds[i]), q, k, masked=masked)
            for i, (q, k, masked) in enumerate(searches)
        ]


#: Compact an entry (copy its live rows into new buffers) past this fraction of deleted rows.
_DEAD_FRACTION = 0.25


def _load_torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if hasattr(torch, "_weight_int8pack_mm") else None


_blas_capped = False


def _cap_blas_threads() -> None:
    """Hold BLAS to one thread for the rest of the process (see the module docstring).

    Restoring the old limit after each product is not enough: waking the second BLAS thread
    again is what starves torch (measured: pre-turn p50 430 ms instead of 15 ms at 10k rows).
    """
    global _blas_capped
    if _blas_capped:
        return
    _blas_capped = True
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - then numpy's own default applies
        return
    threadpool_limits(limits=1, user_api="blas")


def kernel_selector(directory: Path | None) -> KernelSelector:
    """The vector pass's kernel choices, stored in ``directory`` (None: measured by each
    process), measured on the packer's thread."""
    return KernelSelector(directory, _kernel_machine, _measure_kernels, _PACKER.submit)


def _kernel_machine() -> str:
    torch = _load_torch()
    threads = torch.get_num_threads() if torch is not None else 0
    versions = {"torch": getattr(torch, "__version__", "-"), "numpy": np.__version__}
    return machine_key("vector pass", threads, versions, RECIPE)


def _measure_kernels(dim: int) -> KernelChoice:
    torch = _load_torch()
    if torch is None:  # pragma: no cover - only rows held with torch ask
        raise RuntimeError("torch is not installed")
    _cap_blas_threads()  # the float32 scan is timed as it serves: on one BLAS thread
    return measure_kernels(torch, dim, _kernel_machine())


_UNSTORED = kernel_selector(None)


#: One write (:meth:`VectorCache.apply`): the rowids it removed, the (rowid, float32 blob) it
#: added; new rowids come from a high-water mark, so appending keeps the rows in rowid order.
VectorDelta = tuple[tuple[int, ...], tuple[tuple[int, bytes], ...]]

Loader = Callable[[], tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return (vector / (float(np.linalg.norm(vector)) or 1.0)).astype(np.float32)


class VectorCache(EpochCache[_Entry, VectorDelta]):
    """LRU of per-RAG matrices, bounded by the total number of rows held."""

    def __init__(
        self,
        *,
        max_rows: int = 2_000_000,
        reload_cooldown_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        quantize_min_rows: int = 20_000,
        kernels: KernelSelector | None = None,
    ) -> None:
        super().__init__(max_rows=max_rows, reload_cooldown_s=reload_cooldown_s, clock=clock)
        #: Below this many rows the float32 scan is already fast: no int8 copy.
        self.quantize_min_rows = quantize_min_rows
        #: Which kernel scores the first pass (default: this process's, stored nowhere).
        self.kernels = kernels or _UNSTORED

    def kernel_choices(self) -> list[KernelChoice]:
        """The kernel choices serving this process, else those stored for this machine."""
        return self.kernels.held() or self.kernels.stored()

    def search(
        self,
        key: Key,
        epoch: int,
        vector: npt.NDArray[np.float32],
        top_k: int,
        load: Loader,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        """(rowids, cosine scores) best first, or None: the caller should ask sqlite-vec."""
        entry = self._current(key, epoch, load)
        if entry is None:
            return None
        live = entry.live
        if live == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        q = _unit(vector)
        k = min(top_k, live)
        masked = live < len(entry.rowids)  # some rows deleted: mask them (else a no-op)
        _cap_blas_threads()
        if entry.quantized is not None and k * 8 < live:
            idx, exact = entry.scans.submit((q, k, masked))
        else:
            exact = entry.matrix @ q
            if masked:
                exact[~entry.alive] = -np.inf  # deleted rows never rank
            idx = np.arange(len(exact))
        order = _best(exact, idx, k)
        return entry.rowids[idx[order]], exact[order]

    def cosines(
        self,
        key: Key,
        epoch: int,
        rowids: npt.NDArray[np.int64],
        vector: npt.NDArray[np.float32],
        load: Loader,
    ) -> npt.NDArray[np.float32] | None:
        """Cosine similarity of ``vector`` to each of ``rowids`` (NaN for a rowid the RAG does
        not hold), or None: the caller should ask sqlite-vec. What the lexical side of a
        hybrid query uses: a ``vec0`` point lookup costs ~0.2 ms per row at 100k chunks."""
        entry = self._current(key, epoch, load)
        if entry is None:
            return None
        out = np.full(len(rowids), np.nan, dtype=np.float32)
        if len(entry.rowids) == 0 or len(rowids) == 0:
            return out
        at = np.minimum(np.searchsorted(entry.rowids, rowids), len(entry.rowids) - 1)
        held = (entry.rowids[at] == rowids) & entry.alive[at]
        _cap_blas_threads()
        out[held] = entry.matrix[at[held]] @ _unit(vector)
        return out

    def _advance(self, old: _Entry, delta: VectorDelta) -> _Entry | None:
        removed, added = delta
        dim = old.matrix.shape[1]
        new_ids = np.asarray([r for r, _ in added], dtype=np.int64)
        if len(new_ids) and (
            (len(old.rowids) and new_ids.min() <= old.rowids[-1])
            or np.any(np.diff(new_ids) <= 0)
            or any(len(b) != 4 * dim for _, b in added)
        ):
            return None
        vectors = np.frombuffer(b"".join(b for _, b in added), dtype=np.float32).reshape(-1, dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        vectors = (vectors / norms).astype(np.float32)
        alive = old.alive & ~np.isin(old.rowids, np.asarray(removed, dtype=np.int64))
        dead = len(alive) - int(np.count_nonzero(alive))
        if dead <= _DEAD_FRACTION * max(len(alive), 1) and old.rows.append(
            len(old.rowids), vectors
        ):
            # in place: a row appended, a deleted row masked; nothing of ``old`` moves
            rowids = np.concatenate([old.rowids, new_ids])
            alive = np.concatenate([alive, np.ones(len(new_ids), dtype=np.bool_)])
            return _Entry(old.epoch, rowids, alive, old.rows, old.loaded_at)
        rowids = np.concatenate([old.rowids[alive], new_ids])
        matrix = np.concatenate([old.matrix[alive], vectors])
        rows = _Rows(
            matrix, old.rows.int8.torch if old.rows.int8 is not None else None, self.kernels
        )
        return _Entry(old.epoch, rowids, np.ones(len(rowids), np.bool_), rows, old.loaded_at)

    def _current(self, key: Key, epoch: int, load: Loader) -> _Entry | None:
        """The RAG's entry at ``epoch``, loading it if due; None to fall back."""
        held, due = self._lookup(key, epoch)
        if not due:
            return held
        rowids, matrix = load()
        if len(rowids) > self.max_rows:
            return None
        order = np.argsort(rowids, kind="stable")  # sorted by rowid: cosines() looks rows up
        rowids, matrix = rowids[order], matrix[order]
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        matrix = np.ascontiguousarray(matrix / norms, dtype=np.float32)
        torch = _load_torch() if len(rowids) >= self.quantize_min_rows else None
        alive = np.ones(len(rowids), dtype=np.bool_)
        entry = _Entry(epoch, rowids, alive, _Rows(matrix, torch, self.kernels), self._clock())
        self._put(key, entry, epoch)
        return entry


def _rescored(
    entry: _Entry,
    approx: npt.NDArray[np.float32],
    bound: float,
    q: npt.NDArray[np.float32],
    k: int,
    *,
    masked: bool,
) -> _Found:
    """Row indexes and exact scores of a set of rows that provably holds the exact top-k of
    ``q``, from its approximate scores and their error bound (``masked``: some rows are
    deleted; False skips the masks, which then change nothing)."""
    if masked:
        approx = np.where(entry.alive, approx, -np.inf)  # deleted rows are never candidates
    n_cand = min(len(approx), max(4 * k, k + 64))
    cand = np.argpartition(-approx, n_cand - 1)[:n_cand]
    exact = _dots(entry.matrix[cand], q)
    if masked:
        exact[~entry.alive[cand]] = -np.inf  # when fewer rows live than candidates
    kth = float(np.partition(exact, len(exact) - k)[len(exact) - k])
    # Any row that could still beat the k-th best exact score is scored exactly too: the
    # rows of ``approx + bound >= kth`` not already candidates, in ascending order (what
    # ``np.setdiff1d`` gave, without sorting both sides).
    maybe = approx + bound >= kth
    maybe[cand] = False
    extra = np.flatnonzero(maybe)
    if len(extra):
        cand = np.concatenate([cand, extra])
        exact = np.concatenate([exact, _dots(entry.matrix[extra], q)])
    return cand.astype(np.int64), exact


def _dots(rows: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each row's dot product with ``q``, row by row: the same float32 whatever rows are
    scored with it. A BLAS product's blocking changes the last bit of a row's score with the
    rows around it, and the candidates of a query differ by the pass that found them (alone,
    or with others: :meth:`Int8Rows.scores`)."""
    dots: npt.NDArray[np.float32] = np.einsum("ij,j->i", rows, q)
    return dots


def _best(
    exact: npt.NDArray[np.float32], idx: npt.NDArray[np.int64], k: int
) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` best scores, best first; equal scores in row order, so the same
    rows come in the same order whichever candidates (and in whatever order) held them."""
    if k < len(exact):
        kth = np.partition(exact, len(exact) - k)[len(exact) - k]
        keep = np.flatnonzero(exact >= kth)  # every row tied with the k-th too
    else:
        keep = np.arange(len(exact))
    return keep[np.lexsort((idx[keep], -exact[keep]))][:k]
