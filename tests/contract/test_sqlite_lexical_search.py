"""Full-text search on the SQLite store through the port (``ChunkStore.lexical_query``): what
its FTS5 tokenizer and query rules do (stemming, identifiers, stopwords, punctuation), scoping,
and deletes. Runs with the in-process indexes and with FTS5 / sqlite-vec alone. What every
store must do alike is in the contract suite (``test_store_contract.py``, lexical section)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from vancetope_rag.domain.records import Chunk, Hit, RagRecord
from vancetope_rag.store import open_store
from vancetope_rag.store.port import ChunkStore, Store
from vancetope_rag.store.port.types import RagScope

TA, TB = "tenant-a", "tenant-b"
P = "proj-1"
DIM = 8

TEXTS = {
    "zebra": "Zebras graze on the savanna; their stripes confuse biting flies.",
    "cluster": "The cluster runs three pods with leases on a Mongo-centric state.",
    "holiday": "Employees get thirty vacation days per year, booked in the portal.",
    "code": "Call parse_config(path) before starting the scheduler loop.",
}


def _vec(i: int) -> list[float]:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.5
    return (v / np.linalg.norm(v)).tolist()


def _rag(store: Store, tenant: str, rag_id: str, project: str = P) -> RagScope:
    record = RagRecord(
        id=rag_id,
        tenant_id=tenant,
        project_id=project,
        name=f"rag-{rag_id}",
        embedding_provider="test",
        embedding_model="test-model",
        embedding_dimension=DIM,
        chunk_size=200,
        chunk_overlap=20,
    )
    return RagScope.of(store.control.insert_rag(record))


def _fill(chunks: ChunkStore, scope: RagScope, texts: dict[str, str], prefix: str) -> None:
    chunks.add_chunks(
        scope,
        [
            Chunk(
                id=f"{prefix}-{name}",
                rag_id=scope.rag_id,
                source_ref=f"src-{name}",
                text=text,
                embedding=_vec(i),
                path=f"documents/{name}.md",
                kind="summary" if name == "holiday" else "content",
            )
            for i, (name, text) in enumerate(texts.items())
        ],
    )


def _lexical(
    chunks: ChunkStore, scope: RagScope, text: str, k: int = 10, **kw: object
) -> list[Hit]:
    return chunks.lexical_query(scope, text, k, vector=_vec(0), **kw)  # type: ignore[arg-type]


def ids(hits: Sequence[Hit]) -> list[str]:
    return [h.chunk_id for h in hits]


@pytest.fixture(params=[True, False], ids=["in-process", "fts5-only"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'rag.db'}", vector_cache=request.param)
    yield opened
    opened.close()


@pytest.fixture
def scope_a(store: Store) -> RagScope:
    scope = _rag(store, TA, "rag-a")
    _fill(store.chunks, scope, TEXTS, "a")
    return scope


def test_finds_by_words_with_stemming_and_scores_cosine(store: Store, scope_a: RagScope) -> None:
    hits = _lexical(store.chunks, scope_a, "Which zebra stripe confuses flies?")
    assert ids(hits) == ["a-zebra"]
    (hit,) = hits
    assert hit.lexical_score is not None and hit.lexical_score > 0
    assert hit.score == pytest.approx(1.0, abs=1e-5)  # cosine of _vec(0) with itself
    assert hit.path == "documents/zebra.md" and hit.source_ref == "src-zebra"
    # "vacation" and "days" both match the holiday chunk; it ranks above one-word matches
    ranked = _lexical(store.chunks, scope_a, "vacation days for the cluster")
    assert ids(ranked)[0] == "a-holiday" and set(ids(ranked)) == {"a-holiday", "a-cluster"}
    assert ranked[0].lexical_score > ranked[1].lexical_score  # type: ignore[operator]
    assert ranked[1].score == pytest.approx(float(np.dot(_vec(0), _vec(1))), abs=1e-5)


def test_identifiers_and_punctuation(store: Store, scope_a: RagScope) -> None:
    assert ids(_lexical(store.chunks, scope_a, "where is parse_config?")) == ["a-code"]
    assert _lexical(store.chunks, scope_a, "?!… ---") == []  # no word at all
    assert _lexical(store.chunks, scope_a, "quantum chromodynamics") == []  # no match


def test_top_k_and_filters(store: Store, scope_a: RagScope) -> None:
    query = "zebra cluster vacation parse_config"
    assert len(_lexical(store.chunks, scope_a, query, k=2)) == 2
    assert ids(_lexical(store.chunks, scope_a, query, filters={"kind": "summary"})) == ["a-holiday"]
    assert "a-holiday" not in ids(
        _lexical(store.chunks, scope_a, query, filters={"!kind": "summary"})
    )


def test_lexical_hits_are_tenant_and_project_scoped(store: Store, scope_a: RagScope) -> None:
    only_b = {"secret": "Quarterly revenue of the blueberry franchise was confidential."}
    b = _rag(store, TB, "rag-b")
    _fill(store.chunks, b, only_b, "b")
    # a term that exists only in tenant B finds nothing for tenant A, whatever the scope forged
    for forged in (
        scope_a,
        RagScope(TA, P, b.rag_id, DIM),  # A's tenant, B's RAG id
        RagScope(TB, "other-project", b.rag_id, DIM),  # B's tenant, wrong project
    ):
        assert _lexical(store.chunks, forged, "blueberry franchise revenue") == []
    assert ids(_lexical(store.chunks, b, "blueberry franchise revenue")) == ["b-secret"]
    # the same words in both tenants: each finds its own
    _fill(store.chunks, b, {"zebra": TEXTS["zebra"]}, "b2")
    assert ids(_lexical(store.chunks, scope_a, "zebra stripes")) == ["a-zebra"]
    assert ids(_lexical(store.chunks, b, "zebra stripes")) == ["b2-zebra"]


def test_removed_chunks_are_not_found(store: Store, scope_a: RagScope) -> None:
    chunks = store.chunks
    chunks.remove_by_source(scope_a, "src-zebra")
    assert _lexical(chunks, scope_a, "zebra") == []
    chunks.remove_chunks(scope_a, chunk_ids=["a-cluster"])
    assert _lexical(chunks, scope_a, "cluster pods") == []
    replacement = Chunk(
        id="a-zebra-2",
        rag_id=scope_a.rag_id,
        source_ref="src-code",
        text="Zebras came back in the new version.",
        embedding=_vec(3),
    )
    chunks.replace_source(scope_a, "src-code", [replacement])
    assert _lexical(chunks, scope_a, "parse_config scheduler") == []
    assert ids(_lexical(chunks, scope_a, "zebra")) == ["a-zebra-2"]
    chunks.drop_rag(scope_a)
    assert _lexical(chunks, scope_a, "zebra vacation") == []
