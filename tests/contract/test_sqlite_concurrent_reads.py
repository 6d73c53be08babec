"""Reads of the SQLite store while a document's chunks are replaced: a query answers from one
committed state, whatever path answers it (sqlite-vec, the vector cache, FTS5, the in-process
BM25 index) and whether or not the in-process indexes are loaded yet. It sees a document's old
chunks or its new ones, never none, never a mix, and never fails.

Two kinds of test: deterministic ones that run the writer exactly between two reads of one
query (by wrapping the reader's internal steps), and a bounded load test (threads of hybrid
queries and writers on one store, plus a writer in a second process).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vancetope_rag.domain.records import Chunk, Hit, RagRecord
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.services.retrieval.search import Retriever
from vancetope_rag.store import open_store
from vancetope_rag.store.port import Store
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.sqlite.chunks import SqliteChunkStore

DIM = 8
PARTS = 5  # chunks per document
DOCS = 6
TARGET = "doc-0"


def _vec(seed: int) -> list[float]:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).tolist()


def _chunks(scope: RagScope, doc: str, version: int) -> list[Chunk]:
    return [
        Chunk(
            id=f"{doc}-{i}",
            rag_id=scope.rag_id,
            source_ref=doc,
            text=f"alpha report {doc} part {i} version v{version}",
            embedding=_vec(hash((doc, i, version)) % 10_000),
            path=f"documents/{doc}.md",
        )
        for i in range(PARTS)
    ]


def _version(hit: Hit) -> str:
    return hit.text.rsplit(" ", 1)[-1]


def _rag(store: Store) -> RagScope:
    record = RagRecord(
        id="rag-1",
        tenant_id="t",
        project_id="p",
        name="rag-1",
        embedding_provider="test",
        embedding_model="test-model",
        embedding_dimension=DIM,
        chunk_size=200,
        chunk_overlap=20,
    )
    return RagScope.of(store.control.insert_rag(record))


def _open(path: Path, *, cache: bool) -> Store:
    return open_store(f"sqlite:///{path}", vector_cache=cache)


@pytest.fixture
def db_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "rag.db"
    store = _open(path, cache=False)
    scope = _rag(store)
    for d in range(DOCS):
        store.chunks.replace_source(scope, f"doc-{d}", _chunks(scope, f"doc-{d}", 0))
    yield path


def _scope(store: Store) -> RagScope:
    (rag,) = store.control.list_rags("t", "p")
    return RagScope.of(rag)


def _consistent(hits: Sequence[Hit], *, expect_target: bool = True) -> None:
    """Every document's hits come from one version; the target is there with all its chunks."""
    by_doc: dict[str, set[str]] = {}
    count: dict[str, int] = {}
    for h in hits:
        by_doc.setdefault(h.source_ref, set()).add(_version(h))
        count[h.source_ref] = count.get(h.source_ref, 0) + 1
    mixed = {d: v for d, v in by_doc.items() if len(v) > 1}
    assert not mixed, f"old and new chunks of one document in one answer: {mixed}"
    if expect_target:
        assert count.get(TARGET) == PARTS, f"{TARGET} found with {count.get(TARGET, 0)} chunks"


# -- deterministic: the writer runs between two reads of one query -----------------------------

Query = Callable[[Store, RagScope], list[Hit]]


def _dense(store: Store, scope: RagScope) -> list[Hit]:
    return store.chunks.query(scope, _vec(1), 50)


def _lexical(store: Store, scope: RagScope) -> list[Hit]:
    return store.chunks.lexical_query(scope, "alpha report", 50, vector=_vec(1))


def _hybrid(store: Store, scope: RagScope) -> list[Hit]:
    retriever = Retriever(store.chunks, FusionParams(depth=50))
    return retriever.search(
        scope,
        _vec(1),
        text="alpha report",
        top_k=50,
        min_score=None,
        max_per_doc=None,
        filters=None,
    )


QUERIES: dict[str, Query] = {"dense": _dense, "lexical": _lexical, "hybrid": _hybrid}

#: The reader's steps the writer is run just before (on the reader's SqliteChunkStore), or
#: "query" (just after its dense list, before its lexical one, for hybrid).
HOOKS = ["_rows_by_rowid", "_cosines", "_vector_loader_call", "query"]


def _hook(chunks: SqliteChunkStore, name: str, fire: Callable[[], None]) -> None:
    if name == "_vector_loader_call":  # after the cache load, before anything else
        make = chunks._vector_loader

        def loader(scope: RagScope, table: str) -> Callable[[], Any]:
            load = make(scope, table)

            def run() -> Any:
                out = load()
                fire()
                return out

            return run

        chunks._vector_loader = loader  # type: ignore[method-assign]
        return
    original = getattr(chunks, name)
    if name == "query":

        def after(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            fire()
            return out

        setattr(chunks, name, after)
        return

    def before(*args: Any, **kwargs: Any) -> Any:
        fire()
        return original(*args, **kwargs)

    setattr(chunks, name, before)


@pytest.mark.parametrize("cache", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("hook", HOOKS)
@pytest.mark.parametrize("kind", list(QUERIES))
def test_fresh_reader_sees_old_or_new_chunks_when_replaced_between_its_reads(
    db_path: Path, kind: str, hook: str, cache: bool
) -> None:
    writer = _open(db_path, cache=False)
    wscope = _scope(writer)
    version = 0
    for _trial in range(3):
        reader = _open(db_path, cache=cache)  # a fresh process's store: nothing loaded yet
        scope = _scope(reader)
        assert isinstance(reader.chunks, SqliteChunkStore)
        fired: list[int] = []

        def fire(fired: list[int] = fired) -> None:
            nonlocal version
            if fired:
                return
            version += 1
            fired.append(version)
            writer.chunks.replace_source(wscope, TARGET, _chunks(wscope, TARGET, version))

        _hook(reader.chunks, hook, fire)
        hits = QUERIES[kind](reader, scope)
        _consistent(hits)
        # and the next query (the write is committed now) sees the new version
        after = QUERIES[kind](reader, scope)
        _consistent(after)
        if fired:
            assert {_version(h) for h in after if h.source_ref == TARGET} == {f"v{version}"}


def test_a_stale_cache_answers_from_the_reader_s_snapshot(db_path: Path) -> None:
    """A loaded cache and a write between the epoch read and the row read: still whole."""
    reader = _open(db_path, cache=True)
    writer = _open(db_path, cache=False)
    scope, wscope = _scope(reader), _scope(writer)
    _consistent(_hybrid(reader, scope))  # loads both in-process indexes
    assert isinstance(reader.chunks, SqliteChunkStore)
    for version in range(1, 4):
        done: list[bool] = []

        def fire(version: int = version, done: list[bool] = done) -> None:
            if not done:
                done.append(True)
                writer.chunks.replace_source(wscope, TARGET, _chunks(wscope, TARGET, version))

        _hook(reader.chunks, "_rows_by_rowid", fire)
        _consistent(_dense(reader, scope))
        _consistent(_lexical(reader, scope))
        del reader.chunks._rows_by_rowid  # type: ignore[attr-defined]


# -- load: hybrid queries while writers replace documents -------------------------------------

_WRITER_SCRIPT = """
import sys, time
from vancetope_rag.domain.records import Chunk
from vancetope_rag.store import open_store
from vancetope_rag.store.port.types import RagScope
store = open_store(sys.argv[1], vector_cache=True)
docs, parts, dim = (int(a) for a in sys.argv[2:5])
(rag,) = store.control.list_rags("t", "p")
scope = RagScope.of(rag)
print("ready", flush=True)
seconds = float(sys.stdin.readline())
deadline, v = time.monotonic() + seconds, 10_000_000
while time.monotonic() < deadline:
    v += 1
    doc = f"doc-{v % docs}"
    store.chunks.replace_source(scope, doc, [
        Chunk(id=f"{doc}-{i}", rag_id=scope.rag_id, source_ref=doc,
              text=f"alpha report {doc} part {i} version v{v}",
              embedding=[float(i + 1)] + [0.5] * (dim - 1), path=f"documents/{doc}.md")
        for i in range(parts)
    ])
print(v - 10_000_000)
"""


@pytest.mark.slow  # 11-20 s of a core: `make test-all`
def test_hybrid_queries_under_concurrent_writes_never_fail(db_path: Path) -> None:
    seconds = 12.0
    store = _open(db_path, cache=True)
    scope = _scope(store)
    errors: list[BaseException] = []
    answered = [0]
    stop = threading.Event()
    lock = threading.Lock()

    def reader() -> None:
        while not stop.is_set():
            try:
                for query in (_hybrid, _lexical, _dense):
                    hits = query(store, scope)
                    _consistent(hits)
                    assert {h.source_ref for h in hits} == {f"doc-{d}" for d in range(DOCS)}
                    with lock:
                        answered[0] += 1
            except BaseException as exc:
                errors.append(exc)

    def writer(offset: int) -> None:
        v = offset
        while not stop.is_set():
            v += 2
            doc = f"doc-{v % DOCS}"
            try:
                store.chunks.replace_source(scope, doc, _chunks(scope, doc, v))
            except BaseException as exc:
                errors.append(exc)
            time.sleep(0.001)

    # A writer in a second process too; started first, it says when it is ready to write.
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _WRITER_SCRIPT,
            f"sqlite:///{db_path}",
            *map(str, (DOCS, PARTS, DIM)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline().strip() == "ready"
    other.stdin.write(f"{seconds}\n")
    other.stdin.flush()
    threads = [threading.Thread(target=reader) for _ in range(4)]
    threads += [threading.Thread(target=writer, args=(k,)) for k in (1_000_000, 2_000_001)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    out, _ = other.communicate(timeout=60)
    assert other.returncode == 0
    assert int(out) > 0, "the second process wrote nothing while the queries ran"
    assert not errors, f"{len(errors)} failed queries or writes, first: {errors[0]!r}"
    assert answered[0] > 50
