"""An in-process exact vector index per RAG, kept coherent with the SQLite store.

sqlite-vec's ``vec0`` KNN scans every vector of the partition through SQLite's virtual-table
machinery: ~80 ms per turn at 100k 384-dim chunks in ``bench/pre_turn.py``, too slow for a
pre-turn hook. The same exact search as one matrix-vector product takes a few ms (figures and
how they were taken: docs/benchmarks.md, "Pre-turn hook latency").

Coherence: every chunk write bumps the RAG's epoch (a counter of its chunk writes) in the
same transaction; a query reads the epoch (one indexed row) and uses the matrix only if it
was loaded at that epoch. When the RAG changed, the matrix is reloaded — unless it was
reloaded moments ago (the RAG is being written right now), in which case the caller falls
back to sqlite-vec, so a busy indexer never makes every query pay for a reload. Results are
always exact and always reflect committed data; only the speed varies.

Speed: a float32 scan of 100k × 384 reads 150 MB per query (memory-bound). When
torch is present, rows are also kept as int8 with a per-row scale and scored first with
torch's int8 weight-only kernel (38 MB read). That approximation is then made exact:
every row whose approximate score is within a proven error bound of the k-th best *exact*
score is rescored in float32, so the top-k equals the float32 scan's. BLAS runs with one thread
here: OpenBLAS's spinning worker threads otherwise starve the model's own threads on small
machines (query embedding 10 ms → 200-400 ms after a two-thread numpy product).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Key = tuple[str, str, str]  # tenant, project, rag id


@dataclass
class _Entry:
    epoch: int
    rowids: npt.NDArray[np.int64]  # ascending
    matrix: npt.NDArray[np.float32]  # rows L2-normalised, in rowid order
    loaded_at: float
    quantized: _Int8Rows | None = None
    previous: _Entry | None = None  # the entry before the last applied write, for old snapshots


class _Int8Rows:
    """Rows as int8 × per-row scale, scored with torch's int8 weight-only matmul."""

    # Relative rounding of a bfloat16 value (8 significant bits), applied generously below.
    _BF16 = 2.0**-8

    def __init__(self, torch: Any, matrix: npt.NDArray[np.float32]) -> None:
        self.torch = torch
        scale = np.abs(matrix).max(axis=1) / 127.0 if len(matrix) else np.zeros(0)
        scale[scale == 0] = 1.0
        q8 = np.clip(np.rint(matrix / scale[:, None]), -127, 127).astype(np.int8)
        # Per-row reconstruction error, with the scale as the kernel will see it (bfloat16).
        scale_bf16 = torch.from_numpy(scale.astype(np.float32)).to(torch.bfloat16)
        recon = q8.astype(np.float32) * scale_bf16.float().numpy()[:, None]
        self.row_error = float(np.linalg.norm(matrix - recon, axis=1).max(initial=0.0))
        self.max_row_norm = float(np.linalg.norm(recon, axis=1).max(initial=0.0))
        self.weights = torch.from_numpy(q8)
        self.scales = scale_bf16

    def advanced(self, keep: npt.NDArray[np.bool_], new: npt.NDArray[np.float32]) -> _Int8Rows:
        """These rows where ``keep``, then ``new`` quantized. The error bounds stay maxima over
        the rows (an old maximum still bounds the rows kept), so the rescoring stays exact."""
        added = _Int8Rows(self.torch, new)
        out = object.__new__(_Int8Rows)
        out.torch = self.torch
        mask = self.torch.from_numpy(keep)
        out.weights = self.torch.cat([self.weights[mask], added.weights])
        out.scales = self.torch.cat([self.scales[mask], added.scales])
        out.row_error = max(self.row_error, added.row_error)
        out.max_row_norm = max(self.max_row_norm, added.max_row_norm)
        return out

    def scores(self, q: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.float32], float]:
        """Approximate scores and a bound on |approximate - exact| valid for every row."""
        torch = self.torch
        qt = torch.from_numpy(q)[None, :].to(torch.bfloat16)
        approx = torch._weight_int8pack_mm(qt, self.weights, self.scales).float().numpy()[0]
        q_err = float(np.linalg.norm(q - qt.float().numpy()[0]))
        top = float(np.abs(approx).max()) if len(approx) else 0.0
        # exact - approx = (q - q̃)·x̃ + q·(x - x̃) + output rounding (+ accumulation slack).
        bound = q_err * self.max_row_norm + self.row_error + 3 * self._BF16 * max(top, 1.0)
        return approx, bound + 1e-4


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


#: Writes of this process kept per RAG, for a reload that lands behind them.
_LOG_HELD = 64

_Step = tuple[int, tuple[int, ...], tuple[tuple[int, bytes], ...]]

Loader = Callable[[], tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]


def _unit(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return (vector / (float(np.linalg.norm(vector)) or 1.0)).astype(np.float32)


class VectorCache:
    """LRU of per-RAG matrices, bounded by the total number of rows held."""

    def __init__(
        self,
        *,
        max_rows: int = 2_000_000,
        reload_cooldown_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        quantize_min_rows: int = 20_000,
    ) -> None:
        self.max_rows = max_rows
        #: Below this many rows the float32 scan is already fast: no int8 copy.
        self.quantize_min_rows = quantize_min_rows
        self.reload_cooldown_s = reload_cooldown_s
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        #: This process's recent writes per held RAG: from epoch → (to epoch, removed rowids,
        #: added (rowid, float32 blob)); see :meth:`apply`.
        self._log: dict[Key, OrderedDict[int, _Step]] = {}
        self._lock = threading.Lock()
        self.reloads = 0

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
        if len(entry.rowids) == 0:
            return entry.rowids, np.zeros(0, dtype=np.float32)
        q = _unit(vector)
        k = min(top_k, len(entry.rowids))
        _cap_blas_threads()
        if entry.quantized is not None and k * 8 < len(entry.rowids):
            idx, exact = self._quantized_top(entry, entry.quantized, q, k)
        else:
            exact = entry.matrix @ q
            idx = np.arange(len(exact))
        top = np.argpartition(-exact, k - 1)[:k] if k < len(exact) else np.arange(len(exact))
        order = top[np.argsort(-exact[top], kind="stable")]
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
        held = entry.rowids[at] == rowids
        _cap_blas_threads()
        out[held] = entry.matrix[at[held]] @ _unit(vector)
        return out

    def apply(
        self,
        key: Key,
        from_epoch: int,
        to_epoch: int,
        removed: Sequence[int],
        added: Sequence[tuple[int, bytes]],
    ) -> bool:
        """Absorb one committed chunk write of this process (rows ``removed`` deleted, rows
        ``added`` inserted as float32 blobs, the RAG's epoch ``from_epoch`` → ``to_epoch``),
        when the held matrix is exactly at ``from_epoch``; else the read path reloads it. New
        rowids come from a high-water mark, so appending keeps the rows in rowid order."""
        with self._lock:
            if key not in self._entries:
                return False
            # Kept a while: a reader's reload racing this write may land at ``from_epoch``.
            log = self._log.setdefault(key, OrderedDict())
            log[from_epoch] = (to_epoch, tuple(removed), tuple(added))
            while len(log) > _LOG_HELD:
                log.popitem(last=False)
        return self._catch_up(key)

    def _catch_up(self, key: Key) -> bool:
        """Replay the logged writes from the held matrix's epoch on; True if it moved."""
        moved = False
        while True:
            with self._lock:
                old = self._entries.get(key)
                log = self._log.get(key)
                step = None if old is None or log is None else log.get(old.epoch)
            if old is None or step is None:
                return moved
            entry = self._advanced(old, *step)
            if entry is None:
                return moved
            with self._lock:
                if self._entries.get(key) is not old:
                    continue  # replaced meanwhile (a reload, another catch-up): look again
                # readers whose snapshot predates the write still rank with the old state
                entry.previous = dataclasses.replace(old, previous=None)
                self.reloads += 1
                self._entries[key] = entry
                self._entries.move_to_end(key)
                self._evict()
            moved = True

    @staticmethod
    def _advanced(
        old: _Entry,
        to_epoch: int,
        removed: Sequence[int],
        added: Sequence[tuple[int, bytes]],
    ) -> _Entry | None:
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
        keep = ~np.isin(old.rowids, np.asarray(removed, dtype=np.int64))
        entry = _Entry(
            to_epoch,
            np.concatenate([old.rowids[keep], new_ids]),
            np.ascontiguousarray(np.concatenate([old.matrix[keep], vectors]), dtype=np.float32),
            old.loaded_at,
        )
        if old.quantized is not None:
            entry.quantized = old.quantized.advanced(keep, vectors)
        return entry

    def _current(self, key: Key, epoch: int, load: Loader) -> _Entry | None:
        """The RAG's entry at ``epoch``, loading it if due; None to fall back."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.epoch == epoch:
                self._entries.move_to_end(key)
                return entry
            if entry is not None and entry.epoch > epoch:
                if entry.previous is not None and entry.previous.epoch == epoch:
                    return entry.previous  # the state before this process's last write
                return None  # a reader still at an older snapshot: sqlite-vec answers it
        if entry is not None and self._catch_up(key):
            with self._lock:
                entry = self._entries.get(key)
            if entry is not None and entry.epoch == epoch:
                return entry
            if entry is not None and entry.epoch > epoch:
                return None
        with self._lock:
            if entry is not None and self._clock() - entry.loaded_at < self.reload_cooldown_s:
                return None  # being written right now: don't reload on every query
        rowids, matrix = load()
        if len(rowids) > self.max_rows:
            return None
        order = np.argsort(rowids, kind="stable")  # sorted by rowid: cosines() looks rows up
        rowids, matrix = rowids[order], matrix[order]
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        matrix = np.ascontiguousarray(matrix / norms, dtype=np.float32)
        entry = _Entry(epoch, rowids, matrix, self._clock())
        if len(rowids) >= self.quantize_min_rows:
            torch = _load_torch()
            if torch is not None:
                entry.quantized = _Int8Rows(torch, matrix)
        with self._lock:
            self.reloads += 1
            self._entries[key] = entry
            self._entries.move_to_end(key)
            self._evict()
        self._catch_up(key)  # writes of this process committed while it loaded
        return entry

    @staticmethod
    def _quantized_top(
        entry: _Entry, quantized: _Int8Rows, q: npt.NDArray[np.float32], k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Row indexes and exact scores of a set of rows that provably holds the exact top-k."""
        approx, bound = quantized.scores(q)
        n_cand = min(len(approx), max(4 * k, k + 64))
        cand = np.argpartition(-approx, n_cand - 1)[:n_cand]
        exact = entry.matrix[cand] @ q
        kth = float(np.partition(exact, len(exact) - k)[len(exact) - k])
        # Any row that could still beat the k-th best exact score is scored exactly too.
        maybe = np.flatnonzero(approx + bound >= kth)
        extra = np.setdiff1d(maybe, cand, assume_unique=False)
        if len(extra):
            cand = np.concatenate([cand, extra])
            exact = np.concatenate([exact, entry.matrix[extra] @ q])
        return cand.astype(np.int64), exact

    def keys_of(self, rag_id: str) -> list[Key]:
        """The held keys of that RAG id (whatever the tenant and project)."""
        with self._lock:
            return [key for key in self._entries if key[2] == rag_id]

    def epoch_of(self, key: Key) -> int | None:
        """The epoch of the RAG's held matrix (None: none held)."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry.epoch

    def _evict(self) -> None:
        total = sum(len(e.rowids) for e in self._entries.values())
        while total > self.max_rows and len(self._entries) > 1:
            gone, old = self._entries.popitem(last=False)
            self._log.pop(gone, None)
            total -= len(old.rowids)
