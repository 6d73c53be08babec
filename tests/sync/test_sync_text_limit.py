"""One text limit everywhere: the tools, the REST API, document_saved and the import.

``rag_add_text`` / ``document_saved`` with 10 MB of text failed after many seconds inside the
splitter, retried five times; CLI import silently kept the first 2 M characters of a file. Now
one engine setting, ``VANCETOPE_RAG_MAX_TEXT_CHARS`` (alias ``VANCETOPE_RAG_EXTRACT_MAX_CHARS``):
the tools refuse text over it naming the limit; a host's document over it is indexed up to it
and marked ``truncated``; splitting a document at the limit is bounded whatever its shape.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from synchelpers import chunks, default_rag, ticks_until_idle

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, IndexState

LIMIT = 5_000
TAIL = "tailmarkerword"


def _limited(make_app, limit: int = LIMIT) -> RagApp:  # type: ignore[no-untyped-def]
    app: RagApp = make_app(config={"max_text_chars": limit})
    app.bring(T, P)
    return app


def test_config_names_one_limit_with_the_old_name_as_alias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert EngineConfig().max_text_chars == 2_000_000
    monkeypatch.setenv("VANCETOPE_RAG_EXTRACT_MAX_CHARS", "3000")
    assert EngineConfig().max_text_chars == 3000
    monkeypatch.setenv("VANCETOPE_RAG_MAX_TEXT_CHARS", "4000")
    monkeypatch.delenv("VANCETOPE_RAG_EXTRACT_MAX_CHARS")
    assert EngineConfig().max_text_chars == 4000


def test_tools_refuse_text_over_the_limit_and_name_it(make_app) -> None:  # type: ignore[no-untyped-def]
    app = _limited(make_app)
    tools = app.tools(T, P)
    rag_id = call_tool(tools, "rag_create", name="notes")["ragId"]
    ok = call_tool(tools, "rag_add_text", ragId=rag_id, text="word " * (LIMIT // 5))
    assert ok["chunksAdded"] >= 1
    rag = app.rags.get(T, P, rag_id)
    before = app.rags.chunk_count(rag)
    for name, args in (
        ("rag_add_text", {"ragId": rag_id, "text": "w" * (LIMIT + 1)}),
        ("rag_add_text", {"ragId": DEFAULT_RAG_NAME, "text": "word " * LIMIT}),
        ("rag_query", {"ragId": rag_id, "query": "q" * (LIMIT + 1)}),
    ):
        result = call_tool(tools, name, **args)
        assert result["code"] == "TEXT_TOO_LONG", result
        assert "5,000 characters" in result["error"]
        assert "VANCETOPE_RAG_MAX_TEXT_CHARS" in result["error"]
    assert app.rags.chunk_count(rag) == before


def test_a_document_over_the_limit_is_indexed_up_to_it_and_marked_truncated(
    make_app,  # type: ignore[no-untyped-def]
) -> None:
    app = _limited(make_app)
    long_text = "alpha beta gamma. " * (LIMIT // 18 + 1)
    assert len(long_text) < LIMIT + 100
    long_doc = app.document_saved(T, P, "documents/long.md", long_text + TAIL * 20)
    short_doc = app.document_saved(T, P, "documents/short.md", "a short note")
    assert long_doc is not None and short_doc is not None
    ticks_until_idle(app)
    long_doc = app.documents.get(T, P, long_doc.id)
    assert long_doc.index_state is IndexState.INDEXED and long_doc.truncated
    assert long_doc.content.endswith(TAIL)  # the host's document is kept whole
    assert not app.documents.get(T, P, short_doc.id).truncated
    texts = [c.text for c in chunks(app, default_rag(app), long_doc.id)]
    assert texts and not any(TAIL in t for t in texts)
    status = app.project_rags.status(T, P).to_json()
    assert status["truncatedDocuments"] == 1
    # shortened under the limit: indexed whole again, the mark goes away
    app.document_saved(T, P, "documents/long.md", "now it is short")
    ticks_until_idle(app)
    assert not app.documents.get(T, P, long_doc.id).truncated
    assert app.project_rags.status(T, P).to_json()["truncatedDocuments"] == 0


def _no_punctuation(chars: int) -> str:
    rng = random.Random(8)
    words = ["alpha", "beta", "gamma", "delta", "zebra", "stripe", "portal", "meadow"]
    return " ".join(rng.choice(words) for _ in range(chars // 5))[:chars]


def test_splitting_documents_at_the_limit_is_bounded(app: RagApp) -> None:
    """At the default limit: one document without sentence punctuation, one holding a
    single 1 MB 'word'. Both index; every chunk fits the window and stays a readable size."""
    app.bring(T, P)
    limit = app.config.max_text_chars
    flat = app.document_saved(T, P, "documents/flat.md", _no_punctuation(limit))
    blob = app.document_saved(
        T, P, "documents/blob.md", "intro words " + "x" * 1_000_000 + " outro words"
    )
    assert flat is not None and blob is not None
    assert len(flat.content) == limit
    ticks_until_idle(app)
    rag = default_rag(app)
    loaded = app.rags.model_for(rag)
    for doc in (flat, blob):
        stored = app.documents.get(T, P, doc.id)
        assert stored.index_state is IndexState.INDEXED and not stored.truncated
        texts = [c.text for c in chunks(app, rag, doc.id)]
        assert texts
        assert max(len(loaded.tokenizer(t)) for t in texts) <= loaded.max_chunk_tokens
        assert max(len(t) for t in texts) <= rag.chunk_size * 16
    blob_texts = [c.text for c in chunks(app, rag, blob.id)]
    assert sum(t.count("x") for t in blob_texts) >= 1_000_000  # nothing of it lost


def test_cli_import_says_which_files_are_over_the_limit(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.txt").write_text("word " * 1000 + TAIL)
    (root / "small.txt").write_text("small")
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner(env={"VANCETOPE_RAG_MAX_TEXT_CHARS": "1000"})
    base = ["--store", store, "--tenant", T, "--project", P]
    result = runner.invoke(cli, [*base, "import", str(root)])
    assert result.exit_code == 0, result.output
    assert "1 over the text limit" in result.stdout
    assert "big.txt" in result.stderr and "1,000 characters" in result.stderr
    import json

    summary = json.loads(runner.invoke(cli, [*base, "import", str(root), "--json"]).stdout)
    assert summary["unchanged"] == 2 and summary["overLimit"] == ["big.txt"]
