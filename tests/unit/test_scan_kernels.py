"""The vector pass's kernel is chosen by timing the kernels on the machine: a kernel slower than
the float32 scan never serves, not even before the timings land, and where the packed kernel
is the fastest (the Intel Xeon's recorded timings) it serves. Timings are injected: no test
asserts which kernel wins a real timing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fakes import wait_until
from kernel_timings import AMD_EPYC, INTEL_XEON, PLAIN, choice, fixed
from vancetope_rag.running import Gauge
from vancetope_rag.store.inprocess.scan_kernels import (
    FLOAT32,
    INT_MM,
    KERNELS,
    PACKED,
    QUERY_COUNTS,
    WARMUP_ALLOWANCE,
    WEIGHT_INT8,
    KernelChoice,
    KernelSelector,
    time_kernels,
)


def _unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_packed_kernel_slower_than_the_float32_scan_is_never_chosen() -> None:
    amd = choice(384, AMD_EPYC, stopped=(PACKED,))
    for count in range(1, QUERY_COUNTS[-1] + 1):
        assert PACKED not in amd.ranked(count)
        assert amd.ranked(count)[-1] == FLOAT32
    assert amd.first(1) == WEIGHT_INT8 and amd.first(8) == INT_MM
    assert not amd.uses_packed
    # not stopped, but timed slower than float32: still never chosen
    slow = dict(AMD_EPYC, **{PACKED: (447.0, 836.0, 7382.0)})
    assert all(PACKED not in choice(384, slow).ranked(c) for c in QUERY_COUNTS)


def test_with_the_intel_xeons_recorded_timings_the_packed_kernel_serves() -> None:
    """No regression where the packed kernel is the fastest: every pass size takes it."""
    intel = choice(384, INTEL_XEON)
    assert [intel.first(c) for c in range(1, 9)] == [PACKED] * 8
    assert intel.uses_packed
    # before the rows are packed, the next fastest serves (never slower than float32)
    assert intel.ranked(1) == (PACKED, WEIGHT_INT8, FLOAT32)


def test_nothing_faster_than_float32_leaves_the_float32_scan() -> None:
    timings = {FLOAT32: (5.0, 5.0, 5.0), WEIGHT_INT8: (6.0, 7.0, 9.0), INT_MM: (5.0, 5.0, 5.0)}
    assert all(choice(384, timings).ranked(c) == (FLOAT32,) for c in QUERY_COUNTS)


class _Clock:
    """A clock the fake kernels advance by what their call 'takes'."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call(self, ms: Callable[[int], float], count: int, calls: list[int]) -> Callable[[], None]:
        def run() -> None:
            calls.append(count)
            self.now += ms(len(calls)) / 1000

        return run


def test_timing_a_kernel_stops_at_its_first_call_slower_than_the_float32_scan() -> None:
    clock = _Clock()
    calls: dict[str, list[int]] = {name: [] for name in (*KERNELS, FLOAT32)}

    def maker(name: str, ms: Callable[[int], float]) -> Callable[[int], Callable[[], None]]:
        return lambda count: clock.call(ms, count, calls[name])

    passes = {
        FLOAT32: maker(FLOAT32, lambda i: 7.0),
        PACKED: maker(PACKED, lambda i: 447.0),  # every call, the warm-up first
        WEIGHT_INT8: maker(WEIGHT_INT8, lambda i: 1.6),
        # fast until its fourth call (the warm-up, then three timed calls)
        INT_MM: maker(INT_MM, lambda i: 4.0 if i < 4 else 8.0),
    }
    timings, stopped = time_kernels(passes, calls=5, clock=clock)
    assert calls[PACKED] == [1]  # one call, at the first pass size; never timed again
    assert calls[INT_MM] == [1, 1, 1, 1]
    assert len(calls[WEIGHT_INT8]) == 6 * len(QUERY_COUNTS)
    assert set(stopped) == {PACKED, INT_MM}
    assert timings[WEIGHT_INT8] == pytest.approx((1.6, 1.6, 1.6))
    assert timings[PACKED][1:] == (None, None)
    picked = KernelChoice("m", 384, 100_000, 2, timings, stopped)
    assert all(picked.ranked(c) == (WEIGHT_INT8, FLOAT32) for c in QUERY_COUNTS)


def test_a_slow_first_call_within_the_warmup_allowance_is_timed_on() -> None:
    clock = _Clock()
    calls: list[int] = []
    passes = {
        FLOAT32: lambda count: clock.call(lambda i: 7.0, count, []),
        PACKED: lambda count: clock.call(
            lambda i: (WARMUP_ALLOWANCE * 7.0 - 1) if i == 1 else 2.0, count, calls
        ),
    }
    timings, stopped = time_kernels(passes, calls=3, clock=clock)
    assert stopped == () and timings[PACKED] == pytest.approx((2.0, 2.0, 2.0))


torch = pytest.importorskip("torch")


def test_the_float32_scan_serves_until_the_measurement_lands(tmp_path: Path) -> None:
    """The measurement runs off the scoring thread; meanwhile the float32 scan serves (no
    packing is queued); once it lands, the kernel it chose serves, within its bound."""
    from vancetope_rag.store.inprocess.int8_rows import Int8Rows

    release = threading.Event()
    measured: list[int] = []

    def measure(dim: int) -> KernelChoice:
        measured.append(dim)
        assert release.wait(30)
        return choice(dim, AMD_EPYC, stopped=(PACKED,))

    def submit(job: Callable[[], object]) -> None:
        threading.Thread(target=job).start()

    selector = KernelSelector(tmp_path, lambda: "m1", measure, submit)
    rng = np.random.default_rng(1)
    rows = _unit_rows(rng, 5_000, 32)
    int8 = Int8Rows(torch, rows, 5_100, kernels=selector)
    q = _unit_rows(rng, 1, 32)
    for _ in range(3):
        approx, bounds = int8.scores(q, 5_000)
        assert int8.last_kernel == FLOAT32
    assert int8.packed is None and measured == [32]  # measured once, not per pass
    release.set()
    wait_until(lambda: selector.choice(32) is not None)
    approx, bounds = int8.scores(q, 5_000)
    assert int8.last_kernel == WEIGHT_INT8
    assert np.all(np.abs(approx[0] - rows.astype(np.float64) @ q[0]) <= bounds[0])
    assert int8.packed is None  # the packed kernel was not chosen: never packed


def test_a_choice_is_stored_per_machine_key_and_read_back(tmp_path: Path) -> None:
    measured: list[str] = []

    def selector(machine: str) -> KernelSelector:
        def measure(dim: int) -> KernelChoice:
            measured.append(machine)
            return KernelChoice(machine, dim, 100_000, 2, AMD_EPYC, (PACKED,))

        return KernelSelector(tmp_path, lambda: machine, measure, lambda job: None)

    first = selector("m1").measure_now(384)
    assert not first.stored and measured == ["m1"]
    again = selector("m1")
    assert again.choice(384) == first and measured == ["m1"]  # read, not measured
    assert again.choice(384) is not None and again.choice(384).stored  # type: ignore[union-attr]
    assert [c.machine for c in again.stored()] == ["m1"]
    other = selector("m2")
    assert other.choice(384) is None  # another machine key: measured again (queued)
    assert other.measure_now(384).machine == "m2" and measured == ["m1", "m2"]


def test_a_choice_measured_while_searches_run_serves_but_is_not_stored(tmp_path: Path) -> None:
    searches = Gauge()

    def measure(dim: int) -> KernelChoice:
        with searches.held():  # a search runs meanwhile
            return choice(dim, AMD_EPYC)

    selector = KernelSelector(tmp_path, lambda: "m", measure, lambda job: None, searches=searches)
    assert selector.measure_now(16).first(1) == WEIGHT_INT8
    assert selector.stored() == [] and list(tmp_path.iterdir()) == []


def test_a_measurement_that_failed_is_not_queued_again_by_every_search(tmp_path: Path) -> None:
    """A failed timing leaves the float32 scan serving for the process: the next searches
    neither read the folder again nor queue another timing over 100k rows."""
    calls: list[int] = []

    def measure(dim: int) -> KernelChoice:
        calls.append(dim)
        raise RuntimeError("no oneDNN here")

    selector = KernelSelector(tmp_path, lambda: "m", measure, lambda job: job())
    assert [selector.choice(48) for _ in range(5)] == [None] * 5
    assert calls == [48]


def test_a_real_measurement_gives_a_choice_whatever_wins() -> None:
    """The real timing runs (small rows) and gives a usable choice; which kernel wins is the
    machine's business."""
    from vancetope_rag.store.inprocess import int8_rows

    measured = int8_rows.measure_kernels(torch, 16, "here")
    assert measured.rows == int8_rows.measure_rows(16)
    assert set(measured.timings) == {FLOAT32, *KERNELS}
    for at, count in enumerate(QUERY_COUNTS):
        # what may serve was timed faster than the float32 scan, fastest first
        serving = [measured.timings[k][at] for k in measured.ranked(count)[:-1]]
        assert all(ms is not None and ms < measured.timings[FLOAT32][at] for ms in serving)
        assert serving == sorted(serving)  # type: ignore[type-var]
    assert "vector pass (dim 16" in measured.describe()


def test_the_fixed_selector_serves_its_choice_and_never_measures() -> None:
    selector = fixed(48, INTEL_XEON)
    assert selector.choice(48) is not None and selector.choice(64) is None


def test_metrics_show_what_serves_and_the_timings_that_chose_it() -> None:
    from vancetope_rag.metrics import Metrics

    metrics = Metrics(state_ttl_s=0)
    line = "query embeddings on torch, batches on torch (auto: measured ...)"
    metrics.watch_runtime(lambda: {"embedded": line}, lambda: [choice(384, INTEL_XEON)])
    text = metrics.exposition().decode()
    assert f'vance_rag_embedding_runtime_info{{provider="embedded",runtime="{line}"}} 1.0' in text
    serving = 'vance_rag_vector_pass_ms{dim="384",kernel="packed",queries="1",serving="true"} 1.72'
    assert serving in text
    assert 'kernel="float32",queries="8",serving="false"} 11.8' in text


@pytest.mark.parametrize("dim", [8, 24, 40])
def test_the_weight_only_kernel_never_runs_where_it_reads_past_the_rows(dim: int) -> None:
    """torch 2.13's CPU ``_weight_int8pack_mm`` crashes the process (a segfault) when the
    dimension is not a multiple of 16: a choice that ranks it first still never runs it there,
    and the real measurement does not time it (its crash at 8 dimensions took a test worker
    down under load)."""
    from vancetope_rag.store.inprocess import int8_rows
    from vancetope_rag.store.inprocess.int8_rows import Int8Rows

    rows = _unit_rows(np.random.default_rng(dim), 20_000, dim)
    int8 = Int8Rows(torch, rows, 20_000, kernels=fixed(dim, PLAIN))
    assert int8.ranked(1)[0] == WEIGHT_INT8 and not int8.weight_only
    for _ in range(50):
        int8.scores(_unit_rows(np.random.default_rng(1), 2, dim), 20_000)
    assert int8.last_kernel != WEIGHT_INT8
    measured = int8_rows.measure_kernels(torch, dim, "here")
    assert all(ms is None for ms in measured.timings.get(WEIGHT_INT8, ()))
    assert Int8Rows(torch, _unit_rows(np.random.default_rng(0), 10, 32), 10).weight_only
