"""What a host saves with a document besides its text.

``RagApp.summary_saved`` (and its hook) writes a document's summary by path and queues the
document (spec §4.2), so its summary chunk is indexed. ``document_saved`` takes the host's
metadata: bounded, stored with the document, a change queues it, and the indexer copies it
into every chunk, where a LlamaIndex ``MetadataFilters`` query through the project's
retriever selects by it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters
from synchelpers import chunks, default_rag, ticks_until_idle

from fakes import P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.errors import DocumentNotFoundError, InvalidInputError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.plugins import get_plugin_manager

AppFactory = Callable[..., RagApp]

RED = "documents/red.md"
BLUE = "documents/blue.md"
TEXT = "Zebras graze on the savanna grass and their stripes confuse biting flies."


@pytest.fixture
def probe() -> ProbeProvider:
    return ProbeProvider()


@pytest.fixture
def papp(make_app: AppFactory, probe: ProbeProvider) -> RagApp:
    app = make_app(provider="probe", embeddings=registry(probe))
    app.settings.set(T, None, "rag.minScore", -1.0)
    app.bring(T, P)
    return app


def _kinds(app: RagApp, path: str) -> dict[str, list[str]]:
    doc = app.documents.get_by_path(T, P, path)
    assert doc is not None
    out: dict[str, list[str]] = {}
    for c in chunks(app, default_rag(app), doc.id):
        out.setdefault(c.kind, []).append(c.text)
    return out


def _paths(app: RagApp, filters: MetadataFilters, query: str = "zebra stripes") -> list[str]:
    nodes = app.as_retriever(T, P, filters=filters, top_k=10).retrieve(query)
    return sorted({str(n.node.metadata["path"]) for n in nodes})


def _team(value: Any, op: FilterOperator = FilterOperator.EQ) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key="team", value=value, operator=op)])


# -- summaries -----------------------------------------------------------------------------------


def test_summary_saved_writes_the_summary_chunk_by_path(papp: RagApp) -> None:
    papp.document_saved(T, P, RED, TEXT)
    ticks_until_idle(papp)
    assert _kinds(papp, RED) == {"content": [TEXT]}

    doc = papp.summary_saved(T, P, RED, "Zebras in short.")
    assert doc is not None and doc.summary == "Zebras in short." and doc.rag_dirty
    assert ticks_until_idle(papp) == 1
    assert _kinds(papp, RED) == {"content": [TEXT], "summary": ["Zebras in short."]}

    same = papp.summary_saved(T, P, RED, "Zebras in short.")
    assert same is not None and not same.rag_dirty  # no change, nothing to index

    cleared = papp.summary_saved(T, P, RED, None)
    assert cleared is not None and cleared.summary is None and cleared.rag_dirty
    ticks_until_idle(papp)
    assert _kinds(papp, RED) == {"content": [TEXT]}


def test_summary_saved_refuses_what_it_cannot_store(papp: RagApp) -> None:
    with pytest.raises(DocumentNotFoundError, match="save the document"):
        papp.summary_saved(T, P, "documents/nowhere.md", "a summary")
    papp.document_saved(T, P, RED, TEXT)
    with pytest.raises(InvalidInputError, match="text or None"):
        papp.summary_saved(T, P, RED, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="relative"):
        papp.summary_saved(T, P, "/etc/passwd", "a summary")
    with pytest.raises(InvalidInputError, match="tenant id"):
        papp.summary_saved("", P, RED, "a summary")
    doc = papp.documents.get_by_path(T, P, RED)
    assert doc is not None and doc.summary is None


def test_summary_saved_is_a_hook_a_plugin_can_take(make_app: AppFactory) -> None:
    seen: list[tuple[str, str | None]] = []

    class SummaryLog:
        @hookimpl
        def summary_saved(self, path: str, summary: str | None) -> None:
            seen.append((path, summary))

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(SummaryLog())
    pm.check_pending()
    app = make_app(plugins=pm)
    app.bring(T, P)
    app.document_saved(T, P, RED, TEXT)
    doc = app.summary_saved(T, P, RED, "short")
    assert seen == [(RED, "short")]
    assert doc is not None and doc.summary == "short"  # the default plugin's result


# -- host metadata -------------------------------------------------------------------------------


def test_metadata_is_stored_and_only_a_change_queues_the_document(papp: RagApp) -> None:
    doc = papp.document_saved(T, P, RED, TEXT, metadata={"team": "red", "year": 2024})
    assert doc is not None and doc.metadata == {"team": "red", "year": 2024}
    ticks_until_idle(papp)

    same = papp.document_saved(T, P, RED, TEXT, metadata={"year": 2024, "team": "red"})
    assert same is not None and not same.rag_dirty
    kept = papp.document_saved(T, P, RED, TEXT)  # None: the stored metadata stays
    assert (
        kept is not None and not kept.rag_dirty and kept.metadata == {"team": "red", "year": 2024}
    )
    changed = papp.document_saved(T, P, RED, TEXT, metadata={"team": "blue"})
    assert changed is not None and changed.rag_dirty and changed.metadata == {"team": "blue"}
    ticks_until_idle(papp)
    cleared = papp.document_saved(T, P, RED, TEXT, metadata={})
    assert cleared is not None and cleared.rag_dirty and cleared.metadata == {}


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({f"k{i}": i for i in range(33)}, "33 keys, more than 32"),
        ({"notes": "x" * 5000}, "longer than 4,096"),
        ({f"k{i}": "x" * 200 for i in range(25)}, "larger than 4,096"),
        ({"path": "documents/other.md"}, "may not use the key"),
        ({"ref_doc_id": "d1"}, "may not use the key"),
        ({"tags": ["a", "b"]}, "string, number, boolean or null"),
        ({"nested": {"a": 1}}, "string, number, boolean or null"),
        ({1: "one"}, "must be a string"),
        (["team", "red"], "must be an object"),
        ({"year": float("nan")}, "finite number"),
    ],
)
def test_bad_metadata_is_refused_and_nothing_is_written(
    papp: RagApp, metadata: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        papp.document_saved(T, P, RED, TEXT, metadata=metadata)
    assert papp.documents.get_by_path(T, P, RED) is None  # not created

    papp.document_saved(T, P, BLUE, TEXT, metadata={"team": "blue"})
    with pytest.raises(InvalidInputError, match=message):
        papp.document_saved(T, P, BLUE, "new text", metadata=metadata)
    doc = papp.documents.get_by_path(T, P, BLUE)
    assert doc is not None and (doc.content, doc.metadata) == (TEXT, {"team": "blue"})


def test_llamaindex_metadata_filters_select_by_the_hosts_metadata(papp: RagApp) -> None:
    papp.document_saved(T, P, RED, TEXT, metadata={"team": "red", "year": 2023})
    papp.document_saved(T, P, BLUE, TEXT + " Blue notes.", metadata={"team": "blue", "year": 2025})
    papp.document_saved(T, P, "documents/none.md", TEXT + " No team.")
    ticks_until_idle(papp)

    assert _paths(papp, _team("red")) == [RED]
    assert _paths(papp, _team(["red", "blue"], FilterOperator.IN)) == [BLUE, RED]
    assert _paths(papp, _team("red", FilterOperator.NE)) == [BLUE, "documents/none.md"]
    recent = MetadataFilters(
        filters=[MetadataFilter(key="year", value=2024, operator=FilterOperator.GTE)]
    )
    assert _paths(papp, recent) == [BLUE]
    # the query engine's source nodes carry it too, never shown to the model
    node = papp.as_retriever(T, P, filters=_team("blue")).retrieve("zebra")[0].node
    assert node.metadata["team"] == "blue" and "team" in node.excluded_llm_metadata_keys

    papp.document_saved(T, P, RED, TEXT, metadata={"team": "blue"})  # moves to team blue
    ticks_until_idle(papp)
    assert _paths(papp, _team("red")) == []
    assert _paths(papp, _team("blue")) == [BLUE, RED]


def test_summary_chunks_carry_the_metadata(papp: RagApp) -> None:
    papp.document_saved(T, P, RED, TEXT, metadata={"team": "red"})
    papp.summary_saved(T, P, RED, "A summary of zebras.")
    ticks_until_idle(papp)
    doc = papp.documents.get_by_path(T, P, RED)
    assert doc is not None
    stored = chunks(papp, default_rag(papp), doc.id)
    assert {c.kind for c in stored} == {"content", "summary"}
    assert all(c.metadata == {"team": "red"} for c in stored)


def test_a_metadata_change_embeds_nothing_again(papp: RagApp, probe: ProbeProvider) -> None:
    papp.document_saved(T, P, RED, TEXT, metadata={"team": "red"})
    ticks_until_idle(papp)
    probe.log.clear()
    papp.document_saved(T, P, RED, TEXT, metadata={"team": "blue"})
    assert ticks_until_idle(papp) == 1
    assert probe.log.embedded == []  # the text's vectors come from the embedding cache
    assert _paths(papp, _team("blue")) == [RED]


def test_every_section_of_a_read_file_carries_the_metadata() -> None:
    """A file read in sections (sheets, pages) is one text per section: each keeps its
    ``section`` and gets the host's metadata beside it."""
    from vancetope_rag.domain.records import Document
    from vancetope_rag.extraction.records import ExtractionRecord
    from vancetope_rag.services.indexing.sources import document_parts
    from vancetope_rag.store.port.shared import content_hash

    text = "first sheet text\nsecond sheet text"
    record = ExtractionRecord(
        file_hash="f",
        config="c",
        content_hash=content_hash(text),
        sections=(("sheet A", 0, 16), ("sheet B", 17, len(text))),
    )
    doc = Document(
        "d1",
        T,
        P,
        "documents/book.xlsx",
        "text/plain",
        text,
        summary="a book",
        content_hash=content_hash(text),
        extraction=record.to_json(),
        metadata={"team": "red"},
    )
    parts, _ = document_parts(doc, True, lambda t: (t, False))
    assert [(p.kind, dict(p.metadata)) for p in parts] == [
        ("content", {"team": "red", "section": "sheet A"}),
        ("content", {"team": "red", "section": "sheet B"}),
        ("summary", {"team": "red"}),
    ]
