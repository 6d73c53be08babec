"""RagAutoInjectService: silent skips, failure tolerance, parameters and the block's format."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import pytest
import yaml
from chat_fakes import index_docs

from fakes import DOCS, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.recipes import RagParams, parse_recipe

QUESTION = "zebra stripes and savanna grass"
AUTOINJECT_LOG = "vancetope_rag.services.autoinject"

AppFactory = Callable[..., RagApp]


def _on(app: RagApp, min_score: float = 0.05) -> RagApp:
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", min_score)
    return app


def _hits(block: str) -> list[tuple[str, str, bool]]:
    """(label, source, is summary) of every hit line of a rendered default block."""
    pattern = re.compile(r"^- \[(S\d+)\] (\S+)( \[summary\])? \(score -?\d\.\d\d\)$", re.M)
    return [(m[1], m[2], bool(m[3])) for m in pattern.finditer(block)]


@pytest.fixture
def probe() -> ProbeProvider:
    return ProbeProvider()


@pytest.fixture
def probe_app(make_app: AppFactory, probe: ProbeProvider) -> RagApp:
    app = _on(make_app(provider="probe", embeddings=registry(probe)))
    index_docs(app)
    probe.log.clear()
    return app


# -- the happy path and the silent skips -------------------------------------------------


def test_block_when_on_and_relevant(probe_app: RagApp, probe: ProbeProvider) -> None:
    decision = probe_app.autoinject.decide(T, P, [QUESTION])
    assert decision.reason == "injected"
    assert decision.block is not None and decision.block.startswith("<rag-context>")
    assert decision.block.rstrip().endswith("</rag-context>")
    assert _hits(decision.block)[0][:2] == ("S1", "documents/zebra.md")
    assert probe.queries == [QUESTION]


def test_disabled_is_a_silent_skip(
    probe_app: RagApp, probe: ProbeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    probe_app.settings.set(T, None, "rag.autoInject.enabled", "OFF")
    with caplog.at_level(logging.DEBUG, logger="vancetope_rag"):
        assert probe_app.pre_turn(T, P, [QUESTION]) == []
    assert probe.queries == []  # no embed call at all
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_project_rag_disabled_is_a_silent_skip(probe_app: RagApp, probe: ProbeProvider) -> None:
    probe_app.settings.set(T, P, "rag.project.enabled", False)
    decision = probe_app.autoinject.decide(T, P, [QUESTION])
    assert (decision.block, decision.reason) == (None, "rag.project.enabled is false")
    assert probe.queries == []


def test_no_documents_rag_is_a_silent_skip(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = _on(make_app())
    app.document_saved(T, P, "documents/zebra.md", DOCS["documents/zebra.md"])
    with caplog.at_level(logging.WARNING):
        decision = app.autoinject.decide(T, P, [QUESTION])  # never brought
        assert app.pre_turn(T, P, [QUESTION]) == []
        index_docs(app)
        assert app.pre_turn(T, P, [QUESTION]) != []
        app.close_project(T, P)  # disposes _documents
        assert app.pre_turn(T, P, [QUESTION]) == []
    assert decision.reason == "the project has no _documents RAG"
    assert caplog.records == []


def test_provider_none_is_silent_even_with_an_old_rag(
    probe_app: RagApp, probe: ProbeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """Spec §4.5: provider ``none`` means no embed call and no WARN logs."""
    probe_app.settings.set(T, None, "ai.embedding.provider", "none")
    with caplog.at_level(logging.WARNING):
        assert probe_app.pre_turn(T, P, [QUESTION]) == []
    assert probe.queries == []
    assert caplog.records == []


@pytest.mark.parametrize("messages", [[], [""], ["   "], ["\n\t", ""]])
def test_no_user_text_is_a_silent_skip(
    probe_app: RagApp, probe: ProbeProvider, messages: list[str]
) -> None:
    decision = probe_app.autoinject.decide(T, P, messages)
    assert (decision.enabled, decision.block) == (True, None)
    assert decision.reason == "no user text in this turn"
    assert probe_app.pre_turn(T, P, messages) == []
    assert probe.queries == []


def test_no_hit_above_min_score(probe_app: RagApp) -> None:
    probe_app.settings.set(T, P, "rag.minScore", 0.99)
    decision = probe_app.autoinject.decide(T, P, [QUESTION])
    assert decision.block is None and decision.hits == ()
    assert decision.reason == "no hit scored 0.99 or more"
    # a recipe's minScore beats the setting
    recipe = RagParams(min_score=0.05)
    assert probe_app.pre_turn(T, P, [QUESTION], recipe) != []
    # unrelated words: nothing relevant at the default threshold
    probe_app.settings.set(T, P, "rag.minScore", 0.3)
    assert probe_app.pre_turn(T, P, ["quantum chromodynamics lecture"]) == []


def test_failing_embedding_call_warns_and_skips(
    probe_app: RagApp, probe: ProbeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    probe.fail_queries = True
    with caplog.at_level(logging.WARNING, logger=AUTOINJECT_LOG):
        assert probe_app.pre_turn(T, P, [QUESTION]) == []
        decision = probe_app.autoinject.decide(T, P, [QUESTION])
    assert decision.reason.startswith("retrieval failed")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all(r.name == AUTOINJECT_LOG for r in warnings)
    assert "embedding endpoint unreachable" in warnings[0].getMessage()
    probe.fail_queries = False
    assert probe_app.pre_turn(T, P, [QUESTION]) != []  # the next turn recovers


@pytest.mark.parametrize(
    "template",
    # failures that depend on the turn's hits; an unsafe one ("{{ hits.__class__ }}") or a
    # field hits lack ("{{ hits[0].no_such_field }}") is refused at load:
    # tests/unit/test_template_unsafe_at_load.py
    ["{{ hits[7].label }}", "{{ 1 // 0 }}"],
)
def test_template_error_warns_and_skips(
    probe_app: RagApp, caplog: pytest.LogCaptureFixture, template: str
) -> None:
    recipe = parse_recipe(
        yaml.safe_load(f"name: r\nparams:\n  rag:\n    template: '{template}'\n")
    ).rag
    with caplog.at_level(logging.WARNING, logger=AUTOINJECT_LOG):
        assert probe_app.pre_turn(T, P, [QUESTION], recipe) == []
    assert "context template failed" in caplog.text


def test_multiple_user_messages_are_concatenated(probe_app: RagApp, probe: ProbeProvider) -> None:
    assert probe_app.pre_turn(T, P, [" zebra stripes ", "", "cluster pods"]) != []
    assert probe.queries == ["zebra stripes\ncluster pods"]
    block = probe_app.pre_turn(T, P, ["zebra stripes", "cluster pods leases"])[0]
    assert {source for _, source, _ in _hits(block)} >= {
        "documents/zebra.md",
        "documents/cluster.md",
    }


# -- topK / maxPerDocument precedence ----------------------------------------------------

LONG_DOC = " ".join(
    f"Sentence {n} mentions the zebra herd near waterhole number {n} again." for n in range(8)
)
SMALL_DOCS = {f"documents/small{n}.md": f"A zebra note number {n}." for n in range(6)}


@pytest.fixture
def many_app(make_app: AppFactory) -> RagApp:
    app = make_app(
        config={
            "chunk_size": 16,
            "chunk_overlap": 0,
            "retrieval_top_k": 5,
            "retrieval_max_per_doc": 4,
        }
    )
    _on(app, min_score=-1.0)
    index_docs(app, {"documents/long.md": LONG_DOC, **SMALL_DOCS})
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and app.rags.chunk_count(rag) >= 6 + 5
    return app


def _count(app: RagApp, recipe: RagParams | None = None, path: str | None = None) -> int:
    (block,) = app.pre_turn(T, P, ["zebra"], recipe)
    return sum(1 for _, source, _ in _hits(block) if path is None or source == path)


def test_top_k_precedence(many_app: RagApp) -> None:
    assert _count(many_app) == 5  # engine configuration
    many_app.settings.set(T, None, "rag.topK", 4)
    assert _count(many_app) == 4  # tenant setting
    many_app.settings.set(T, P, "rag.topK", 3)
    assert _count(many_app) == 3  # project setting beats tenant
    assert _count(many_app, RagParams(top_k=2)) == 2  # recipe beats both
    recipe = parse_recipe(yaml.safe_load("name: r\nparams: {rag: {topK: 1}}")).rag
    assert _count(many_app, recipe) == 1


def test_max_per_document_precedence(many_app: RagApp) -> None:
    many_app.settings.set(T, None, "rag.topK", 10)
    long = "documents/long.md"
    assert _count(many_app, path=long) == 4  # engine configuration
    many_app.settings.set(T, None, "rag.maxPerDocument", 3)
    assert _count(many_app, path=long) == 3
    many_app.settings.set(T, P, "rag.maxPerDocument", 2)
    assert _count(many_app, path=long) == 2
    assert _count(many_app, RagParams(max_per_document=1), path=long) == 1
    assert _count(many_app, RagParams(max_per_document=1)) == 7  # 1 long + 6 small


# -- the block's format ------------------------------------------------------------------


def test_labels_and_summary_marker(app: RagApp) -> None:
    _on(app, min_score=-1.0)
    index_docs(app)
    doc = app.documents.get_by_path(T, P, "documents/holiday.md")
    assert doc is not None
    app.documents.set_summary(T, P, doc.id, "Summary: vacation days and portal.")
    app.scheduler.run_until_idle(timeout_s=30)

    recipe = RagParams(top_k=10, max_per_document=5)
    (block,) = app.pre_turn(T, P, ["vacation days portal"], recipe)
    hits = _hits(block)
    assert hits[0][1] == "documents/holiday.md"
    assert ("S1", "documents/holiday.md", True) in hits
    assert ("S1", "documents/holiday.md", False) in hits
    # one label per source, numbered by first appearance
    labels: dict[str, str] = {}
    for label, source, _ in hits:
        assert labels.setdefault(source, label) == label
    assert list(labels.values()) == [f"S{n}" for n in range(1, len(labels) + 1)]
    assert len(labels) == 3
    assert "Cite the\nsource path" in block
