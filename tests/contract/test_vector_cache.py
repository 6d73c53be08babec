"""The in-process vector cache answers exactly what sqlite-vec would, and stays coherent with
writes made through another handle (another process) on the same file."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes import wait_until
from kernel_timings import INTEL_XEON, ONLY_FLOAT32, PLAIN, fixed
from vancetope_rag.coalesce import Coalescer
from vancetope_rag.domain.records import Chunk
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.store import open_store
from vancetope_rag.store.inprocess.int8_rows import Int8Rows
from vancetope_rag.store.inprocess.vector_cache import SCAN_CAP, VectorCache, _Entry
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.sqlite.chunks import SqliteChunkStore
from vancetope_rag.store.sqlite.db import SqliteDatabase

DIM = 16
SCOPE = RagScope("t1", "p1", "rag-1", DIM)


def _chunks(vectors: np.ndarray, prefix: str) -> list[Chunk]:
    return [
        Chunk(
            id=f"{prefix}-{i}",
            rag_id=SCOPE.rag_id,
            source_ref=f"{prefix}-{i}",
            text=f"{prefix} {i}",
            embedding=v.tolist(),
        )
        for i, v in enumerate(vectors)
    ]


class Ticker:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rag.db"


def test_cache_matches_sqlite_vec_exactly(db_path: Path) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((500, DIM)).astype(np.float32)
    cached = open_store(f"sqlite:///{db_path}")
    plain = open_store(f"sqlite:///{db_path}", vector_cache=False)
    cached.chunks.add_chunks(SCOPE, _chunks(vectors, "c"))
    for q in rng.standard_normal((20, DIM)).astype(np.float32):
        a = cached.chunks.query(SCOPE, q.tolist(), 10)
        b = plain.chunks.query(SCOPE, q.tolist(), 10)
        assert [h.chunk_id for h in a] == [h.chunk_id for h in b]
        assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
    assert isinstance(cached.chunks, SqliteChunkStore) and cached.chunks.cache is not None
    assert cached.chunks.cache.reloads == 1  # one load served all 20 queries


def test_write_through_another_handle_is_seen_at_once(db_path: Path) -> None:
    ticker = Ticker()
    reader = SqliteChunkStore(SqliteDatabase(db_path), cache=VectorCache(clock=ticker))
    writer = open_store(f"sqlite:///{db_path}", vector_cache=False)
    rng = np.random.default_rng(2)
    writer.chunks.add_chunks(SCOPE, _chunks(rng.standard_normal((50, DIM)).astype(np.float32), "a"))
    target = rng.standard_normal(DIM).astype(np.float32)
    assert reader.query(SCOPE, target.tolist(), 1)[0].chunk_id.startswith("a-")

    writer.chunks.add_chunks(SCOPE, _chunks(target[None, :], "new"))
    # Within the reload cool-down the cache steps aside: sqlite-vec answers, still exact.
    assert reader.query(SCOPE, target.tolist(), 1)[0].chunk_id == "new-0"
    assert reader.cache is not None and reader.cache.reloads == 1
    ticker.now += 10
    assert reader.query(SCOPE, target.tolist(), 1)[0].chunk_id == "new-0"
    assert reader.cache.reloads == 2

    writer.chunks.remove_by_source(SCOPE, "new-0")
    ticker.now += 10
    assert reader.query(SCOPE, target.tolist(), 1)[0].chunk_id != "new-0"


def test_drop_and_refill_never_serves_the_old_matrix(db_path: Path) -> None:
    store = open_store(f"sqlite:///{db_path}")
    assert isinstance(store.chunks, SqliteChunkStore) and store.chunks.cache is not None
    store.chunks.cache.reload_cooldown_s = 0.0
    v = np.eye(DIM, dtype=np.float32)
    store.chunks.add_chunks(SCOPE, _chunks(v[:1], "old"))
    assert store.chunks.query(SCOPE, v[0].tolist(), 1)[0].chunk_id == "old-0"
    store.chunks.drop_rag(SCOPE)
    assert store.chunks.query(SCOPE, v[0].tolist(), 1) == []
    store.chunks.add_chunks(SCOPE, _chunks(v[1:2], "fresh"))
    assert [h.chunk_id for h in store.chunks.query(SCOPE, v[0].tolist(), 5)] == ["fresh-0"]


def test_cache_is_scoped_by_tenant(db_path: Path) -> None:
    store = open_store(f"sqlite:///{db_path}")
    v = np.eye(DIM, dtype=np.float32)
    store.chunks.add_chunks(SCOPE, _chunks(v[:3], "mine"))
    other = RagScope("t2", "p1", SCOPE.rag_id, DIM)  # another tenant naming my RAG id
    assert store.chunks.query(other, v[0].tolist(), 5) == []


@pytest.mark.parametrize("spread", [0.02, 1.0])
def test_int8_first_pass_still_returns_the_exact_top_k(spread: float) -> None:
    """The quantized pass is only a filter: results equal a float32 brute force, including
    near-duplicates (spread 0.02), where approximate scores would reorder neighbours."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((200, 64)).astype(np.float32)
    rows = centres[rng.integers(0, 200, 30_000)] + spread * rng.standard_normal(
        (30_000, 64)
    ).astype(np.float32)
    rowids = np.arange(30_000, dtype=np.int64) + 1000
    cache = VectorCache(quantize_min_rows=10_000)
    norm = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    for i in range(40):
        q = (centres[i] + 0.05 * rng.standard_normal(64)).astype(np.float32)
        found = cache.search(("t", "p", "r"), 1, q, 10, lambda: (rowids, rows))
        assert found is not None
        ids, scores = found
        brute = norm @ (q / np.linalg.norm(q))
        expected = np.argsort(-brute, kind="stable")[:10]
        assert set(ids.tolist()) == set((expected + 1000).tolist())
        assert np.allclose(scores, np.sort(brute)[::-1][:10], atol=1e-5)
    entry = next(iter(cache._entries.values()))
    assert entry.quantized is not None  # the int8 path was really taken


@pytest.mark.parametrize("quantize_min_rows", [1, 1_000_000])
def test_writes_of_this_process_are_absorbed_exactly(db_path: Path, quantize_min_rows: int) -> None:
    """Each re-index through the cached store is applied to the held matrix (it stays at the
    RAG's epoch, no reload) and the cache still answers what sqlite-vec does, with the int8
    first pass too."""
    rng = np.random.default_rng(3)
    cached = open_store(f"sqlite:///{db_path}")
    plain = open_store(f"sqlite:///{db_path}", vector_cache=False)
    store = cached.chunks
    assert isinstance(store, SqliteChunkStore) and store.cache is not None
    store.cache.quantize_min_rows = quantize_min_rows
    store.cache.reload_cooldown_s = 3600.0  # a stale matrix would fall back, not reload
    store.add_chunks(SCOPE, _chunks(rng.standard_normal((300, DIM)).astype(np.float32), "c"))
    queries = rng.standard_normal((3, DIM)).astype(np.float32)
    key = (SCOPE.tenant_id, SCOPE.project_id, SCOPE.rag_id)

    def agree() -> None:
        for q in queries:
            a = store.query(SCOPE, q.tolist(), 10)
            b = plain.chunks.query(SCOPE, q.tolist(), 10)
            assert [h.chunk_id for h in a] == [h.chunk_id for h in b]
            assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
            # hybrid: fused from the in-process indexes' row ids vs sqlite-vec and FTS5
            fusion = FusionParams(depth=20)
            with store.snapshot():
                fa = list(store.hybrid_query(SCOPE, "x c", q.tolist(), 20, fusion=fusion).hits)
            with plain.chunks.snapshot():
                fb = list(
                    plain.chunks.hybrid_query(SCOPE, "x c", q.tolist(), 20, fusion=fusion).hits
                )
            assert [h.chunk_id for h in fa] == [h.chunk_id for h in fb]
            assert np.allclose([h.score for h in fa], [h.score for h in fb], atol=1e-5)
            assert [h.fused_score for h in fa] == [h.fused_score for h in fb]

    agree()
    assert store.cache.reloads == 1
    buffers = set()
    for step in range(80):
        source = f"c-{int(rng.integers(0, 300))}"
        vectors = rng.standard_normal((int(rng.integers(0, 4)), DIM)).astype(np.float32)
        chunks = [
            Chunk(f"{source}-{step}-{i}", SCOPE.rag_id, source, "x", v.tolist())
            for i, v in enumerate(vectors)
        ]
        store.replace_source(SCOPE, source, chunks)
        assert store.cache.epoch_of(key) == store.epoch(SCOPE.rag_id)
        buffers.add(id(store.cache._entries[key].rows))
        agree()
    assert store.cache.reloads == 81  # one load, then one applied delta per write
    # most writes appended in place; deleted rows piling up (or spare rows running out)
    # made it copy into new buffers a few times
    assert 1 < len(buffers) < 30
    cached.close()
    plain.close()


def _quantized_top_reference(
    entry: _Entry, quantized: Int8Rows, q: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first pass as it was before its fast path (masks always applied, the extra rows
    by ``np.setdiff1d``), its exact scores taken row by row (no longer by one BLAS product,
    whose last bit follows the rows around): the faster one must give the very same arrays."""

    def dots(rows: np.ndarray) -> np.ndarray:
        return np.einsum("ij,j->i", rows, q)

    approx_rows, bounds = quantized.scores(q[None, :], len(entry.rowids))
    approx, bound = approx_rows[0], float(bounds[0])
    approx[~entry.alive] = -np.inf
    n_cand = min(len(approx), max(4 * k, k + 64))
    cand = np.argpartition(-approx, n_cand - 1)[:n_cand]
    exact = dots(entry.matrix[cand])
    exact[~entry.alive[cand]] = -np.inf
    kth = float(np.partition(exact, len(exact) - k)[len(exact) - k])
    maybe = np.flatnonzero(approx + bound >= kth)
    extra = np.setdiff1d(maybe, cand, assume_unique=False)
    if len(extra):
        cand = np.concatenate([cand, extra])
        exact = np.concatenate([exact, dots(entry.matrix[extra])])
    return cand.astype(np.int64), exact


def _pin_kernel(int8: Int8Rows, kernels: str) -> None:
    """Pin the passes to the rows packed for oneDNN (once the packer is done: the Intel
    Xeon's timings), to the plain int8 kernels, or to the float32 rows."""
    timings = {"packed": INTEL_XEON, "plain": PLAIN, "float32": ONLY_FLOAT32}[kernels]
    int8.kernels = fixed(int8.weights.shape[1], timings)
    int8.packed = None
    int8.scores(np.zeros((1, int8.weights.shape[1]), np.float32), 1)  # queues the packing
    assert int8.wait_packed(60) or kernels != "packed" or not int8.packs
    if kernels == "packed" and int8.packed is None:
        pytest.skip("this torch has no oneDNN int8 matmul on prepacked rows")


#: The packed oneDNN kernel takes 0.5-1.7 s a call on CPUs where it loses (AMD EPYC): its
#: exactness over every row is checked in ``make test-all``.
@pytest.mark.parametrize(
    "packed", [pytest.param("packed", marks=pytest.mark.slow), "plain", "float32"]
)
@pytest.mark.parametrize("deleted", [0, 500])
def test_int8_first_pass_gives_the_arrays_it_gave_before(deleted: int, packed: str) -> None:
    """Candidates, their order and their exact scores are bit for bit those of the earlier
    first pass of one query alone, with no row deleted (masks skipped) and with deleted rows
    (masks applied), also when the queries of concurrent searches share one pass; on the
    packed rows, on the plain kernels and on the float32 rows."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((25_000, 48)).astype(np.float32)
    rows[100:140] = rows[0]  # exact duplicates: ties in the exact scores
    rowids = np.arange(25_000, dtype=np.int64) + 1
    cache = VectorCache(quantize_min_rows=10_000)
    key = ("t", "p", "r")
    assert cache.search(key, 1, rows[0], 10, lambda: (rowids, rows)) is not None
    entry = cache._entries[key]
    assert entry.quantized is not None
    _pin_kernel(entry.quantized, packed)
    if deleted:
        entry.alive[rng.choice(25_000, deleted, replace=False)] = False
    for i in range(30):
        q = rows[i * 7] + 0.3 * rng.standard_normal(48).astype(np.float32)
        q = (q / np.linalg.norm(q)).astype(np.float32)
        for k in (5, 18, 60):
            alone = entry._scan([(q, k, bool(deleted))])
            shared = entry._scan([(rows[3], 7, bool(deleted)), (q, k, bool(deleted))])
            want = _quantized_top_reference(entry, entry.quantized, q, k)
            for got in (alone[0], shared[1]):
                assert np.array_equal(got[0], want[0])
                assert np.array_equal(got[1], want[1])


@pytest.mark.parametrize("packed", ["packed", "plain", "float32"])
@pytest.mark.parametrize("queries", [1, 2, 3, 8])
@pytest.mark.parametrize("exact_rows", [False, True])
def test_int8_scores_stay_within_their_bound(queries: int, exact_rows: bool, packed: str) -> None:
    """Every row's approximate score is within the pass's bound of its exact score (the
    rescoring is exact only if this holds): on the packed rows, and on the plain kernels (one
    or two queries on the weight-only kernel, three or more rounded to int8 too). Rows that
    int8 holds exactly leave the query's rounding as the main error."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    if exact_rows:
        rows = rng.integers(-126, 127, (20_000, 384)).astype(np.float32)
        rows[:, 0] = 127.0
    else:
        rows = rng.standard_normal((20_000, 384)).astype(np.float32)
    # A query whose int8 rounding errs by half a step on every coordinate, and a row along
    # that error: the rounding of the query costs the whole of its error there.
    worst = np.append(rng.integers(-100, 100, 383) + 0.5, 127.0).astype(np.float32)
    rows[11] = np.sign(worst - np.rint(worst)) + (worst == 127.0)
    cache = VectorCache(quantize_min_rows=10_000)
    key = ("t", "p", "r")
    rowids = np.arange(20_000, dtype=np.int64) + 1
    assert cache.search(key, 1, rows[0], 5, lambda: (rowids, rows)) is not None
    entry = cache._entries[key]
    int8 = entry.quantized
    assert int8 is not None
    _pin_kernel(int8, packed)
    q = rng.standard_normal((queries, 384)).astype(np.float32)
    q[0] = rows[7]  # a query on a row: the largest scores
    q[-1] = worst
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    approx, bounds = int8.scores(q, len(rowids))
    exact = entry.matrix.astype(np.float64) @ q.astype(np.float64).T
    slack = np.abs(approx - exact.T).max(axis=1)
    assert np.all(slack <= bounds), (slack, bounds)
    assert np.all(bounds < 0.05)  # and tight enough to leave few rows to rescore


def test_concurrent_searches_share_one_int8_pass_and_get_their_own_top_k() -> None:
    """Searches that arrive while a scan runs are scanned together in the next pass; each
    gets exactly what it gets alone (the float32 top-k), ties between duplicate rows
    included: equal scores rank in row order whichever pass found the candidates."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((30_000, 32)).astype(np.float32)
    rows[2000:2040] = rows[5]  # 41 equal rows: more than the top 10
    rowids = np.arange(30_000, dtype=np.int64) + 1
    cache = VectorCache(quantize_min_rows=10_000)
    key = ("t", "p", "r")

    def load() -> tuple[np.ndarray, np.ndarray]:
        return rowids, rows

    queries = [rng.standard_normal(32).astype(np.float32) for _ in range(9)]
    queries[6] = rows[5] + 0.01  # its top 10 are 10 of the 41 equal rows
    alone = [cache.search(key, 1, q, 10, load) for q in queries]
    entry = cache._entries[key]
    batches: list[int] = []
    release = threading.Event()
    scan = entry.scans._run

    def held(searches: Any) -> Any:
        batches.append(len(searches))
        if len(batches) == 1:  # the first pass holds its slot until the others wait
            assert release.wait(30)
        return scan(searches)

    entry.scans = Coalescer(held, SCAN_CAP, slots=1)
    got: dict[int, Any] = {}

    def search(i: int) -> None:
        got[i] = cache.search(key, 1, queries[i], 10, load)

    first = threading.Thread(target=search, args=(0,))
    first.start()
    wait_until(lambda: bool(batches))
    others = [threading.Thread(target=search, args=(i,)) for i in range(1, 9)]
    for t in others:
        t.start()
    wait_until(lambda: len(entry.scans._waiting) == 8)
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert batches == [1, 8]  # one pass for the eight that waited
    for i, want in enumerate(alone):
        assert want is not None and got[i] is not None
        assert np.array_equal(got[i][0], want[0])
        assert np.array_equal(got[i][1], want[1])
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    exact = unit @ (queries[4] / np.linalg.norm(queries[4]))
    assert list(got[4][0]) == list(rowids[np.argsort(-exact, kind="stable")[:10]])
    assert list(got[6][0]) == [6, *range(2001, 2010)]  # the first of the equal rows
