"""An in-process exact vector index per RAG, kept coherent with the SQLite store.

sqlite-vec's ``vec0`` KNN scans every vector of the partition through SQLite's virtual-table
machinery: ~60 ms at 100k 384-dim chunks on this class of machine, too slow for a pre-turn
hook. The same exact search as one float32 matrix-vector product in numpy takes a few ms.

Coherence: every chunk write bumps the RAG's generation in the same transaction; a query
reads the generation (one indexed row) and uses the matrix only if it was loaded at that
generation. When the RAG changed, the matrix is reloaded — unless it was reloaded moments ago
(the RAG is being written right now), in which case the caller falls back to sqlite-vec, so
a busy indexer never makes every query pay for a reload. Results are always exact and always
reflect committed data; only the speed varies.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Key = tuple[str, str, str]  # tenant, project, rag id


@dataclass
class _Entry:
    generation: int
    rowids: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32]  # rows L2-normalised
    loaded_at: float


Loader = Callable[[], tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]


class VectorCache:
    """LRU of per-RAG matrices, bounded by the total number of rows held."""

    def __init__(
        self,
        *,
        max_rows: int = 2_000_000,
        reload_cooldown_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_rows = max_rows
        self.reload_cooldown_s = reload_cooldown_s
        self._clock = clock
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.reloads = 0

    def search(
        self,
        key: Key,
        generation: int,
        vector: npt.NDArray[np.float32],
        top_k: int,
        load: Loader,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        """(rowids, cosine scores) best first, or None: the caller should ask sqlite-vec."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.generation == generation:
                self._entries.move_to_end(key)
            elif entry is not None and self._clock() - entry.loaded_at < self.reload_cooldown_s:
                return None  # being written right now: don't reload on every query
            else:
                entry = None
        if entry is None:
            rowids, matrix = load()
            if len(rowids) > self.max_rows:
                return None
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            matrix = (matrix / norms).astype(np.float32, copy=False)
            entry = _Entry(generation, rowids, matrix, self._clock())
            with self._lock:
                self.reloads += 1
                self._entries[key] = entry
                self._entries.move_to_end(key)
                self._evict()
        if len(entry.rowids) == 0:
            return entry.rowids, np.zeros(0, dtype=np.float32)
        q = vector / (float(np.linalg.norm(vector)) or 1.0)
        scores = entry.matrix @ q.astype(np.float32)
        k = min(top_k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        order = top[np.argsort(-scores[top], kind="stable")]
        return entry.rowids[order], scores[order]

    def invalidate(self, key: Key) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def _evict(self) -> None:
        total = sum(len(e.rowids) for e in self._entries.values())
        while total > self.max_rows and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            total -= len(old.rowids)
