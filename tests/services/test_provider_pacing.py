"""Pacing of remote providers: ``ai.embedding.requestsPerMinute`` and ``tokensPerMinute``
hold in every 60-second window, against the loopback OpenAI-compatible server, on a fake
clock shared by the pacer and the server (the import's minutes pass in no time)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T
from openai_server import KEY, EmbeddingsServer, serve
from vancetope_rag.app import RagApp
from vancetope_rag.domain.retrieval.calibration import PROBE_TURNS
from vancetope_rag.services.providers import Pacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def timed_server(fake_time: FakeTime) -> Iterator[EmbeddingsServer]:
    yield from serve(KEY, fake_time)


def most_in_a_minute(times: list[float]) -> int:
    """The most requests any 60-second window (t-60, t] holds."""
    return max(sum(1 for u in times if t - 60 < u <= t) for t in times)


def test_a_1000_document_import_never_exceeds_the_requests_per_minute(
    make_app: Any, timed_server: EmbeddingsServer, fake_time: FakeTime
) -> None:
    limit = 3
    app: RagApp = make_app(provider="openai", config={"indexer_batch_size": 250})
    for key, value in (
        ("ai.embedding.apiKey", KEY),
        ("ai.embedding.baseUrl", timed_server.base_url),
        ("ai.embedding.model", "text-embedding-3-small"),
        ("ai.embedding.requestsPerMinute", limit),
    ):
        app.settings.set(T, None, key, value)
    app.rags.pacer = Pacer(clock=fake_time, sleep=fake_time.sleep)
    app.bring(T, P)
    for i in range(1000):
        app.documents.create(T, P, f"documents/n{i:04d}.md", f"Note {i}: item {i} of the import.")

    app.scheduler.run_until_idle(timeout_s=120)

    assert app.project_rags.status(T, P).documents["indexed"] == 1000
    seen = timed_server.requests
    # the calibration's probe turns (minScore: auto) are embedded too, one query each,
    # paced like the documents
    probes = [r for r in seen if set(r.inputs) <= set(PROBE_TURNS)]
    documents = [r for r in seen if r not in probes]
    assert sum(len(r.inputs) for r in probes) == len(PROBE_TURNS)
    # batched as the provider allows: the client's 100 inputs per request, not one per text
    assert max(len(r.inputs) for r in documents) == 100
    assert sum(len(r.inputs) for r in documents) == 1000 and len(documents) == 12
    assert most_in_a_minute([r.at for r in seen]) == limit
    assert fake_time.now >= (len(seen) // limit - 1) * 60  # it waited, on the fake clock


def test_tokens_per_minute_hold_in_every_window(fake_time: FakeTime) -> None:
    pacer = Pacer(clock=fake_time, sleep=fake_time.sleep)
    sent: list[tuple[float, int]] = []
    for tokens in [400, 300, 500, 200, 900, 100, 100, 700]:
        pacer.acquire("endpoint", rpm=None, tpm=1000, tokens=tokens)
        sent.append((fake_time.now, tokens))
        fake_time.now += 1.0  # the request itself takes a second
    for t, _ in sent:
        assert sum(n for u, n in sent if t - 60 < u <= t) <= 1000
    assert fake_time.sleeps  # it had to wait


def test_a_query_is_counted_but_never_waits(fake_time: FakeTime) -> None:
    pacer = Pacer(clock=fake_time, sleep=fake_time.sleep)
    pacer.acquire("e", rpm=1, tpm=None)
    assert pacer.acquire("e", rpm=1, tpm=None, block=False) == 0.0  # a chat turn's query
    assert fake_time.sleeps == []
    assert pacer.acquire("e", rpm=1, tpm=None) >= 59.0  # the indexer waits for both
    assert pacer.acquire("other", rpm=1, tpm=None) == 0.0  # endpoints are paced apart
