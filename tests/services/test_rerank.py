"""The rerank stage against loopback servers that speak TEI's and the Cohere-style ``/rerank``
(tests/rerank_server.py): the requests they receive, the order of the hits, the skip on an
outage or error (the retrieval's own order, never a failed query), the key never shown, and
LlamaIndex postprocessors both ways."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from fakes import call_tool
from rerank_server import KEY, Fault, RerankServer, score
from vancetope_rag import hookimpl
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import Hit, RagRecord
from vancetope_rag.errors import RecipeError, SettingError
from vancetope_rag.integrations.llamaindex.rerank import PostprocessorReranker, VancetopeRerank
from vancetope_rag.recipes import parse_recipe
from vancetope_rag.rerankers import RerankSettings

TENANT, PROJECT = "t1", "p1"
QUERY = "cat mat"
TEXTS = {
    "a": "cats sleep on the warm mat all day long",
    "b": "the cat and the mat: a story about a cat on a mat",
    "c": "zebra notes: once a cat saw a zebra near the river",
    "d": "dogs chase the cat around the garden and the mat",
    "e": "a cat naps, the mat waits, the cat naps again",
}


@pytest.fixture
def notes(app: RagApp) -> RagRecord:
    rag = app.rags.create(TENANT, PROJECT, "notes")
    for ref, text in TEXTS.items():
        app.rags.add_text(rag, ref, text)
    return rag


@pytest.fixture
def tei() -> Iterator[RerankServer]:
    srv = RerankServer("tei")
    yield srv
    srv.down()


@pytest.fixture
def cohere() -> Iterator[RerankServer]:
    srv = RerankServer("cohere", key=KEY)
    yield srv
    srv.down()


def use(app: RagApp, provider: str, srv: RerankServer, **more: object) -> None:
    app.settings.set(TENANT, None, "ai.rerank.provider", provider)
    app.settings.set(TENANT, None, "ai.rerank.baseUrl", srv.base_url)
    for key, value in more.items():
        app.settings.set(TENANT, None, key, value)


def ask(app: RagApp, text: str = QUERY, **overrides: Any) -> list[Hit]:
    overrides = {"top_k": 3, "min_score": -1.0, "max_per_doc": 2, **overrides}
    retriever = app.as_retriever(TENANT, PROJECT, rag="notes", **overrides)
    return retriever.retrieve_hits(text)


def counted(app: RagApp, provider: str, outcome: str) -> float:
    value = app.metrics.registry.get_sample_value(
        "vance_rag_rerank_requests_total", {"provider": provider, "outcome": outcome}
    )
    return value or 0.0


def test_off_by_default_no_request_no_rerank_score(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    hits = ask(app)
    assert tei.requests == []
    assert hits and all(h.rerank_score is None for h in hits)
    assert all("rerankScore" not in h.to_json() for h in hits)


def test_tei_gets_the_published_request_and_its_order_wins(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    pool = ask(app, top_k=20, max_per_doc=None)  # the candidates, in the retrieval's order
    baseline = ask(app)
    tei.prefer = "zebra"
    use(app, "tei", tei)

    hits = ask(app)

    (seen,) = tei.requests
    assert seen.path == "/rerank"
    assert seen.authorization is None  # no key set: none sent
    assert seen.body == {"query": QUERY, "texts": [h.text for h in pool], "truncate": True}
    expected = sorted(pool, key=lambda h: -score(QUERY, h.text, "zebra"))[:3]
    assert [h.text for h in hits] == [h.text for h in expected]
    assert "zebra" in hits[0].text and "zebra" not in " ".join(h.text for h in baseline)
    for hit in hits:
        assert hit.rerank_score == score(QUERY, hit.text, "zebra")
        cosine = next(p.score for p in pool if p.chunk_id == hit.chunk_id)
        assert hit.score == cosine  # the cosine keeps its meaning
        assert hit.to_json()["rerankScore"] == pytest.approx(hit.rerank_score)
    assert counted(app, "tei", "ok") == 1


def test_cohere_style_request_with_bearer_key_and_model(
    app: RagApp, notes: RagRecord, cohere: RerankServer
) -> None:
    cohere.prefer = "dogs"
    use(app, "cohere", cohere, **{"ai.rerank.apiKey": KEY, "ai.rerank.model": "jina-reranker-v2"})

    hits = ask(app)

    (seen,) = cohere.requests
    assert seen.path == "/v1/rerank"
    assert seen.authorization == f"Bearer {KEY}"
    assert set(seen.body) == {"model", "query", "documents", "top_n"}
    assert seen.body["model"] == "jina-reranker-v2"
    assert seen.body["query"] == QUERY
    assert seen.body["top_n"] == len(seen.body["documents"]) == len(TEXTS)
    assert "dogs" in hits[0].text
    assert [h.rerank_score for h in hits] == sorted(
        (h.rerank_score for h in hits if h.rerank_score is not None), reverse=True
    )


def test_cohere_default_model_is_sent(app: RagApp, notes: RagRecord, cohere: RerankServer) -> None:
    use(app, "cohere", cohere, **{"ai.rerank.apiKey": KEY})
    ask(app)
    assert cohere.requests[0].body["model"] == "rerank-v3.5"


def test_tei_gets_at_most_its_batch_limit_per_request(app: RagApp, tei: RerankServer) -> None:
    rag = app.rags.create(TENANT, PROJECT, "notes")
    for i in range(40):
        marker = " zebra" if i == 37 else ""
        app.rags.add_text(rag, f"s{i}", f"cat note number {i} on the mat{marker}")
    tei.prefer = "zebra"
    use(app, "tei", tei)

    hits = ask(app, top_k=10, max_per_doc=None)  # 40 candidates: max(4 x 10, 20)

    assert [len(r.body["texts"]) for r in tei.requests] == [32, 8]
    assert "zebra" in hits[0].text  # found in the second batch, ranked first
    assert len(hits) == 10


def test_max_per_document_applies_to_the_rerankers_order(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    app.rags.add_text(notes, "c", "another zebra: a cat on a zebra mat")
    tei.prefer = "zebra"
    use(app, "tei", tei)

    hits = ask(app, max_per_doc=1)

    assert "zebra" in hits[0].text
    assert [h.source_ref for h in hits].count("c") == 1


def test_min_score_is_still_a_cosine_floor_before_the_rerank(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    pool = ask(app, top_k=20, max_per_doc=None)
    floor = sorted(h.score for h in pool)[len(pool) // 2]
    tei.prefer = "zebra"
    use(app, "tei", tei)

    hits = ask(app, min_score=floor)

    sent = tei.requests[0].body["texts"]
    assert sent == [h.text for h in pool if h.score >= floor]
    assert all(h.score >= floor for h in hits)


@pytest.mark.parametrize(
    ("fault", "outage"),
    [
        (Fault(413, "batch size 40 > maximum allowed batch size 32", "validation"), False),
        (Fault(422, "Tokenization error", "tokenizer"), False),
        (Fault(400, "`texts` cannot be empty", "empty"), False),
        (Fault(424, "Inference failed", "backend"), True),
        (Fault(429, "Model is overloaded", "overloaded", {"Retry-After": "30"}), True),
        (Fault(503, "unhealthy", "unhealthy"), True),
    ],
    ids=["413", "422", "400", "424", "429", "503"],
)
def test_an_error_skips_the_rerank_never_the_query(
    app: RagApp, notes: RagRecord, tei: RerankServer, fault: Fault, outage: bool
) -> None:
    baseline = ask(app)
    tei.prefer = "zebra"
    tei.faults.append(fault)
    use(app, "tei", tei)

    hits = ask(app)

    assert [h.chunk_id for h in hits] == [h.chunk_id for h in baseline]  # the retrieval's order
    assert all(h.rerank_score is None for h in hits)
    assert counted(app, "tei", "error" if not outage else "skipped") == 1
    again = ask(app)
    if outage:  # the circuit is open: the next query is not sent, its order is kept
        assert len(tei.requests) == 1
        assert [h.chunk_id for h in again] == [h.chunk_id for h in baseline]
        assert counted(app, "tei", "skipped") == 2
    else:  # the input's fault: the next query is tried (and the server answers it)
        assert len(tei.requests) == 2
        assert "zebra" in again[0].text


@pytest.mark.parametrize("status", [400, 429, 500])
def test_cohere_errors_skip_the_rerank(
    app: RagApp, notes: RagRecord, cohere: RerankServer, status: int
) -> None:
    baseline = ask(app)
    cohere.faults.append(Fault(status, "invalid request: nope"))
    use(app, "cohere", cohere, **{"ai.rerank.apiKey": KEY})
    assert [h.chunk_id for h in ask(app)] == [h.chunk_id for h in baseline]


def test_a_timeout_skips_the_rerank_within_the_limit(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    baseline = ask(app)
    tei.delay_s = 5.0
    use(app, "tei", tei, **{"ai.rerank.timeoutSeconds": 0.2})
    started = time.monotonic()
    hits = ask(app)
    assert time.monotonic() - started < 4.5  # the query did not wait for the answer
    assert [h.chunk_id for h in hits] == [h.chunk_id for h in baseline]
    ask(app)
    assert len(tei.requests) == 1  # a timeout is an outage: the circuit opened


def test_an_unreachable_reranker_logs_one_warning(
    app: RagApp, notes: RagRecord, tei: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    baseline = ask(app)
    use(app, "tei", tei)
    tei.down()
    with caplog.at_level(logging.DEBUG, logger="vancetope_rag"):
        first, second = ask(app), ask(app)
    assert [h.chunk_id for h in first] == [h.chunk_id for h in baseline]
    assert [h.chunk_id for h in second] == [h.chunk_id for h in baseline]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "reranker tei" in warnings[0].getMessage()


def test_the_rerank_comes_back_with_the_reranker(
    make_app: Any, tei: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vancetope_rag")
    app = make_app(config={"provider_retry_s": 0.2, "provider_retry_max_s": 0.2})
    rag = app.rags.create(TENANT, PROJECT, "notes")
    for ref, text in TEXTS.items():
        app.rags.add_text(rag, ref, text)
    tei.prefer = "zebra"
    use(app, "tei", tei)
    tei.down()
    assert all(h.rerank_score is None for h in ask(app))
    tei.up()
    deadline = time.monotonic() + 20
    while True:  # due for its trial once the retry wait is over
        hits = ask(app)
        if hits[0].rerank_score is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert "zebra" in hits[0].text and hits[0].rerank_score is not None
    assert "reranker tei at" in caplog.text and "is back" in caplog.text


def test_over_its_requests_per_minute_a_query_goes_without_the_reranker(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    baseline = ask(app)
    tei.prefer = "zebra"
    use(app, "tei", tei, **{"ai.rerank.requestsPerMinute": 2})
    started = time.monotonic()
    first, second, third = ask(app), ask(app), ask(app)
    assert time.monotonic() - started < 30  # never waited out the minute
    assert len(tei.requests) == 2
    assert "zebra" in first[0].text and "zebra" in second[0].text
    assert [h.chunk_id for h in third] == [h.chunk_id for h in baseline]
    assert counted(app, "tei", "skipped") == 1


def test_a_reranker_refusing_every_query_warns_once(
    app: RagApp, notes: RagRecord, tei: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    use(app, "tei", tei)
    tei.faults += [Fault(413, "batch size 40 > maximum allowed batch size 32", "validation")] * 3
    with caplog.at_level(logging.DEBUG, logger="vancetope_rag"):
        for _ in range(3):
            assert ask(app)
    assert len(tei.requests) == 3  # the input's fault: no circuit, each query tries
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "HTTP 413: batch size 40" in warnings[0].getMessage()
    assert counted(app, "tei", "error") == 3


def test_the_key_is_never_shown_or_logged(
    app: RagApp, notes: RagRecord, cohere: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-rerank-key-55e1a0"
    use(app, "cohere", cohere, **{"ai.rerank.apiKey": wrong})
    assert app.settings.get_public(TENANT, PROJECT, "ai.rerank.apiKey") == "********"
    assert app.settings.get_public_with_source(TENANT, None, "ai.rerank.apiKey") == (
        "********",
        "tenant",
    )
    with caplog.at_level(logging.DEBUG, logger="vancetope_rag"):
        hits = ask(app)  # the server quotes the wrong token back in its 401
    assert hits
    assert cohere.requests[0].authorization == f"Bearer {wrong}"
    assert "invalid api token" in caplog.text and wrong not in caplog.text
    with pytest.raises(SettingError) as bad:
        app.settings.set(TENANT, None, "ai.rerank.apiKey", ["not", wrong])
    assert wrong not in str(bad.value)


def test_settings_are_validated(app: RagApp) -> None:
    with pytest.raises(SettingError, match="did you mean tei"):
        app.settings.set(TENANT, None, "ai.rerank.provider", "teii")
    with pytest.raises(SettingError, match="http"):
        app.settings.set(TENANT, None, "ai.rerank.baseUrl", "ftp://reranker")
    with pytest.raises(SettingError):
        app.settings.set(TENANT, None, "ai.rerank.timeoutSeconds", "0")
    with pytest.raises(SettingError):
        app.settings.set(TENANT, None, "ai.rerank.candidates", "5000")


def test_tei_without_base_url_skips_with_a_clear_warning(
    app: RagApp, notes: RagRecord, caplog: pytest.LogCaptureFixture
) -> None:
    app.settings.set(TENANT, None, "ai.rerank.provider", "tei")
    with caplog.at_level(logging.WARNING, logger="vancetope_rag"):
        assert ask(app)
    assert "ai.rerank.baseUrl is required" in caplog.text


def test_a_project_with_another_reranker_never_inherits_the_tenants_key(app: RagApp) -> None:
    app.settings.set(TENANT, None, "ai.rerank.provider", "cohere")
    app.settings.set(TENANT, None, "ai.rerank.apiKey", KEY)
    assert app.settings.snapshot(TENANT, PROJECT).rerank().api_key == KEY
    app.settings.set(TENANT, PROJECT, "ai.rerank.provider", "tei")
    assert app.settings.snapshot(TENANT, PROJECT).rerank().api_key is None


def test_a_recipe_or_the_caller_turns_it_off(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    use(app, "tei", tei)
    recipe = parse_recipe({"name": "plain", "params": {"rag": {"rerank": False}}})
    assert recipe.rag.rerank is False
    ask(app, recipe=recipe)
    ask(app, rerank=False)
    assert tei.requests == []
    ask(app)
    assert len(tei.requests) == 1
    with pytest.raises(RecipeError, match="rerank must be true or false"):
        parse_recipe({"name": "x", "params": {"rag": {"rerank": "off"}}})


def test_the_rag_query_tool_goes_through_the_stage(
    app: RagApp, notes: RagRecord, tei: RerankServer
) -> None:
    tei.prefer = "zebra"
    use(app, "tei", tei)
    result = call_tool(app.tools(TENANT, PROJECT), "rag_query", ragId="notes", query=QUERY)
    (seen,) = tei.requests  # the project's minScore and topK, the reranker's order
    best = max(seen.body["texts"], key=lambda t: score(QUERY, t, "zebra"))
    assert result["hits"][0]["text"] == best
    assert result["hits"][0]["rerankScore"] == pytest.approx(score(QUERY, best, "zebra"))


# -- LlamaIndex, both ways -------------------------------------------------------------------


class ShortestFirst(BaseNodePostprocessor):
    """A user's own postprocessor: shortest text first, scored 1/length, the best two kept."""

    @classmethod
    def class_name(cls) -> str:
        return "ShortestFirst"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        assert query_bundle is not None and query_bundle.query_str == QUERY
        ranked = sorted(nodes, key=lambda n: len(n.node.get_content()))
        return [NodeWithScore(node=n.node, score=1 / len(n.node.get_content())) for n in ranked][:2]


def test_a_users_postprocessor_is_the_reranker(app: RagApp, notes: RagRecord) -> None:
    app.rerankers.register(PostprocessorReranker("shortest", ShortestFirst()))
    app.settings.set(TENANT, None, "ai.rerank.provider", "shortest")
    pool = ask(app, top_k=20, max_per_doc=None, rerank=False)

    hits = ask(app, top_k=4, max_per_doc=None)

    by_length = sorted(pool, key=lambda h: len(h.text))
    assert [h.text for h in hits[:2]] == [h.text for h in by_length[:2]]
    assert hits[0].rerank_score == pytest.approx(1 / len(hits[0].text))
    # what it left out follows, in the retrieval's order, without a rerank score
    rest = [h for h in pool if h.chunk_id not in {x.chunk_id for x in hits[:2]}]
    assert [h.chunk_id for h in hits[2:]] == [h.chunk_id for h in rest[:2]]
    assert hits[2].rerank_score is None


def test_ours_is_a_llamaindex_postprocessor(app: RagApp, tei: RerankServer) -> None:
    tei.prefer = "zebra"
    use(app, "tei", tei)
    post = app.rerank_postprocessor(TENANT, PROJECT, top_n=2)
    assert isinstance(post, BaseNodePostprocessor)
    nodes = [NodeWithScore(node=TextNode(id_=k, text=t), score=0.5) for k, t in TEXTS.items()]

    out = post.postprocess_nodes(nodes, query_str=QUERY)

    assert [n.node.node_id for n in out] == ["c", "b"]
    assert out[0].score == score(QUERY, TEXTS["c"], "zebra")
    assert tei.requests[0].body["texts"] == list(TEXTS.values())
    tei.down()  # an outage: the nodes come back as given (top_n still applies)
    assert [n.node.node_id for n in post.postprocess_nodes(nodes, query_str=QUERY)] == ["a", "b"]


def test_ours_with_explicit_settings_and_no_reranker(app: RagApp) -> None:
    post = VancetopeRerank(app.rags.reranking, RerankSettings())  # provider none: unchanged
    nodes = [NodeWithScore(node=TextNode(id_=k, text=t), score=0.5) for k, t in TEXTS.items()]
    assert post.postprocess_nodes(nodes, query_str=QUERY) == nodes


class _Plugin:
    @hookimpl
    def register_rerankers(self, register: Any) -> None:
        register(PostprocessorReranker("from-plugin", ShortestFirst()))


def test_a_plugin_registers_a_reranker(make_app: Any) -> None:
    from vancetope_rag.plugins import get_plugin_manager

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(_Plugin())
    app = make_app(plugins=pm)
    assert {"none", "tei", "cohere", "from-plugin"} <= set(app.rerankers.names())
    app.settings.set(TENANT, None, "ai.rerank.provider", "from-plugin")  # accepted


def test_autoinject_blocks_follow_the_rerankers_order(app: RagApp, tei: RerankServer) -> None:
    app.bring(TENANT, PROJECT)
    app.settings.set(TENANT, None, "rag.minScore", -1.0)
    for ref, text in TEXTS.items():
        app.document_saved(TENANT, PROJECT, f"documents/{ref}.md", text)
    assert app.scheduler.run_until_idle(timeout_s=30).failed == 0
    recipe = parse_recipe({"name": "on", "params": {"rag": {"autoInject": "ON", "topK": 2}}}).rag
    before = "\n".join(app.pre_turn(TENANT, PROJECT, [QUERY], recipe))
    assert "documents/" in before and "zebra" not in before
    tei.prefer = "zebra"
    use(app, "tei", tei)

    block = "\n".join(app.pre_turn(TENANT, PROJECT, [QUERY], recipe))

    assert len(tei.requests) == 1
    # the reranker's order; the block's own line keeps the cosine, "(score 0.18)"
    assert "[S1] documents/c.md (score " in block and "[S2] documents/b.md" in block
