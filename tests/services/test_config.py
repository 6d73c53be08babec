"""Engine configuration: operator env names, validation, and what the app does with it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.retrieval.calibration import AUTO


def test_operator_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "RAG_ENABLED": "false",
        "RAG_INDEXER_ENABLED": "false",
        "RAG_INDEXER_POLL_SECONDS": "7.5",
        "RAG_INDEXER_BATCH": "25",
        "RAG_CHUNK_SIZE": "128",
        "RAG_CHUNK_OVERLAP": "16",
        "RAG_RETRIEVAL_TOP_K": "8",
        "RAG_RETRIEVAL_MIN_SCORE": "0.5",
        "RAG_RETRIEVAL_MAX_PER_DOC": "3",
        "VANCETOPE_RAG_STORE": "sqlite:///x.db",
        "VANCETOPE_RAG_CLAIM_TTL_S": "120",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = EngineConfig()
    assert (c.rag_enabled, c.indexer_enabled) == (False, False)
    assert (c.indexer_interval_s, c.indexer_batch_size, c.claim_ttl_s) == (7.5, 25, 120.0)
    assert (c.chunk_size, c.chunk_overlap) == (128, 16)
    assert (c.retrieval_top_k, c.retrieval_min_score, c.retrieval_max_per_doc) == (8, 0.5, 3)
    assert c.store == "sqlite:///x.db"


def test_defaults_follow_the_spec() -> None:
    c = EngineConfig(_env_file=None)
    assert c.indexer_batch_size == 10  # vance.rag.indexer.batch-size
    assert c.indexer_interval_s == 30.0  # interval-ms 30000
    assert c.indexer_initial_delay_s == 60.0  # initial-delay-ms 60000
    assert c.claim_ttl_s == 600.0  # claim-ttl-minutes 10
    assert c.retrieval_min_score == AUTO  # each RAG's calibration, docs/benchmarks.md


@pytest.mark.parametrize(("raw", "value"), [("auto", AUTO), (" Auto", AUTO), ("0.42", 0.42)])
def test_the_engine_min_score_takes_auto_or_a_number(
    monkeypatch: pytest.MonkeyPatch, raw: str, value: object
) -> None:
    monkeypatch.setenv("RAG_RETRIEVAL_MIN_SCORE", raw)
    assert EngineConfig(_env_file=None).retrieval_min_score == value


@pytest.mark.parametrize(
    "bad",
    [
        {"RAG_INDEXER_BATCH": "0"},
        {"RAG_RETRIEVAL_MIN_SCORE": "1.5"},
        {"RAG_RETRIEVAL_MIN_SCORE": "high"},
        {"RAG_CHUNK_SIZE": "64", "RAG_CHUNK_OVERLAP": "64"},
    ],
)
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, bad: dict[str, str]) -> None:
    for k, v in bad.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValidationError):
        EngineConfig()


def test_torch_threads_is_applied(make_app) -> None:
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        make_app(config={"torch_threads": 1})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
