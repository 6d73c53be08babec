"""ProjectRagRetriever and the engines built on it: one retrieval path for AutoInject, the
tools and a user's own LlamaIndex query and chat engines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from chat_fakes import index_docs
from llama_index.core.bridge.pydantic import Field
from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms.mock import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from fakes import DOCS, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.recipes import RagParams
from vancetope_rag.services.retrieval.retriever import HitNodeWithScore, hits_of

AppFactory = Callable[..., RagApp]

MORE = {
    "documents/zebra-care.md": "Zebra stripes fade in captivity; zebras need grass and shade.",
    "documents/notes/zebra.md": "A zebra note in a sub-folder of the documents.",
    "documents/grass.md": "Savanna grass grows fast after the rains; zebras and gnus graze it.",
}


@pytest.fixture
def probe() -> ProbeProvider:
    return ProbeProvider()


@pytest.fixture
def rapp(make_app: AppFactory, probe: ProbeProvider) -> RagApp:
    app = make_app(provider="probe", embeddings=registry(probe))
    app.settings.set(T, None, "rag.minScore", 0.05)
    app.settings.set(T, None, "rag.project.includeSummaries", True)
    index_docs(app, {**DOCS, **MORE})
    probe.log.clear()
    return app


def _doc_ids(app: RagApp) -> dict[str, str]:
    return {d.path: d.id for d in app.documents.list_documents(T, P)}


# -- one path ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
@pytest.mark.parametrize(
    "args",
    [
        {"top_k": 5, "min_score": 0.05, "max_per_doc": 2},
        {"top_k": 2, "min_score": 0.0, "max_per_doc": 1},
        {"top_k": 10, "min_score": 0.2, "max_per_doc": 10},
        {"top_k": 3, "min_score": -1.0, "max_per_doc": 3},
    ],
)
def test_retriever_results_equal_rag_service_query(
    rapp: RagApp, mode: str, args: dict[str, Any]
) -> None:
    rag = rapp.project_rags.find_default_rag(T, P)
    assert rag is not None
    question = "zebra stripes and savanna grass"
    expected = rapp.rags.query(rag, question, mode=mode, **args)
    nodes = rapp.as_retriever(T, P, mode=mode, **args).retrieve(question)
    assert hits_of(nodes) == expected and len(nodes) == len(expected) > 0
    paths = {v: k for k, v in _doc_ids(rapp).items()}
    for node, hit in zip(nodes, expected, strict=True):
        assert isinstance(node, HitNodeWithScore)
        assert node.score == hit.score  # the cosine, in either mode
        assert node.node.node_id == hit.chunk_id
        assert node.node.ref_doc_id == hit.source_ref  # the document id, SOURCE relationship
        assert node.node.metadata["path"] == paths[hit.source_ref] == hit.path
        assert node.node.metadata["kind"] == hit.kind
        assert node.node.get_content() == hit.text


def test_parameters_come_from_the_cascade_the_recipe_and_the_call(rapp: RagApp) -> None:
    q = "zebra"
    rapp.settings.set(T, None, "rag.minScore", -1.0)
    assert len(rapp.as_retriever(T, P).retrieve(q)) == 5  # engine default topK
    rapp.settings.set(T, P, "rag.topK", 2)
    assert len(rapp.as_retriever(T, P).retrieve(q)) == 2  # project setting
    recipe = RagParams(top_k=3, max_per_document=3)
    assert len(rapp.as_retriever(T, P, recipe=recipe).retrieve(q)) == 3  # recipe
    assert len(rapp.as_retriever(T, P, recipe=recipe, top_k=1).retrieve(q)) == 1  # the call
    rapp.settings.set(T, P, "rag.minScore", 0.99)
    assert rapp.as_retriever(T, P).retrieve(q) == []
    assert rapp.as_retriever(T, P, min_score=0.0).retrieve(q)


def test_path_prefix_kinds_and_metadata_filters(rapp: RagApp) -> None:
    q = "zebra stripes grass"
    wide = dict(top_k=20, min_score=-1.0, max_per_doc=20)
    nodes = rapp.as_retriever(T, P, path_prefix="documents/zebra", **wide).retrieve(q)
    assert {n.node.metadata["path"] for n in nodes} == {
        "documents/zebra.md",
        "documents/zebra-care.md",
    }
    nodes = rapp.as_retriever(
        T, P, path_prefix=["documents/notes/", "documents/g"], **wide
    ).retrieve(q)
    assert {n.node.metadata["path"] for n in nodes} == {
        "documents/notes/zebra.md",
        "documents/grass.md",
    }
    nodes = rapp.as_retriever(T, P, kinds="content", **wide).retrieve(q)
    assert nodes and {n.node.metadata["kind"] for n in nodes} == {"content"}
    not_zebra = MetadataFilters(
        filters=[MetadataFilter(key="path", value="zebra", operator=FilterOperator.TEXT_MATCH)],
        condition="not",
    )
    nodes = rapp.as_retriever(T, P, filters=not_zebra, **wide).retrieve(q)
    assert nodes and all("zebra" not in n.node.metadata["path"] for n in nodes)
    # a prefix that matches nothing: an empty answer, not another document
    assert rapp.as_retriever(T, P, path_prefix="archive/", **wide).retrieve(q) == []


def test_silent_when_off_missing_or_killed(rapp: RagApp, probe: ProbeProvider) -> None:
    retriever = rapp.as_retriever(T, P)
    assert retriever.retrieve("zebra")
    rapp.settings.set(T, P, "rag.project.enabled", False)
    assert retriever.retrieve("zebra") == []
    assert rapp.as_retriever(T, P, rag="_documents").plan().reason == "rag.project.enabled is false"
    rapp.settings.set(T, P, "rag.project.enabled", True)
    probe.log.clear()
    rapp.settings.set(T, None, "ai.embedding.provider", "none")  # the kill switch
    assert retriever.retrieve("zebra") == []
    assert probe.queries == []  # no embedding call
    rapp.settings.set(T, None, "ai.embedding.provider", "probe")
    assert rapp.as_retriever(T, "other-project").retrieve("zebra") == []
    assert rapp.as_retriever(T, P, rag="nope").retrieve("zebra") == []


def test_a_manual_rag_by_name(rapp: RagApp) -> None:
    rag = rapp.rags.create(T, P, "notes")
    rapp.rags.add_text(rag, "q1", "Quokkas smile on Rottnest island.", path="notes/q.md")
    (node,) = rapp.as_retriever(T, P, rag="notes", min_score=0.0).retrieve("quokkas smile")
    assert node.node.ref_doc_id == "q1" and node.node.metadata["path"] == "notes/q.md"


@pytest.mark.parametrize(
    "bad",
    [
        {"top_k": 0},
        {"top_k": "5"},
        {"min_score": 2.0},
        {"max_per_doc": 0},
        {"mode": "sparse"},
        {"path_prefix": ""},
        {"kinds": [3]},
        {"filters": {"path": "x"}},
        {"topK": 3},  # a misspelt option is refused, not ignored
        {"rag": ""},
    ],
)
def test_bad_options_are_refused_when_built(rapp: RagApp, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        rapp.as_retriever(T, P, **bad)
    with pytest.raises(InvalidInputError):
        rapp.as_query_engine(T, P, llm=MockLLM(), **bad)


def test_bad_ids_and_recipes_are_refused(rapp: RagApp) -> None:
    with pytest.raises(InvalidInputError):
        rapp.as_retriever("../t", P)
    with pytest.raises(InvalidInputError):
        rapp.as_retriever(T, P, recipe=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        rapp.as_chat_engine(T, P, llm=MockLLM(), chat_mode="react")


# -- engines -------------------------------------------------------------------------------


def test_query_engine_cites_the_documents_offline(rapp: RagApp) -> None:
    engine = rapp.as_query_engine(T, P, llm=MockLLM(), top_k=3)
    assert isinstance(engine, RetrieverQueryEngine)
    response = engine.query("How many vacation days per year?")
    ids = _doc_ids(rapp)
    assert response.source_nodes
    top = response.source_nodes[0].node
    assert top.metadata["path"] == "documents/holiday.md"
    assert top.ref_doc_id == ids["documents/holiday.md"]
    assert str(response)  # MockLLM echoes the prompt: it held the excerpt and its path
    assert "thirty vacation days" in str(response) and "documents/holiday.md" in str(response)


def test_chat_engines_cite_the_documents_offline(rapp: RagApp) -> None:
    engine = rapp.as_chat_engine(T, P, llm=MockLLM())
    assert isinstance(engine, CondensePlusContextChatEngine)
    reply = engine.chat("How many vacation days per year?")
    assert reply.source_nodes[0].node.metadata["path"] == "documents/holiday.md"
    follow = engine.chat("and what about zebra stripes?")
    assert {n.node.metadata["path"] for n in follow.source_nodes} >= {"documents/zebra.md"}

    context = rapp.as_chat_engine(T, P, llm=MockLLM(), chat_mode="context", top_k=1)
    assert isinstance(context, ContextChatEngine)
    (source,) = context.chat("cluster pods and leases").source_nodes
    assert source.node.metadata["path"] == "documents/cluster.md"


def test_engines_async(rapp: RagApp) -> None:
    async def go() -> None:
        response = await rapp.as_query_engine(T, P, llm=MockLLM()).aquery("vacation days")
        assert response.source_nodes[0].node.metadata["path"] == "documents/holiday.md"
        reply = await rapp.as_chat_engine(T, P, llm=MockLLM()).achat("zebra stripes")
        assert reply.source_nodes[0].node.metadata["path"].startswith("documents/zebra")
        nodes = await rapp.as_retriever(T, P).aretrieve("cluster pods")
        assert nodes[0].node.metadata["path"] == "documents/cluster.md"
        rag = rapp.project_rags.find_default_rag(T, P)
        assert rag is not None
        assert await rapp.rags.aquery(rag, "cluster pods") == rapp.rags.query(rag, "cluster pods")

    asyncio.run(go())


# -- AutoInject is built on it, and LlamaIndex's instrumentation sees it --------------------


class _Events(BaseEventHandler):
    events: list[BaseEvent] = Field(default_factory=list)

    @classmethod
    def class_name(cls) -> str:
        return "Events"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def instrumented() -> Iterator[tuple[SimpleSpanHandler, _Events]]:
    dispatcher = get_dispatcher()  # the root: every LlamaIndex span and event reaches it
    spans, events = SimpleSpanHandler(), _Events()
    dispatcher.add_span_handler(spans)
    dispatcher.add_event_handler(events)
    try:
        yield spans, events
    finally:
        dispatcher.span_handlers.remove(spans)
        dispatcher.event_handlers.remove(events)


def _retrieval_spans(spans: SimpleSpanHandler) -> list[str]:
    return [s.id_ for s in spans.completed_spans if s.id_.startswith("ProjectRagRetriever.")]


def test_pre_turn_retrieves_through_the_retriever(
    rapp: RagApp, instrumented: tuple[SimpleSpanHandler, _Events]
) -> None:
    spans, events = instrumented
    rapp.settings.set(T, None, "rag.autoInject.enabled", "ON")
    recipe = RagParams(top_k=2, max_per_document=1)
    (block,) = rapp.pre_turn(T, P, ["zebra stripes and savanna grass"], recipe)
    assert any(s.startswith("ProjectRagRetriever.retrieve-") for s in _retrieval_spans(spans))
    (end,) = [e for e in events.events if isinstance(e, RetrievalEndEvent)]
    # the block shows what the span's retrieval returned, in that order
    decision = rapp.autoinject.decide(T, P, ["zebra stripes and savanna grass"], recipe)
    assert hits_of(end.nodes) == list(decision.hits) and len(end.nodes) == 2
    same = rapp.as_retriever(T, P, recipe=recipe).retrieve("zebra stripes and savanna grass")
    assert hits_of(same) == list(decision.hits)
    for node in end.nodes:
        assert node.node.metadata["path"] in block


def test_apre_turn_is_instrumented_too(
    rapp: RagApp, instrumented: tuple[SimpleSpanHandler, _Events]
) -> None:
    spans, _ = instrumented
    rapp.settings.set(T, None, "rag.autoInject.enabled", "ON")
    (block,) = asyncio.run(rapp.apre_turn(T, P, ["cluster pods and leases"]))
    assert "documents/cluster.md" in block
    assert _retrieval_spans(spans)
