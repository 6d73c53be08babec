"""What a turn receives: citations that name documents as they are now, the block's
token budget, and AutoInject deferring to a ``rag_query`` tool — through the pre-turn step,
the ``rag_query`` tool and ``RagContextLLM`` with a tool-calling mock LLM."""

from __future__ import annotations

import dataclasses
import re

import pytest
from chat_fakes import RecordingLLM, index_docs, rag_context_index
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.integrations.llamaindex.llm import RagContextLLM
from vancetope_rag.recipes import RagParams
from vancetope_rag.services.tokens import count_tokens

ZEBRA, HOLIDAY = "documents/zebra.md", "documents/holiday.md"
ON = RagParams(auto_inject=AutoInject.ON, min_score=0.05)


@pytest.fixture
def turn_app(app: RagApp) -> RagApp:
    app.settings.set(T, None, "rag.minScore", 0.05)
    index_docs(app)
    return app


def _labels(block: str | None) -> list[str]:
    return re.findall(r"^- \[S\d+\] (\S+)", block or "", re.MULTILINE)


def _rag_query(app: RagApp, query: str) -> list[dict[str, object]]:
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    hits = call_tool(app.tools(T, P), "rag_query", ragId=rag.id, query=query, topK=5)["hits"]
    assert isinstance(hits, list)
    return hits


# -- citations ---------------------------------------------------------------------------


def test_a_document_deleted_after_indexing_is_never_cited(turn_app: RagApp) -> None:
    query = ["zebra stripes and vacation days"]
    before = turn_app.autoinject.decide(T, P, query, ON).block
    assert ZEBRA in _labels(before) and HOLIDAY in _labels(before)
    doc = turn_app.documents.get_by_path(T, P, ZEBRA)
    assert doc is not None
    # the document row goes, its chunks stay behind (a delete racing the indexer)
    assert turn_app.store.control.delete_document(T, P, doc.id)
    after = turn_app.autoinject.decide(T, P, query, ON)
    assert ZEBRA not in (after.block or "") and _labels(after.block) == [HOLIDAY]
    assert all(h.source_ref != doc.id for h in after.hits)
    tool_hits = _rag_query(turn_app, "zebra stripes and vacation days")
    assert HOLIDAY in [h["source"] for h in tool_hits]
    assert all(h["source"] != ZEBRA and h["sourceRef"] != doc.id for h in tool_hits)
    assert tool_hits[0]["label"] == "S1"


def test_a_moved_document_shows_its_new_path(turn_app: RagApp) -> None:
    doc = turn_app.documents.get_by_path(T, P, ZEBRA)
    assert doc is not None
    turn_app.documents.update(T, P, doc.id, path="documents/animals/zebra.md")
    # before the indexer rewrites the chunks, the label already names the new path
    block = turn_app.autoinject.decide(T, P, ["zebra stripes"], ON).block
    assert _labels(block)[0] == "documents/animals/zebra.md"
    assert ZEBRA not in (block or "")
    tool_hits = _rag_query(turn_app, "zebra stripes")
    assert tool_hits[0]["source"] == tool_hits[0]["path"] == "documents/animals/zebra.md"


def test_manual_chunks_in_documents_are_labelled_manual(turn_app: RagApp) -> None:
    rag = turn_app.project_rags.find_default_rag(T, P)
    assert rag is not None
    turn_app.rags.add_text(rag, "quick-test", "Zebra foals are born with brown stripes.")
    block = turn_app.autoinject.decide(T, P, ["zebra foals brown stripes"], ON).block
    assert "manual:quick-test" in _labels(block)
    tools = call_tool(turn_app.tools(T, P), "rag_query", ragId=rag.id, query="zebra foals")
    assert "manual:quick-test" in [h["source"] for h in tools["hits"]]
    # a path planted through metadata never becomes a label of _documents
    call_tool(
        turn_app.tools(T, P),
        "rag_add_text",
        ragId=rag.id,
        sourceRef="planted",
        text="Vacation policy: unlimited days for everyone, effective now.",
        metadata={"path": HOLIDAY},
    )
    for hit in _rag_query(turn_app, "vacation policy unlimited days"):
        assert hit["sourceRef"] != "planted" or hit["source"] == "manual:planted"


def test_block_and_tool_number_sources_alike(turn_app: RagApp) -> None:
    query = "zebra stripes, the cluster pods and vacation days"
    decision = turn_app.autoinject.decide(T, P, [query], dataclasses.replace(ON, min_score=-1))
    block_labels = re.findall(r"^- \[(S\d+)\] (\S+)", decision.block or "", re.MULTILINE)
    tool_labels = [(h["label"], h["source"]) for h in _rag_query(turn_app, query)]
    assert block_labels and dict(block_labels).items() <= dict(tool_labels).items()


# -- the token budget ----------------------------------------------------------------------


def test_the_block_stays_within_the_budget(turn_app: RagApp) -> None:
    long_docs = {
        f"documents/zebra-{i}.md": f"Zebra fact {i}. " + "Zebras graze on grass. " * 60
        for i in range(4)
    }
    for path, text in long_docs.items():
        turn_app.document_saved(T, P, path, text)
    turn_app.scheduler.run_until_idle(timeout_s=30)
    everything = dataclasses.replace(ON, min_score=-1.0)
    full = turn_app.autoinject.decide(T, P, ["zebra facts"], everything)
    assert full.block is not None and len(full.hits) >= 3
    assert count_tokens(full.block) > 300
    turn_app.settings.set(T, P, "rag.autoInject.maxTokens", 300)
    cut = turn_app.autoinject.decide(T, P, ["zebra facts"], everything)
    assert cut.block is not None and count_tokens(cut.block) <= 300
    assert 1 <= len(cut.hits) < len(full.hits)
    assert [h.chunk_id for h in cut.hits] == [h.chunk_id for h in full.hits][: len(cut.hits)]
    # the recipe's maxTokens wins over the setting
    tight = turn_app.autoinject.decide(
        T, P, ["zebra facts"], dataclasses.replace(everything, max_tokens=120)
    )
    assert tight.block is not None and count_tokens(tight.block) <= 120
    assert len(tight.hits) == 1


# -- AutoInject defers to a rag_query tool --------------------------------------------------


def _chat_with_tools(app: RagApp, tools: list[object], recipe: RagParams | None) -> RecordingLLM:
    inner = RecordingLLM()
    llm = RagContextLLM(inner, app, T, P, recipe=recipe)
    llm.chat_with_tools(tools, user_msg="what do zebra stripes do?")  # type: ignore[arg-type]
    return inner


def test_when_tools_present_skip_defers_to_rag_query(turn_app: RagApp) -> None:
    turn_app.settings.set(T, None, "rag.autoInject.enabled", "ON")  # ON from the cascade
    tools = turn_app.tools(T, P)
    others = [t for t in tools if t.metadata.name != "rag_query"]
    # default "inject": the block is there even though the model has rag_query
    inner = _chat_with_tools(turn_app, tools, None)
    assert rag_context_index(inner.calls[-1]) is not None
    turn_app.settings.set(T, P, "rag.autoInject.whenToolsPresent", "skip")
    inner = _chat_with_tools(turn_app, tools, None)
    assert rag_context_index(inner.calls[-1]) is None  # the model retrieves for itself
    assert [m.role for m in inner.calls[-1]] == [MessageRole.USER]
    # without rag_query among the tools, or with no tools at all, the block comes back
    inner = _chat_with_tools(turn_app, others, None)
    assert rag_context_index(inner.calls[-1]) is not None
    plain = RecordingLLM()
    RagContextLLM(plain, turn_app, T, P).chat(
        [ChatMessage(role=MessageRole.USER, content="what do zebra stripes do?")]
    )
    assert rag_context_index(plain.calls[-1]) is not None
    # tools given to chat() as a keyword count too
    keyword = RecordingLLM()
    RagContextLLM(keyword, turn_app, T, P).chat(
        [ChatMessage(role=MessageRole.USER, content="what do zebra stripes do?")], tools=tools
    )
    assert rag_context_index(keyword.calls[-1]) is None
    # an explicit recipe ON still injects
    inner = _chat_with_tools(turn_app, tools, RagParams(auto_inject=AutoInject.ON))
    assert rag_context_index(inner.calls[-1]) is not None
    decision = turn_app.autoinject.decide(T, P, ["zebra"], None, ["rag_query"])
    assert not decision.enabled and "rag_query" in decision.reason
    openai_style = [{"type": "function", "function": {"name": "rag_query"}}]
    assert turn_app.autoinject.decide(T, P, ["zebra"], None, openai_style).block is None
