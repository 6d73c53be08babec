"""The coalescer behind micro-batched query embeddings and shared int8 scans: with more than
one slot, that many batches run at once before callers wait and batch up."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

import pytest

from fakes import record_outcome, wait_until
from vancetope_rag.coalesce import Coalescer, slots_for


def test_two_slots_run_two_batches_at_once_then_the_waiters_batch_up() -> None:
    release = threading.Event()
    batches: list[list[int]] = []
    lock = threading.Lock()

    def run(items: Sequence[int]) -> list[int]:
        with lock:
            batches.append(list(items))
        if len(batches) <= 2:  # the first two calls hold their slots until released
            assert release.wait(30)
        return [i * 10 for i in items]

    co: Coalescer[int, int] = Coalescer(run, cap=8, slots=2)
    results: dict[int, int] = {}

    def call(i: int) -> None:
        results[i] = co.submit(i)

    threads = [threading.Thread(target=call, args=(0,)), threading.Thread(target=call, args=(1,))]
    for t in threads:
        t.start()
    wait_until(lambda: len(batches) == 2)  # both went straight through, side by side
    late = [threading.Thread(target=call, args=(i,)) for i in range(2, 6)]
    for t in late:
        t.start()
    wait_until(lambda: len(co._waiting) == 4)  # no slot free: they wait
    assert len(batches) == 2
    release.set()
    for t in threads + late:
        t.join(30)
        assert not t.is_alive()
    assert results == {i: i * 10 for i in range(6)}
    assert sorted(batches[0] + batches[1]) == [0, 1]
    # the four waiters ran in one batch, or two when the second slot freed in between
    assert sorted(i for b in batches[2:] for i in b) == [2, 3, 4, 5]
    assert len(batches) <= 4 and co._running == 0


def test_one_slot_serialises_batches() -> None:
    release = threading.Event()
    batches: list[list[int]] = []

    def run(items: Sequence[int]) -> list[int]:
        batches.append(list(items))
        if len(batches) == 1:
            assert release.wait(30)
        return list(items)

    co: Coalescer[int, int] = Coalescer(run, cap=8)
    first = threading.Thread(target=co.submit, args=(0,))
    first.start()
    wait_until(lambda: len(batches) == 1)
    others = [threading.Thread(target=co.submit, args=(i,)) for i in (1, 2, 3)]
    for t in others:
        t.start()
    wait_until(lambda: len(co._waiting) == 3)
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert batches == [[0], [1, 2, 3]]


def test_slots_and_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Coalescer(list, cap=1, slots=0)
    with pytest.raises(ValueError, match="at least 1"):
        Coalescer(list, cap=0)


def test_slots_follow_the_cores_and_the_threads_per_call() -> None:
    cores = slots_for(1)
    if hasattr(os, "sched_getaffinity"):  # Linux: the cores this process may use
        assert cores == len(os.sched_getaffinity(0))
    assert slots_for(cores) == 1
    assert slots_for(cores * 4) == 1  # never below one
    assert slots_for(0) == cores


def test_slots_may_follow_what_serves_the_calls() -> None:
    slots = [1]
    co: Coalescer[int, int] = Coalescer(list, cap=4, slots=lambda: slots[0])
    assert not co._busy
    co._running = 1
    assert co._busy
    slots[0] = 2  # e.g. queries moved to ONNX Runtime
    assert not co._busy
    co._running = 0


def test_a_waiter_taken_into_a_running_batch_waits_for_it_when_a_slot_frees() -> None:
    """Regression: with two slots, a waiter already taken into a running batch was woken by
    another batch's end, found the line empty and failed ("is not in deque")."""
    gates = {item: threading.Event() for item in ("a", "b", "w1")}
    batches: list[list[str]] = []

    def run(items: Sequence[str]) -> list[str]:
        batches.append(list(items))
        assert gates[items[0]].wait(30)
        return [f"{i}!" for i in items]

    co: Coalescer[str, str] = Coalescer(run, cap=8, slots=2)
    results: dict[str, object] = {}

    def call(item: str) -> None:
        record_outcome(results, item, lambda: co.submit(item))

    threads = {i: threading.Thread(target=call, args=(i,)) for i in ("a", "b", "w1", "w2")}
    for item in ("a", "b"):
        threads[item].start()
        wait_until(lambda item=item: [item] in batches)
    for item in ("w1", "w2"):
        threads[item].start()
    wait_until(lambda: len(co._waiting) == 2)
    gates["a"].set()  # a's slot frees: w1 leads a batch of w1 and w2
    wait_until(lambda: ["w1", "w2"] in batches)
    gates["b"].set()  # b's slot frees while w2's batch still runs: w2 must keep waiting
    threads["b"].join(30)
    time.sleep(0.05)
    assert "w2" not in results
    gates["w1"].set()
    for t in threads.values():
        t.join(30)
        assert not t.is_alive()
    assert results == {"a": "a!", "b": "b!", "w1": "w1!", "w2": "w2!"}
    assert co._running == 0 and not co._waiting
