"""/readyz's probe: bounded by its timeout when the store hangs, the store asked at most
once per ttl and by one thread (that keeps its connection), reasons that name nothing."""

from __future__ import annotations

import threading
import time

from vancetope_rag.errors import StoreError
from vancetope_rag.health import Readiness


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_answers_are_cached_and_checked_by_one_thread() -> None:
    clock = Clock()
    threads: list[int] = []

    def check() -> str | None:
        threads.append(threading.get_ident())
        return None

    probe = Readiness(check, ttl_s=1.0, clock=clock)
    assert probe.answer() == (200, {"status": "ready"})
    assert probe.answer() == (200, {"status": "ready"})
    assert len(threads) == 1  # within the ttl: the cached answer
    clock.now += 1.5
    probe.answer()
    assert len(threads) == 2 and len(set(threads)) == 1  # the same checking thread


def test_a_hanging_store_is_a_503_within_the_timeout_without_piling_up() -> None:
    clock = Clock()
    release = threading.Event()
    calls: list[float] = []

    def check() -> str | None:
        calls.append(time.monotonic())
        release.wait(30)
        return None

    probe = Readiness(check, timeout_s=0.2, ttl_s=0.0, clock=clock)
    started = time.monotonic()
    code, body = probe.answer()
    assert code == 503 and "did not answer within 0.2 s" in body["reason"]
    assert time.monotonic() - started < 5
    for _ in range(5):  # probes while the check still hangs: no second check starts
        clock.now += 1
        assert probe.answer()[0] == 503
    assert len(calls) == 1
    release.set()
    deadline = time.monotonic() + 10
    while probe.answer()[0] != 200:
        assert time.monotonic() < deadline
        clock.now += 1


def test_an_unreachable_store_says_so_without_its_message() -> None:
    def check() -> str | None:
        raise StoreError("cannot open store 'postgresql://app:***@db.internal/rag': refused")

    assert Readiness(check).answer() == (
        503,
        {"status": "unavailable", "reason": "store unreachable"},
    )
