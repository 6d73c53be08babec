"""The relevance cut of the ``<rag-context>`` block (``rag.autoInject.relevanceCut``), on a
small handbook indexed with the real all-MiniLM model: the block keeps the turn's right
excerpt and drops the noise ``topK`` would have filled it with, each dropped candidate with
its reason; ``off`` (setting or recipe) restores the block exactly; the tools' and the
retriever's queries cut only when asked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.block.budget import fit_to_budget
from vancetope_rag.domain.block.context_block import render_context_block
from vancetope_rag.domain.retrieval.relevance import RELEVANCE_AUTO, RELEVANCE_OFF, cut_by_relevance
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.errors import RecipeError, SettingError
from vancetope_rag.recipes import RagParams, parse_recipe
from vancetope_rag.services.tokens import count_tokens
from vancetope_rag.tools import RagTools

AppFactory = Callable[..., RagApp]

#: 24 one-chunk pages of an employee handbook: enough chunks for a calibration.
HANDBOOK = {
    "vacation": "Vacation policy. Every full-time employee gets 25 vacation days per year. "
    "Unused vacation days carry over until the end of March of the following year.",
    "sick-leave": "Sick leave. Tell your manager before 9am when you are ill. From the fourth "
    "day of illness a doctor's certificate is required.",
    "remote-work": "Remote work. Employees may work from home up to three days per week after "
    "agreeing the schedule with their team lead.",
    "expenses": "Expenses. Submit receipts for travel and meals within thirty days through the "
    "expense portal; the finance team reimburses them monthly.",
    "parental-leave": "Parental leave. New parents get sixteen weeks of paid parental leave, "
    "which can be split into two blocks within the first year.",
    "laptops": "Laptops. Every new hire receives a laptop on the first day; report a broken "
    "laptop to the IT helpdesk for a replacement.",
    "passwords": "Passwords. Use a password manager and turn on two-factor authentication for "
    "every company account.",
    "payroll": "Payroll. Salaries are paid on the last working day of each month; payslips are "
    "in the HR portal.",
    "pension": "Pension. The company adds five percent of your salary to the pension plan each "
    "month.",
    "office-hours": "Office hours. The office is open from 7am to 8pm on weekdays; the front "
    "desk closes at 6pm.",
    "parking": "Parking. Staff parking is in the garage under building B; request a parking "
    "badge from facilities.",
    "canteen": "Canteen. Lunch is served from noon to 2pm; vegetarian and vegan dishes are "
    "available every day.",
    "gym": "Gym. Employees can use the gym on the ground floor for free; book classes through "
    "the intranet.",
    "training": "Training budget. Each employee has a yearly budget of 1,500 euros for courses "
    "and conferences.",
    "performance": "Performance reviews. Reviews happen twice a year, in June and December, "
    "with your manager.",
    "onboarding": "Onboarding. During your first week a buddy shows you around and helps with "
    "your accounts.",
    "security": "Building security. Always wear your badge and never let strangers follow you "
    "through the gates.",
    "travel": "Business travel. Book flights and hotels through the travel agency; economy "
    "class for flights under six hours.",
    "phones": "Mobile phones. A company phone is provided to staff who are on call; personal "
    "use is allowed within reason.",
    "harassment": "Harassment. Report any harassment to HR or the confidential adviser; every "
    "report is investigated.",
    "overtime": "Overtime. Overtime must be approved in advance and is compensated with time "
    "off in lieu.",
    "holidays": "Public holidays. The office is closed on national public holidays; the list "
    "for this year is on the intranet.",
    "resignation": "Resignation. The notice period is one month for staff and two months for "
    "managers.",
    "referrals": "Referral bonus. Refer a friend who gets hired and receive a bonus of 1,000 "
    "euros after their probation.",
}

#: Each question and the page that answers it.
QUESTIONS = {
    "When are salaries paid?": "payroll",
    "What is the notice period if I quit?": "resignation",
    "Can I work from home?": "remote-work",
    "How many vacation days do I get per year?": "vacation",
}


@pytest.fixture(scope="module")
def handbook(tmp_path_factory: pytest.TempPathFactory) -> object:
    """One indexed, calibrated handbook for the module (MiniLM indexing is the slow part)."""
    store = f"sqlite:///{tmp_path_factory.mktemp('handbook') / 'rag.db'}"
    config = EngineConfig(
        store=store,
        node_id="test-node",
        indexer_initial_delay_s=0.0,
        indexer_interval_s=0.05,
        retry_backoff_s=0.0,
        claim_ttl_s=60.0,
    )
    app = RagApp.open(config)
    app.settings.set(T, None, "ai.embedding.provider", "embedded")
    app.bring(T, P)
    for name, text in HANDBOOK.items():
        app.documents.create(T, P, f"documents/{name}.md", text)
    app.scheduler.run_until_idle(timeout_s=300)
    yield app
    app.close()


def _on(cut: object = None, **kwargs: object) -> RagParams:
    return RagParams(auto_inject=AutoInject.ON, relevance_cut=cut, **kwargs)  # type: ignore[arg-type]


def _names(hits: object) -> list[str]:
    return [h.path.rsplit("/", 1)[-1].removesuffix(".md") for h in hits]  # type: ignore[attr-defined]


def test_the_rag_is_calibrated_with_a_gap(handbook: RagApp) -> None:
    rag = handbook.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.calibration is not None
    assert rag.calibration.gap is not None and 0 < rag.calibration.gap < 1


def test_auto_keeps_the_right_page_and_drops_the_noise_with_reasons(handbook: RagApp) -> None:
    total_off = total_auto = 0
    for question, page in QUESTIONS.items():
        off = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_OFF))
        auto = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_AUTO))
        assert _names(off.hits)[0] == page and _names(auto.hits)[0] == page, question
        assert set(_names(auto.hits)) <= set(_names(off.hits))
        # what was cut is in its own field, with the reason, never in the block
        cut = [d for d in auto.dropped if not d.reason.startswith("over ")]
        assert _names(auto.hits) + _names(d.hit for d in cut) == _names(off.hits)
        assert all(d.reason.startswith(("gap ", "fused ")) for d in cut)
        assert auto.block is not None
        for d in cut:
            assert f"documents/{_names([d.hit])[0]}.md" not in auto.block
        # an excerpt stays its chunk's full text
        assert all(h.text in auto.block for h in auto.hits)
        total_off += len(off.hits)
        total_auto += len(auto.hits)
    assert total_auto <= 0.7 * total_off  # the handbook's noise goes


def test_the_dropped_reason_names_the_rule(handbook: RagApp) -> None:
    # a fixed gap wide enough that only the fused share drops (a fixed gap has no floor)
    decision = handbook.autoinject.decide(T, P, ["When are salaries paid?"], _on(0.5))
    reasons = {_names([d.hit])[0]: d.reason for d in decision.dropped}
    assert reasons and all(
        r.startswith("fused ") and r.endswith("of best < 0.70") for r in reasons.values()
    )
    # auto: the gap narrowed by the best's height over the RAG's noise floor says so
    rag = handbook.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.calibration is not None
    auto = handbook.autoinject.decide(T, P, ["When are salaries paid?"], _on(RELEVANCE_AUTO))
    floored = [d.reason for d in auto.dropped if "over the floor" in d.reason]
    assert floored and all(
        r.startswith("gap ") and r.endswith(f"over the floor {rag.calibration.min_score:.4f})")
        for r in floored
    )
    # dense: only the gap applies, a fixed one as given
    dense = handbook.autoinject.decide(
        T, P, ["When are salaries paid?"], _on(0.1, retrieval_mode="dense")
    )
    assert _names(dense.hits) == ["payroll"]
    assert dense.dropped and all(d.reason.endswith("> 0.100") for d in dense.dropped)
    assert dense.dropped[0].reason.startswith("gap 0.")


def test_off_restores_todays_block_exactly(handbook: RagApp) -> None:
    for question in QUESTIONS:
        # today's block: every retrieved hit, through the template and the budget
        hits = handbook.as_retriever(T, P).retrieve_hits(question)
        today, shown = fit_to_budget(
            hits,
            lambda some: render_context_block(some, None, project_rag=True),
            count_tokens,
            handbook.config.autoinject_max_tokens,
        )
        off = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_OFF))
        assert (off.block, list(off.hits)) == (today, shown)
        assert off.dropped == ()
        try:  # the setting turns it off as the recipe does
            handbook.settings.set(T, P, "rag.autoInject.relevanceCut", "off")
            by_setting = handbook.autoinject.decide(T, P, [question], _on())
            assert (by_setting.block, by_setting.hits) == (off.block, off.hits)
        finally:
            handbook.settings.set(T, P, "rag.autoInject.relevanceCut", None)
    # on by default for AutoInject: the default turn is the auto one
    question = "When are salaries paid?"
    default = handbook.autoinject.decide(T, P, [question], _on())
    auto = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_AUTO))
    assert (default.block, default.hits, default.dropped) == (auto.block, auto.hits, auto.dropped)
    assert default.dropped


def test_the_setting_cuts_and_a_recipe_overrides_it(handbook: RagApp) -> None:
    question = "Can I work from home?"
    try:
        handbook.settings.set(T, P, "rag.autoInject.relevanceCut", "AUTO")
        assert handbook.settings.snapshot(T, P).effective["rag.autoInject.relevanceCut"] == "auto"
        by_setting = handbook.autoinject.decide(T, P, [question], _on())
        by_recipe = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_AUTO))
        assert by_setting.hits == by_recipe.hits and by_setting.dropped
        recipe_off = handbook.autoinject.decide(T, P, [question], _on(RELEVANCE_OFF))
        assert len(recipe_off.hits) > len(by_setting.hits)
        with pytest.raises(SettingError, match=r"relevanceCut must be auto, off or a cosine"):
            handbook.settings.set(T, P, "rag.autoInject.relevanceCut", "sometimes")
    finally:
        handbook.settings.set(T, P, "rag.autoInject.relevanceCut", None)


def test_a_recipe_takes_relevance_cut_and_refuses_words() -> None:
    recipe = parse_recipe({"name": "r", "params": {"rag": {"relevanceCut": "auto"}}})
    assert recipe.rag.relevance_cut == RELEVANCE_AUTO
    assert (
        parse_recipe({"name": "r", "params": {"rag": {"relevanceCut": 0.12}}}).rag.relevance_cut
        == 0.12
    )
    with pytest.raises(RecipeError, match=r"params\.rag\.relevanceCut must be"):
        parse_recipe({"name": "r", "params": {"rag": {"relevanceCut": "maybe"}}})


def test_the_retriever_and_the_tools_cut_only_when_asked(handbook: RagApp) -> None:
    question = "When are salaries paid?"
    rag = handbook.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.calibration is not None
    retriever = handbook.as_retriever(T, P)
    plain = retriever.query_rag(rag, question, top_k=5)
    assert len(plain) == 5  # off by default: topK 5 gets 5
    cut = retriever.query_rag(rag, question, top_k=5, relevance_cut="auto")
    calibrated = cut_by_relevance(plain, rag.calibration.gap, rag.calibration.min_score)
    assert cut == list(calibrated.kept) and len(cut) < 5
    # the LlamaIndex retriever too, with the option at construction
    nodes = handbook.as_retriever(T, P, relevance_cut="auto").retrieve(question)
    assert [n.node.metadata.get("path") or n.node.ref_doc_id for n in nodes] and len(nodes) == len(
        cut
    )
    # AutoInject's setting never reaches the tools' path
    try:
        handbook.settings.set(T, P, "rag.autoInject.relevanceCut", "auto")
        assert len(handbook.as_retriever(T, P).query_rag(rag, question, top_k=5)) == 5
    finally:
        handbook.settings.set(T, P, "rag.autoInject.relevanceCut", None)


def test_the_rag_query_tool_cuts_only_when_asked(handbook: RagApp) -> None:
    tools = RagTools(handbook, T, P, None)
    question = "When are salaries paid?"
    plain = tools.rag_query("_documents", question, topK=5)["hits"]
    assert len(plain) == 5  # an agent asking for 5 gets 5
    cut = tools.rag_query("_documents", question, topK=5, relevanceCut="auto")["hits"]
    assert 1 <= len(cut) < 5 and cut[0]["path"] == "documents/payroll.md"
