"""Store contract: lexical (BM25) statistics are the RAG's own.

A RAG's BM25 scores and hit order depend only on its own chunks: the document count, the
average document length and each term's document frequency are counted over the RAG, never
over the table or collection other tenants, projects and RAGs write into. Otherwise another
tenant's writes change a tenant's scores (and its hit order), and the scores tell how common
a word is in other tenants' data.

Atlas Search keeps its statistics per search index, and one index serves every RAG of a
dimension: a documented limit (docs/stores.md), which the Atlas double reproduces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from vancetope_rag.domain.records import Chunk, Hit, RagRecord
from vancetope_rag.store.port import ChunkStore, ControlStore, Store
from vancetope_rag.store.port.types import RagScope

Settle = Callable[[], None]

DIM = 8
TA, TB, P = "tenant-a", "tenant-b", "proj-1"

MINE = [
    "Cats purr and cats sleep in the sun.",
    "The cat sat on the mat; dogs never purr.",
    "A dog barks at the mailman every morning.",
    "Nothing here but a long sentence about weather and rain and clouds.",
]
#: Another scope's corpus: many short chunks full of the query's words, which would raise
#: their document frequency and lower the average length if counted with the RAG's.
OTHERS = [f"purr cat {i}" for i in range(30)] + ["dog dog dog"] * 10


def _rag(control: ControlStore, tenant: str, name: str, rag_id: str) -> RagScope:
    record = RagRecord(
        id=rag_id,
        tenant_id=tenant,
        project_id=P,
        name=name,
        embedding_provider="test",
        embedding_model="test-model",
        embedding_dimension=DIM,
        chunk_size=200,
        chunk_overlap=20,
        title="Title",
        description="About",
    )
    return RagScope.of(control.insert_rag(record))


def _unit(i: int) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    return v.tolist()


def _add(chunks: ChunkStore, scope: RagScope, texts: Sequence[str], prefix: str) -> None:
    chunks.add_chunks(
        scope,
        [
            Chunk(f"{prefix}-{i}", scope.rag_id, f"src-{i % 3}", text, _unit(i), path="a.md")
            for i, text in enumerate(texts)
        ],
    )


def _ranking(chunks: ChunkStore, scope: RagScope, query: str) -> list[tuple[str, float | None]]:
    hits: list[Hit] = chunks.lexical_query(scope, query, 10, vector=_unit(0))
    return [(h.chunk_id, h.lexical_score) for h in hits]


QUERIES = ["cats purr", "dog", "purr", "cat dog mat", "weather"]


def test_other_scopes_writes_never_change_a_rags_lexical_scores(
    store: Store, settle: Settle
) -> None:
    control, chunks = store.control, store.chunks
    mine = _rag(control, TA, "_documents", "rag-a")
    neighbour = _rag(control, TA, "other", "rag-a2")  # same tenant and project, another RAG
    foreign = _rag(control, TB, "_documents", "rag-b")  # another tenant
    _add(chunks, mine, MINE, "mine")
    settle()
    before = {q: _ranking(chunks, mine, q) for q in QUERIES}
    assert all(before[q] for q in QUERIES)
    assert all(s is not None and s > 0 for q in QUERIES for _, s in before[q])

    for scope, prefix in ((neighbour, "n"), (foreign, "f")):
        _add(chunks, scope, OTHERS, prefix)
        settle()
        after = {q: _ranking(chunks, mine, q) for q in QUERIES}
        if after != before and getattr(chunks, "uses_atlas", lambda: False)():
            pytest.xfail("Atlas Search keeps BM25 statistics per search index (docs/stores.md)")
        assert after == before, prefix
        # and the other scope's own ranking is counted over its own chunks only
        assert {cid for cid, _ in _ranking(chunks, scope, "purr")} <= {
            f"{prefix}-{i}" for i in range(len(OTHERS))
        }

    # removing the other scopes' chunks does not change it either
    chunks.drop_rag(neighbour)
    chunks.drop_rag(foreign)
    settle()
    assert {q: _ranking(chunks, mine, q) for q in QUERIES} == before


def test_a_rags_scores_are_the_ones_of_its_chunks_alone(store: Store, settle: Settle) -> None:
    """The same texts in a fresh store with nothing else score exactly the same."""
    control, chunks = store.control, store.chunks
    foreign = _rag(control, TB, "_documents", "rag-b")
    _add(chunks, foreign, OTHERS, "f")
    mine = _rag(control, TA, "_documents", "rag-a")
    _add(chunks, mine, MINE, "mine")
    settle()
    crowded = {q: _ranking(chunks, mine, q) for q in QUERIES}
    chunks.drop_rag(foreign)
    settle()
    alone = {q: _ranking(chunks, mine, q) for q in QUERIES}
    if crowded != alone and getattr(chunks, "uses_atlas", lambda: False)():
        pytest.xfail("Atlas Search keeps BM25 statistics per search index (docs/stores.md)")
    assert crowded == alone


def test_a_rag_without_chunks_of_its_dimension_answers_no_hits(
    store: Store, settle: Settle
) -> None:
    """Empty lexical statistics are no error: a fresh RAG, with or without other RAGs' chunks
    (of another dimension and of its own) in the store, answers both queries with no hits."""
    control, chunks = store.control, store.chunks
    fresh = _rag(control, TA, "_documents", "rag-a")
    assert chunks.lexical_query(fresh, "cats purr", 5, vector=_unit(0)) == []
    assert chunks.query(fresh, _unit(0), 5) == []
    other = _rag(control, TB, "_documents", "rag-b")
    _add(chunks, other, OTHERS, "f")
    settle()
    assert chunks.lexical_query(fresh, "cats purr", 5, vector=_unit(0)) == []
    assert chunks.query(fresh, _unit(0), 5) == []
