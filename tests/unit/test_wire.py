"""The wire keys of the records whose ``to_json`` takes its plain fields from
:func:`~vancetope_rag.domain.wire.camel_json`: the same names, in the same order, as the
literal dicts they replaced."""

from __future__ import annotations

from datetime import UTC, datetime

from vancetope_rag.domain.heartbeats import OpenCircuit, WorkerHeartbeat
from vancetope_rag.domain.rebuilds import Progress
from vancetope_rag.domain.records import RagStatus
from vancetope_rag.domain.wire import camel
from vancetope_rag.services.indexing.batch import BatchResult
from vancetope_rag.services.store_copy import CopyCounts

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def test_camel_turns_snake_case_into_camel_case() -> None:
    assert [camel(n) for n in ("kind", "retry_at", "cached_embeddings", "interval_s")] == [
        "kind",
        "retryAt",
        "cachedEmbeddings",
        "intervalS",
    ]


def test_to_json_keys_and_values_are_the_wire_ones() -> None:
    circuit = OpenCircuit("openai", "http://x", "h", None, 3, "outage", 1.0, 2.0, 4, "down")
    assert circuit.to_json() == {
        "provider": "openai",
        "baseUrl": "http://x",
        "keyHash": "h",
        "model": None,
        "dimension": 3,
        "kind": "outage",
        "since": 1.0,
        "retryAt": 2.0,
        "failures": 4,
        "detail": "down",
    }
    assert list(circuit.to_json()) == list(OpenCircuit.from_json(circuit.to_json()).to_json())
    beat = WorkerHeartbeat("w", "n", "1.0", 5.0, NOW, NOW)
    assert list(beat.to_json())[:4] == ["workerId", "nodeId", "version", "intervalS"]
    assert beat.to_json()["intervalS"] == 5.0
    progress = Progress(done=1, failed=2, pending=3, rate=0.5, eta_s=None)
    assert list(progress.to_json().items())[:5] == [
        ("done", 1),
        ("failed", 2),
        ("skipped", 0),
        ("pending", 3),
        ("total", 6),
    ]
    status = RagStatus(exists=True, rag_id="r", embedding_provider="p", embedding_model="m")
    keys = ["exists", "ragId", "embeddingProvider", "embeddingModel", "chunkCount"]
    assert list(status.to_json())[:5] == keys
    batch = BatchResult(indexed=1, chunks=2, embedded_texts=3, cache_hits=4)
    assert batch.to_json() == {
        "indexed": 1,
        "removed": 0,
        "failed": 0,
        "chunks": 2,
        "embeddedTexts": 3,
        "cacheHits": 4,
    }
    assert list(CopyCounts(cached_embeddings=7).to_json().items()) == [
        ("projects", 0),
        ("settings", 0),
        ("rags", 0),
        ("documents", 0),
        ("chunks", 0),
        ("cachedEmbeddings", 7),
    ]
