"""An in-process BM25 index per RAG that ranks exactly as the store's FTS5 path does.

Why: FTS5 ranks an OR-query by scoring every matching row through its auxiliary-function API;
at 100k chunks that is ~47 ms per query (docs/benchmarks.md), more than the whole dense
pre-turn hook. The same scoring over postings held in numpy takes a few ms.

What it holds per RAG: the chunks' term frequencies as column-major postings (term → rows,
frequencies) and each row's length in tokens. The collection statistics (row count, total
length, document frequencies) are the RAG's own: an entry holds every row of the RAG at its
epoch, tokenized by FTS5's tokenizer, so it derives from them the same integers the FTS5 path
reads from FTS5's tables (:meth:`.sqlite.fts.SqliteLexical._stats`) and gives ``vtr_bm25``; a
ranking from here equals the FTS5 path's ranking of the same query, row for row and score for
score (tested on random corpora, and after every write of an interleaving), whichever answers.

Coherence is the vector cache's (:mod:`.inprocess.epoch_cache`). Writes of this process do not
make an entry stale: the chunk store hands each committed write's delta to
:meth:`LexicalCache.apply`, which advances the entry to the new epoch (rows removed masked,
rows added tokenized into the delta segment). Writes of another process only move the
epoch: a stale entry is refreshed unless it was refreshed moments ago, in which case the
caller asks FTS5. Refreshing is incremental: chunk rows never change
(a replacement is a delete plus new rows), so only rows added since the last load are
tokenized, into a small delta segment; rows removed since are masked. When the delta or the
mask grows past a fraction of the main segment, both merge into a new main segment.

The first load tokenizes every chunk (~30 µs each, ~3-8 s at 100k chunks on the benchmark
machine). Past ``sync_build_max_rows`` it runs in the background while FTS5 answers, so no
query waits for it: on one thread for the process, one RAG after another (a restart under
load that finds many large RAGs builds them in turn, not all at once).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vancetope_rag.store.inprocess.background import SerialWorker
from vancetope_rag.store.inprocess.bm25 import (
    CollectionStats,
    FloatArray,
    IntArray,
    RowArray,
    Segment,
    TermWeights,
    TokenizeDocument,
    postings_of,
    rank,
)
from vancetope_rag.store.inprocess.epoch_cache import EpochCache, Key

__all__ = ["CollectionStats", "LexicalCache"]

#: Builds past ``sync_build_max_rows``, for every cache of the process.
_BUILDS = SerialWorker("vancetope-rag-lexical-build")

#: ``load_rowids()``: every chunk rowid of the RAG (any order).
LoadRowids = Callable[[], Iterable[int]]
#: ``load_texts(rowids)``: ``(rowid, text)`` of those chunks.
LoadTexts = Callable[[Sequence[int]], Iterable[tuple[int, str]]]

#: One write (:meth:`LexicalCache.apply`): the rowids it removed, the (rowid, text) it added,
#: the tokenizer.
LexicalDelta = tuple[tuple[int, ...], tuple[tuple[int, str], ...], TokenizeDocument]

#: Merge the delta and the deletions into the main segment past this fraction of it.
_MERGE_FRACTION = 0.25

log = logging.getLogger(__name__)


def _texts_of(texts: dict[int, str]) -> LoadTexts:
    return lambda rowids: [(r, texts[r]) for r in rowids]


@dataclass
class _Entry:
    epoch: int
    loaded_at: float
    vocab: dict[str, int]
    rowids: IntArray  # main rows then delta rows
    lengths: FloatArray  # tokens per row in every column (text + the scope token)
    alive: npt.NDArray[np.bool_]
    main: Segment
    n_main: int
    delta: Segment | None = None
    previous: _Entry | None = None  # the entry before the last applied write, for old snapshots
    #: Statistics derived from the rows (an entry's rows never change once it is held):
    #: (live rows, their tokens) and each term's live document frequency, filled by queries.
    totals: tuple[int, int] | None = None
    doc_freq: dict[str, int] = dataclasses.field(default_factory=dict)
    #: The rows' length normalisation and the postings' weights kept at it, at the last
    #: average length a query ranked with.
    weights: TermWeights | None = None

    @property
    def dead(self) -> int:
        return int(len(self.alive) - np.count_nonzero(self.alive))


class LexicalCache(EpochCache[_Entry, LexicalDelta]):
    """LRU of per-RAG lexical indexes, bounded by the total number of rows held."""

    def __init__(
        self,
        *,
        max_rows: int = 2_000_000,
        reload_cooldown_s: float = 2.0,
        sync_build_max_rows: int = 20_000,
        length_offset: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(max_rows=max_rows, reload_cooldown_s=reload_cooldown_s, clock=clock)
        #: Added to a row's token count for its BM25 length (FTS5 counts the scope column's
        #: one token; the PostgreSQL store's ``n_tokens`` counts none).
        self.length_offset = length_offset
        #: A first load of more rows than this runs in the background (FTS5 answers meanwhile).
        self.sync_build_max_rows = sync_build_max_rows
        #: key → when its background build started (None: queued, not started yet)
        self._building: dict[Key, float | None] = {}

    def search(
        self,
        key: Key,
        epoch: int,
        terms: Sequence[str],
        stats: CollectionStats | None,
        top_k: int,
        *,
        load_rowids: LoadRowids,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> tuple[IntArray, FloatArray] | None:
        """(rowids, BM25 scores) of the ``top_k`` best rows, best first (ties: lower rowid
        first), or None when the caller should ask FTS5 (being written right now, too big).

        Args:
            key: The RAG's (tenant, project, rag id).
            epoch: The RAG's current epoch in the store (its chunk write counter).
            terms: The query's tokens, in the order of the FTS5 expression's phrases.
            stats: The RAG's statistics for these terms; None: taken from the index itself.
            top_k: How many rows to return at most.
            load_rowids: Reads the RAG's chunk rowids (called on a refresh).
            load_texts: Reads chunk texts by rowid (called for rows not held yet).
            tokenize: The FTS5 tokenizer in document mode.
        """
        entry = self._current(key, epoch, load_rowids, load_texts, tokenize)
        if entry is None:
            return None
        if stats is None:
            stats = self._stats_of(entry, terms)
        segments = (entry.main, entry.delta)
        weights = entry.weights
        if weights is None or weights.avgdl != stats.avgdl:
            # four weights per row, 8 bytes each: 32 MB at a million rows (postings: ~1 GB)
            budget = 4 * max(entry.n_main, 1)
            weights = entry.weights = TermWeights(entry.lengths, stats.avgdl, budget=budget)
        return rank(segments, entry.rowids, weights, entry.alive, entry.vocab, terms, stats, top_k)

    @staticmethod
    def _stats_of(entry: _Entry, terms: Sequence[str]) -> CollectionStats:
        """The RAG's statistics from the entry itself: it holds every row of the RAG at its
        epoch, tokenized as FTS5 does, so these are the integers FTS5's tables give. Kept on
        the entry as they are computed (two threads computing one at once agree)."""
        alive = entry.alive
        if entry.totals is None:
            entry.totals = (int(np.count_nonzero(alive)), int(entry.lengths[alive].sum()))
        known = entry.doc_freq
        for token in terms:
            if token in known:
                continue
            term = entry.vocab.get(token)
            n = 0
            if term is not None:
                for segment in (entry.main, entry.delta):
                    if segment is not None:
                        n += int(np.count_nonzero(alive[segment.postings(term)[0]]))
            known[token] = n
        n_rows, total_tokens = entry.totals
        return CollectionStats(
            n_rows=n_rows,
            total_tokens=total_tokens,
            doc_freq={token: known[token] for token in terms},
        )

    def _advance(self, old: _Entry, delta: LexicalDelta) -> _Entry | None:
        removed, added, tokenize = delta
        new = np.asarray([rowid for rowid, _ in added], dtype=np.int64)
        if len(new) and (np.isin(new, old.rowids).any() or len(np.unique(new)) != len(new)):
            return None  # rowids are never reused: this cannot be the write it claims
        gone = np.isin(old.rowids, np.asarray(removed, dtype=np.int64)) & old.alive
        return self._advanced(old, gone, np.sort(new), _texts_of(dict(added)), tokenize)

    # -- loading -------------------------------------------------------------------------

    def _current(
        self,
        key: Key,
        epoch: int,
        load_rowids: LoadRowids,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> _Entry | None:
        old, due = self._lookup(key, epoch)
        if not due:
            return old
        wanted = np.fromiter(load_rowids(), dtype=np.int64)
        if len(wanted) > self.max_rows:
            return None
        entry = None if old is None else self._refresh(old, wanted, load_texts, tokenize)
        if entry is None:
            if len(wanted) > self.sync_build_max_rows:
                self._build_in_background(key, epoch, wanted, load_texts, tokenize)
                return None
            entry = self._build(wanted, load_texts, tokenize)
        self._put(key, entry, epoch)
        return entry

    def _build_in_background(
        self,
        key: Key,
        epoch: int,
        wanted: IntArray,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> None:
        with self._lock:
            if key in self._building:
                started = self._building[key]
                if started is None:  # queued (in a forked process: the thread starts now)
                    _BUILDS.revive()
                    return
                if self._clock() - started < 600.0:
                    return  # one build per RAG at a time (a crashed one is retried later)
            self._building[key] = None  # queued behind other RAGs' builds, maybe

        def build() -> None:
            with self._lock:
                self._building[key] = self._clock()
            try:
                # This thread reads outside the caller's snapshot: a row deleted since means
                # the RAG is no longer at ``epoch``, and an entry missing it would hide that
                # source from readers still at ``epoch``. Drop it; a later query builds again.
                entry = self._build(wanted, load_texts, tokenize)
                if len(entry.rowids) == len(wanted):
                    self._put(key, entry, epoch)
            except Exception:
                log.warning(
                    "lexical index build for %s failed; FTS5 answers", key[2], exc_info=True
                )
                return
            with self._lock:
                self._building.pop(key, None)

        _BUILDS.submit(build)

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no background build runs (for benchmarks and tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._building:
                    return True
            time.sleep(0.01)
        return False

    def _build(
        self,
        wanted: IntArray,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> _Entry:
        vocab: dict[str, int] = {}
        rowids, lengths, rows, terms, tf = postings_of(
            load_texts(np.sort(wanted).tolist()), tokenize, vocab, 0, self.length_offset
        )
        return self._entry(vocab, rowids, lengths, rows, terms, tf)

    @staticmethod
    def _entry(
        vocab: dict[str, int],
        rowids: Sequence[int],
        lengths: FloatArray,
        rows: RowArray,
        terms: IntArray,
        tf: FloatArray,
    ) -> _Entry:
        ids = np.asarray(rowids, dtype=np.int64)
        return _Entry(
            epoch=-1,
            loaded_at=0.0,
            vocab=vocab,
            rowids=ids,
            lengths=lengths,
            alive=np.ones(len(ids), dtype=np.bool_),
            main=Segment.build(rows, terms, tf, len(vocab)),
            n_main=len(ids),
        )

    def _refresh(
        self, old: _Entry, wanted: IntArray, load_texts: LoadTexts, tokenize: TokenizeDocument
    ) -> _Entry | None:
        """``old`` brought up to the rows ``wanted`` (new rows → delta, gone rows → masked,
        or both merged into a new main segment), as a new entry: queries may be ranking with
        ``old`` on other threads. None when a full rebuild is due instead.

        Chunk rowids are never reused (the store hands them out from a high-water mark), so a
        rowid held here always names the same text.
        """
        held = old.rowids
        gone = ~np.isin(held, wanted) & old.alive
        new = np.setdiff1d(wanted, held, assume_unique=False)
        if len(np.setdiff1d(wanted, held[old.alive])) != len(new):
            return None  # a masked row is back: only a rebuild can tell what it holds now
        return self._advanced(old, gone, new, load_texts, tokenize)

    def _advanced(
        self,
        old: _Entry,
        gone: npt.NDArray[np.bool_],
        new: IntArray,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> _Entry:
        """A new entry: ``old`` without the rows ``gone`` (a mask over its rows) and with the
        rows ``new`` (ascending rowids, none held yet)."""
        held = old.rowids
        vocab = dict(old.vocab)  # the old entry's vocabulary must not grow under its readers
        limit = _MERGE_FRACTION * max(old.n_main, 1)
        if len(held) - old.n_main + len(new) > limit or old.dead + int(gone.sum()) > limit:
            return self._merged(old, vocab, old.alive & ~gone, new, load_texts, tokenize)
        entry = dataclasses.replace(
            old, vocab=vocab, alive=old.alive & ~gone, totals=None, doc_freq={}, weights=None
        )
        if len(new):
            self._append_delta(entry, new, load_texts, tokenize)
        return entry

    def _append_delta(
        self, entry: _Entry, new: IntArray, load_texts: LoadTexts, tokenize: TokenizeDocument
    ) -> None:
        first = len(entry.rowids)
        rowids, lengths, rows, terms, tf = postings_of(
            load_texts(new.tolist()), tokenize, entry.vocab, first, self.length_offset
        )
        old_rows, old_terms, old_tf = (
            entry.delta.coo() if entry.delta is not None else (rows[:0], terms[:0], tf[:0])
        )
        entry.delta = Segment.build(
            np.concatenate([old_rows, rows]),
            np.concatenate([old_terms, terms]),
            np.concatenate([old_tf, tf]),
            len(entry.vocab),
        )
        entry.rowids = np.concatenate([entry.rowids, np.asarray(rowids, dtype=np.int64)])
        entry.lengths = np.concatenate([entry.lengths, lengths])
        entry.alive = np.concatenate([entry.alive, np.ones(len(rowids), dtype=np.bool_)])

    def _merged(
        self,
        entry: _Entry,
        vocab: dict[str, int],
        keep: npt.NDArray[np.bool_],
        new: IntArray,
        load_texts: LoadTexts,
        tokenize: TokenizeDocument,
    ) -> _Entry:
        """One main segment again: the rows to ``keep`` plus ``new``, postings reused."""
        position = np.cumsum(keep) - 1  # old position → new position
        parts = [entry.main.coo()] + ([entry.delta.coo()] if entry.delta is not None else [])
        rows = np.concatenate([p[0] for p in parts])
        terms = np.concatenate([p[1] for p in parts])
        tf = np.concatenate([p[2] for p in parts])
        live = keep[rows]
        rows, terms, tf = position[rows[live]].astype(np.int32), terms[live], tf[live]
        rowids = entry.rowids[keep].tolist()
        lengths = entry.lengths[keep]
        add_ids, add_lengths, add_rows, add_terms, add_tf = postings_of(
            load_texts(new.tolist()), tokenize, vocab, len(rowids), self.length_offset
        )
        return self._entry(
            vocab,
            rowids + add_ids,
            np.concatenate([lengths, add_lengths]),
            np.concatenate([rows, add_rows]),
            np.concatenate([terms, add_terms]),
            np.concatenate([tf, add_tf]),
        )
