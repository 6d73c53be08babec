"""The relevance cut with a reranker: the rerank stage's own calibration of
the cut, measured per RAG and per reranker against the loopback servers that speak TEI's and
the Cohere-style ``/rerank`` (tests/rerank_server.py); a turn whose hits the reranker scored
is cut by those scores; an outage (of the turn or of the calibration) falls back to the
cosine gap, never loses the block; another model is measured again, looked for once a
minute; a RAG with nothing to measure is not measured again until it grows or the reranker
changes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from rerank_server import KEY, RerankServer
from vancetope_rag.api.models import StatusResponse
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import RagRecord
from vancetope_rag.domain.retrieval.relevance import RELEVANCE_AUTO, cut_by_relevance
from vancetope_rag.domain.retrieval.rerank_calibration import (
    RERANK_CALIBRATION_QUERIES,
    RERANK_CALIBRATION_TEXTS,
    RerankCalibration,
    rerank_identity,
)
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.recipes import RagParams
from vancetope_rag.services.autoinject import InjectionDecision
from vancetope_rag.services.indexing.scheduler import RERANK_CHECK_S
from vancetope_rag.services.providers import Pacer

T, P = "t1", "p1"

#: 24 one-chunk pages, two or three sentences each: enough chunks to calibrate, and each
#: sentence has words of its own page only, so a page's other sentences answer it.
PAGES = {
    "vacation": "Every employee receives twenty five vacation days each calendar year. "
    "Unused vacation days carry over until the end of March.",
    "sick": "Call your manager before nine when illness keeps you at home. A doctor "
    "certificate is required from the fourth sick day onwards.",
    "remote": "Remote work from home is allowed three days per week. Agree your remote "
    "schedule with the team lead before starting.",
    "expenses": "Submit travel receipts and meal receipts within thirty days. Finance "
    "reimburses approved expense claims monthly through the portal.",
    "parental": "New parents receive sixteen weeks of paid parental leave. Parental leave "
    "may be split into two blocks within the first year.",
    "laptops": "Every new hire receives a laptop on the first morning. Report a broken "
    "laptop screen to the helpdesk for a quick replacement.",
    "passwords": "Store every password inside the approved password manager. Turn on "
    "two factor authentication for each company account immediately.",
    "payroll": "Salaries are paid on the last working day of every month. Payslips appear "
    "in the payroll portal two days before payment.",
    "pension": "The company adds five percent of salary into the pension plan. Pension "
    "statements arrive by post every spring for review.",
    "office": "The office building opens at seven and closes at eight on weekdays. "
    "Weekend access to the office requires a signed security form.",
    "parking": "Staff parking spaces are inside the garage under building B. Request a "
    "parking badge from facilities before bringing a car.",
    "canteen": "The canteen serves lunch between noon and two every weekday. Vegetarian "
    "and vegan canteen dishes rotate through a weekly menu.",
    "gym": "Employees may use the ground floor gym without any charge. Book yoga and "
    "spinning gym classes through the intranet calendar.",
    "training": "Each employee owns a yearly training budget of fifteen hundred euros. "
    "Spend the training budget on courses, books or conferences.",
    "reviews": "Performance reviews happen twice yearly in June and December. Prepare "
    "review notes about goals and achievements beforehand.",
    "onboarding": "A friendly buddy guides every newcomer through onboarding week. The "
    "onboarding buddy also explains internal tools and channels.",
    "security": "Always wear the building badge visibly at the gates. Never let strangers "
    "follow you through security doors or turnstiles.",
    "travel": "Book business flights and hotels through the travel agency portal. Economy "
    "class applies to flights shorter than six hours.",
    "phones": "Staff members on call receive a company mobile phone. Reasonable personal "
    "calls on the company phone are tolerated.",
    "harassment": "Report harassment to human resources or the confidential adviser. "
    "Every harassment report gets investigated quickly and discreetly.",
    "overtime": "Overtime must be approved by your manager in advance. Approved overtime "
    "hours become time off in lieu later.",
    "holidays": "The office closes on national public holidays each year. The holiday "
    "list for next year appears on the intranet.",
    "resignation": "The notice period lasts one month for most staff. Managers must give "
    "two months notice before leaving the company.",
    "referrals": "Refer a friend who joins and earn a referral bonus. The referral bonus "
    "of one thousand euros follows their probation period.",
}

#: Four pages whose cosines to :data:`QUESTION` sit close together; the reranker prefers
#: the one holding :data:`PREFERRED` and judges the one holding :data:`SHUNNED` (the best
#: by cosine) irrelevant (the loopback server adds one to a score, or takes one away).
GARDEN = {
    "garden-a": "When to water the office garden tomato plants: in the morning, in the garden.",
    "garden-b": "The office garden tomato plants need water every evening in summer.",
    "garden-c": "Tomato plants in the office garden get water from the drip line.",
    "garden-d": "Office garden volunteers water tomato plants and herbs on Fridays.",
}
QUESTION = "When should I water the tomato plants in the office garden?"
PREFERRED = "drip line"
SHUNNED = "in the morning"


@pytest.fixture(params=["tei", "cohere"])
def srv(request: pytest.FixtureRequest) -> Iterator[RerankServer]:
    """The loopback reranker, in each wire format."""
    server = RerankServer(request.param, key=KEY)
    server.prefer, server.shun = PREFERRED, SHUNNED
    yield server
    server.down()


def use(app: RagApp, srv: RerankServer, model: str | None = None) -> None:
    app.settings.set(T, None, "ai.rerank.provider", srv.dialect)
    app.settings.set(T, None, "ai.rerank.baseUrl", srv.base_url)
    app.settings.set(T, None, "ai.rerank.apiKey", KEY)
    if model is not None:
        app.settings.set(T, None, "ai.rerank.model", model)


def documents(app: RagApp) -> RagRecord:
    """The project's ``_documents`` RAG with :data:`PAGES` and :data:`GARDEN`, indexed and
    calibrated by the scheduler as in production."""
    app.bring(T, P)
    for name, text in {**PAGES, **GARDEN}.items():
        app.documents.create(T, P, f"documents/{name}.md", text)
    app.scheduler.run_until_idle(timeout_s=120)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.calibration is not None
    return rag


def calibrated(
    app: RagApp, srv: RerankServer, model: str | None = None
) -> tuple[RagRecord, RerankCalibration]:
    """:func:`documents` with ``srv`` as the project's reranker: the RAG, and its rerank
    calibration (measured by the indexer's calibration)."""
    use(app, srv, model)
    rag = documents(app)
    measured = rag.calibration.rerank if rag.calibration else None
    assert measured is not None, "calibrated with the reranker set"
    return rag, measured


def turn(app: RagApp, **more: object) -> InjectionDecision:
    recipe = RagParams(auto_inject=AutoInject.ON, relevance_cut=RELEVANCE_AUTO, **more)  # type: ignore[arg-type]
    return app.autoinject.decide(T, P, [QUESTION], recipe)


def cut_reasons(decision: InjectionDecision) -> list[str]:
    return [d.reason for d in decision.dropped if not d.reason.startswith("over ")]


def test_a_turn_keeps_the_rerankers_choice_and_drops_its_low_scores_of_close_cosines(
    app: RagApp, srv: RerankServer
) -> None:
    rag, measured = calibrated(app, srv)
    assert measured.reranker.startswith(f"{srv.dialect}:")

    decision = turn(app)

    assert decision.block is not None and PREFERRED in decision.hits[0].text
    reasons = cut_reasons(decision)
    assert reasons and all(r.startswith("rerank ") for r in reasons)
    dropped = [d.hit for d in decision.dropped if d.reason.startswith("rerank ")]
    (shunned,) = [h for h in dropped if SHUNNED in h.text]
    assert shunned.path == "documents/garden-a.md"
    assert SHUNNED not in (decision.block or "")
    # ... though the cosine cut of the same hits keeps it: the best cosine of the turn
    everything = [*decision.hits, *dropped]
    assert shunned.score == max(h.score for h in everything)
    by_cosine = cut_by_relevance(everything, rag.calibration.gap if rag.calibration else None)
    assert shunned.chunk_id in {h.chunk_id for h in by_cosine.kept}
    # the rule is the reranker's: every kept hit passes it, every dropped one fails it
    best = max(h.rerank_score or 0.0 for h in decision.hits)
    for hit in decision.hits[1:]:
        assert hit.rerank_score is not None
        if measured.rule == "relative":
            assert best - hit.rerank_score <= measured.value + 1e-9
        else:
            assert hit.rerank_score >= measured.value - 1e-9


def test_the_calibration_is_bounded_paced_and_deterministic(
    app: RagApp, srv: RerankServer, clock: Any
) -> None:
    app.settings.set(T, None, "ai.rerank.requestsPerMinute", 3)
    app.rags.reranking.pacer = Pacer(clock=clock, sleep=clock.advance)
    rag, _ = calibrated(app, srv)
    sent = list(srv.requests)
    assert 1 <= len(sent) <= RERANK_CALIBRATION_QUERIES
    texts = [r.body.get("texts") or r.body.get("documents") for r in sent]
    assert all(t and len(t) <= RERANK_CALIBRATION_TEXTS for t in texts)
    assert app.rags.reranking.pacer.waited_s > 0  # 3 a minute: the calibration waited

    # on a fixed store, measured twice: the same requests, the same rule
    rag = app.project_rags.find_default_rag(T, P) or rag
    start = len(srv.requests)
    once = app.calibrator.measure_rerank(rag)
    middle = len(srv.requests)
    twice = app.calibrator.measure_rerank(rag)

    assert once is not None and twice is not None
    asked = [r.body for r in srv.requests]
    assert asked[start:middle] == asked[middle:] and middle - start <= RERANK_CALIBRATION_QUERIES
    assert once.chunks == twice.chunks == len(PAGES) + len(GARDEN)
    assert replace(once, calibrated_at=None) == replace(twice, calibrated_at=None)
    settings = app.settings.snapshot(T, P).rerank()
    model = app.rags.reranking.registry.model_of(settings)
    assert once.identity == rerank_identity(srv.dialect, model, srv.base_url)


def test_an_outage_during_a_turn_keeps_the_block_with_the_cosine_cut(
    app: RagApp, srv: RerankServer
) -> None:
    use(app, srv)
    documents(app)
    srv.down()

    decision = turn(app)

    assert decision.block is not None and decision.hits
    assert all(h.rerank_score is None for h in decision.hits)
    assert all(r.startswith(("gap ", "fused ")) for r in cut_reasons(decision))


def test_an_unreachable_reranker_at_calibration_leaves_the_cosine_gap_then_is_measured(
    app: RagApp, srv: RerankServer, clock: Any
) -> None:
    use(app, srv)
    app.rags.reranking.circuits.clock = clock
    srv.down()
    rag = documents(app)
    assert rag.calibration is not None
    assert rag.calibration.gap is not None and rag.calibration.rerank is None
    srv.up()
    clock.advance(60.0)  # past the circuit's retry time

    decision = turn(app)  # reranked, cut by the cosine gap meanwhile
    assert decision.hits and PREFERRED in decision.hits[0].text
    assert all(r.startswith(("gap ", "fused ")) for r in cut_reasons(decision))

    assert app.calibrator.refresh_rerank(T, P) == 1
    found = app.project_rags.find_default_rag(T, P)
    assert found is not None and found.calibration is not None
    assert found.calibration.rerank is not None
    assert found.calibration.gap == rag.calibration.gap  # the rest of it is kept
    assert all(r.startswith("rerank ") for r in cut_reasons(turn(app)))


def test_another_model_is_calibrated_again(app: RagApp, srv: RerankServer) -> None:
    _, before = calibrated(app, srv, model="reranker-one")
    assert before.reranker == f"{srv.dialect}:reranker-one"
    assert app.calibrator.refresh_rerank(T, P) == 0  # the same reranker: nothing to do

    use(app, srv, model="reranker-two")
    # until measured, the turn's cut is the cosine gap's (the old scale is not this model's)
    assert all(r.startswith(("gap ", "fused ")) for r in cut_reasons(turn(app)))
    asked = len(srv.requests)
    app.scheduler.tick()  # no chunk changed: the tick looks at the reranker itself

    found = app.project_rags.find_default_rag(T, P)
    after = found.calibration.rerank if found and found.calibration else None
    assert after is not None and after.reranker == f"{srv.dialect}:reranker-two"
    assert after.identity != before.identity
    assert len(srv.requests) > asked
    if srv.dialect == "cohere":
        assert {r.body["model"] for r in srv.requests[asked:]} == {"reranker-two"}
    assert all(r.startswith("rerank ") for r in cut_reasons(turn(app)))


def test_a_fixed_gap_stays_a_cosine_gap_and_off_cuts_nothing(
    app: RagApp, srv: RerankServer
) -> None:
    use(app, srv)
    documents(app)
    recipe = RagParams(auto_inject=AutoInject.ON, relevance_cut=0.5)
    fixed = app.autoinject.decide(T, P, [QUESTION], recipe)
    assert all(r.startswith(("gap ", "fused ")) for r in cut_reasons(fixed))
    off = app.autoinject.decide(
        T, P, [QUESTION], RagParams(auto_inject=AutoInject.ON, relevance_cut="off")
    )
    assert cut_reasons(off) == []


def test_status_shows_the_rerank_cut_next_to_the_gap(app: RagApp, srv: RerankServer) -> None:
    use(app, srv)
    rag = documents(app)
    assert rag.calibration is not None and rag.calibration.rerank is not None
    data = app.project_rags.status(T, P).to_json()
    auto = data["minScoreAuto"]
    assert auto["gap"] == rag.calibration.gap
    cut = auto["rerank"]
    assert cut["reranker"] == rag.calibration.rerank.reranker
    assert (cut["rule"], cut["value"]) == (
        rag.calibration.rerank.rule,
        rag.calibration.rerank.value,
    )
    assert cut["keeps"] == rag.calibration.rerank.describe()
    assert srv.base_url not in str(cut) and KEY not in str(data)
    shown = StatusResponse.model_validate(data)  # what REST answers
    assert shown.minScoreAuto is not None and shown.minScoreAuto.rerank is not None


def test_a_recalibration_during_an_outage_keeps_the_same_rerankers_rule(
    app: RagApp, srv: RerankServer
) -> None:
    rag, before = calibrated(app, srv, model="reranker-one")
    srv.down()

    again = app.calibrator.calibrate(rag)  # the threshold and the gap measured again

    assert again.rerank == before  # this reranker's scale still holds
    found = app.project_rags.find_default_rag(T, P)
    assert found is not None and found.calibration is not None
    use(app, srv, model="reranker-two")
    # another reranker, unreachable: no rule in its scale (the old one is not its)
    assert app.calibrator.calibrate(found).rerank is None


def test_a_rag_that_doubled_is_measured_again_with_its_reranker(
    app: RagApp, srv: RerankServer
) -> None:
    _, before = calibrated(app, srv)
    assert 2 * before.chunks <= len(PAGES) + len(GARDEN) + 14
    asked = len(srv.requests)
    for i in range(14):  # 28 pages -> 42, twice the 20 the first calibration saw
        app.documents.create(
            T,
            P,
            f"documents/extra-{i}.md",
            f"Extra notice {i} about the archive room {i}. The archive room {i} keeps the "
            f"old contracts of department {i} in locked cabinets.",
        )
    app.scheduler.run_until_idle(timeout_s=120)

    found = app.project_rags.find_default_rag(T, P)
    after = found.calibration.rerank if found and found.calibration else None
    assert after is not None and after.chunks == len(PAGES) + len(GARDEN) + 14
    assert after.identity == before.identity and len(srv.requests) > asked


def test_the_reranker_is_looked_at_once_a_minute_without_a_chunk_changing(
    app: RagApp, srv: RerankServer, clock: Any
) -> None:
    app.scheduler.clock = clock
    calibrated(app, srv, model="reranker-one")
    app.scheduler.tick()  # looked at now: the reranker it was measured with
    use(app, srv, model="reranker-two")
    asked = len(srv.requests)

    clock.advance(RERANK_CHECK_S - 1)
    app.scheduler.tick()  # within the minute: not looked at
    assert len(srv.requests) == asked
    found = app.project_rags.find_default_rag(T, P)
    rule = found.calibration.rerank if found and found.calibration else None
    assert rule is not None and rule.reranker == f"{srv.dialect}:reranker-one"

    clock.advance(1)
    app.scheduler.tick()  # a minute on: the new reranker is measured
    assert len(srv.requests) > asked
    found = app.project_rags.find_default_rag(T, P)
    rule = found.calibration.rerank if found and found.calibration else None
    assert rule is not None and rule.reranker == f"{srv.dialect}:reranker-two"


def test_a_rag_with_nothing_to_measure_is_not_measured_again_until_it_grows(
    app: RagApp, srv: RerankServer, clock: Any
) -> None:
    app.scheduler.clock = clock
    documents(app)  # calibrated without a reranker
    app.scheduler.tick()
    use(app, srv, model="reranker-one")
    srv.top = 1  # one rank an answer: no pseudo-query's source scored beside its background
    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()  # the reranker was set: measured, and no rule comes of it
    asked = len(srv.requests)
    assert 0 < asked <= RERANK_CALIBRATION_QUERIES
    found = app.project_rags.find_default_rag(T, P)
    assert found is not None and found.calibration is not None
    assert found.calibration.rerank is None

    # status says why the reranker's turns are cut by the gap (REST, and the CLI's line)
    auto = app.project_rags.status(T, P).to_json()["minScoreAuto"]
    assert auto["rerank"] is None
    nothing = found.calibration.rerank_unmeasurable
    assert nothing is not None and auto["rerankUnmeasurable"]["chunks"] == nothing.chunks
    shown = StatusResponse.model_validate(app.project_rags.status(T, P).to_json())
    assert shown.minScoreAuto is not None and shown.minScoreAuto.rerankUnmeasurable is not None

    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()  # a minute later, the same chunks and reranker: not asked again
    assert len(srv.requests) == asked

    use(app, srv, model="reranker-two")  # another reranker may find something
    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()
    assert len(srv.requests) > asked
    asked = len(srv.requests)

    for i in range(len(PAGES) + len(GARDEN)):  # the RAG doubles
        app.documents.create(
            T,
            P,
            f"documents/extra-{i}.md",
            f"Extra notice {i} about the archive room {i}. The archive room {i} keeps the "
            f"old contracts of department {i} in locked cabinets.",
        )
    app.scheduler.run_until_idle(timeout_s=120)
    assert len(srv.requests) > asked  # grown: measured again
    asked = len(srv.requests)
    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()
    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()
    assert len(srv.requests) == asked  # ... once


def test_an_outage_at_the_check_is_tried_again_a_minute_later(
    app: RagApp, srv: RerankServer, clock: Any
) -> None:
    app.scheduler.clock = clock
    app.rags.reranking.circuits.clock = clock
    documents(app)
    app.scheduler.tick()
    use(app, srv)
    srv.down()
    clock.advance(RERANK_CHECK_S)
    app.scheduler.tick()  # the reranker cannot be reached: not "nothing to measure"
    srv.up()
    clock.advance(RERANK_CHECK_S)  # past the circuit's retry time too

    app.scheduler.tick()

    found = app.project_rags.find_default_rag(T, P)
    assert found is not None and found.calibration is not None
    assert found.calibration.rerank is not None
