"""The int8 rows of the vector cache: packed for oneDNN on a thread of their own, again as
rows are written, and scored the same whether a row is packed yet or not."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernel_timings import INTEL_XEON, fixed
from vancetope_rag.store.inprocess.int8_rows import PACK_TAIL_MIN, Int8Rows, onednn_int8

torch = pytest.importorskip("torch")


def _unit_rows(rng: np.random.Generator, n: int, dim: int = 96) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _packed_rows(rng: np.random.Generator, n: int, capacity: int) -> Int8Rows:
    if not onednn_int8(torch):
        pytest.skip("this torch has no oneDNN int8 matmul on prepacked rows")
    int8 = Int8Rows(torch, _unit_rows(rng, n), capacity, kernels=fixed(96, INTEL_XEON))
    assert int8.wait_packed(60)
    assert int8.packed is not None and int8.packed.rows == n
    return int8


def test_a_row_scores_the_same_bits_before_and_after_it_is_packed() -> None:
    """Rows written after the packing (the tail, scored by ``torch._int_mm``) get the very
    same approximate scores once they are packed: one pass may hold both, and a query's
    candidates must not depend on when the packer last ran."""
    rng = np.random.default_rng(1)
    int8 = _packed_rows(rng, 20_000, 30_000)
    int8.write(20_000, _unit_rows(rng, 1_500))  # below the tail that is due: not packed
    assert int8.wait_packed(60) and int8.packed is not None and int8.packed.rows == 20_000
    queries = _unit_rows(rng, 5)
    with_tail, bounds_tail = int8.scores(queries, 21_500)
    int8.pack(21_500)
    assert int8.packed.rows == 21_500
    all_packed, bounds_packed = int8.scores(queries, 21_500)
    assert np.array_equal(with_tail, all_packed)
    assert np.array_equal(bounds_tail, bounds_packed)
    # and each query's scores are its own, whatever else shares the pass
    alone, _ = int8.scores(queries[2:3], 21_500)
    assert np.array_equal(alone[0], all_packed[2])


def test_rows_are_packed_again_once_the_tail_is_due() -> None:
    rng = np.random.default_rng(2)
    int8 = _packed_rows(rng, 20_000, 40_000)
    int8.write(20_000, _unit_rows(rng, PACK_TAIL_MIN - 1))
    assert int8.wait_packed(60)
    assert int8.packed is not None and int8.packed.rows == 20_000  # not due yet
    end = 20_000 + PACK_TAIL_MIN + 10
    int8.write(20_000 + PACK_TAIL_MIN - 1, _unit_rows(rng, 11))
    assert int8.wait_packed(60)
    assert int8.packed is not None and int8.packed.rows == end


def test_an_older_prefix_than_the_packed_rows_is_scored_by_the_plain_kernels() -> None:
    """An entry reading fewer rows than were packed (a reader of an older snapshot) must not
    be scored against rows it does not hold."""
    rng = np.random.default_rng(3)
    int8 = _packed_rows(rng, 20_000, 20_100)
    approx, _ = int8.scores(_unit_rows(rng, 1), 19_000)
    assert approx.shape == (1, 19_000)


class _TorchWithPrepack:
    """torch, with oneDNN's packing wrapped by ``wrap``."""

    def __init__(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        onednn = SimpleNamespace(
            qlinear_prepack=wrap(torch.ops.onednn.qlinear_prepack),
            qlinear_pointwise=torch.ops.onednn.qlinear_pointwise,
        )
        self.ops = SimpleNamespace(onednn=onednn)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _failing_past_100_rows(prepack: Callable[..., Any]) -> Callable[..., Any]:
    """Packing more than the check's few rows fails (as out of memory)."""

    def qlinear_prepack(weights: Any, shape: Any) -> Any:
        if len(weights) > 100:
            raise RuntimeError("could not allocate the packed rows")
        return prepack(weights, shape)

    return qlinear_prepack


def test_rags_loaded_together_are_packed_one_at_a_time() -> None:
    """A process loading many RAGs at once packs them on one thread, one after the other,
    not on a thread (with torch's threads) each."""
    if not onednn_int8(torch):
        pytest.skip("this torch has no oneDNN int8 matmul on prepacked rows")
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def counted(prepack: Callable[..., Any]) -> Callable[..., Any]:
        def qlinear_prepack(weights: Any, shape: Any) -> Any:
            with lock:
                running[0] += 1
                running[1] = max(running)
            try:
                time.sleep(0.05)  # long enough for a second packer to overlap
                return prepack(weights, shape)
            finally:
                with lock:
                    running[0] -= 1

        return qlinear_prepack

    rng = np.random.default_rng(5)
    proxy = _TorchWithPrepack(counted)
    many = [
        Int8Rows(proxy, _unit_rows(rng, 5_000), 5_100, kernels=fixed(96, INTEL_XEON))
        for _ in range(4)
    ]
    for rows in many:
        assert rows.wait_packed(60)
        assert rows.packed is not None and rows.packed.rows == 5_000
    assert running[1] == 1


def test_a_failed_packing_leaves_the_plain_kernels_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if not onednn_int8(torch):
        pytest.skip("this torch has no oneDNN int8 matmul on prepacked rows")
    rng = np.random.default_rng(4)
    rows = _unit_rows(rng, 20_000)
    with caplog.at_level(logging.WARNING):
        int8 = Int8Rows(
            _TorchWithPrepack(_failing_past_100_rows), rows, 20_100, kernels=fixed(96, INTEL_XEON)
        )
        assert not int8.wait_packed(60)
    assert "could not allocate the packed rows" in caplog.text
    assert int8.packed is None and not int8.packs
    q = _unit_rows(rng, 1)
    approx, bounds = int8.scores(q, 20_000)
    exact = rows.astype(np.float64) @ q[0].astype(np.float64)
    assert np.all(np.abs(approx[0] - exact) <= bounds[0])
