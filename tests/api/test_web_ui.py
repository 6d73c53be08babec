"""The RAG tab in a real browser: headless Chromium (Debian package) driven by Playwright.

The server runs in a thread on 127.0.0.1 on the test's own store, so every click is checked
against the store afterwards. Needs ``pip install playwright`` and ``apt-get install
chromium``; never ``playwright install`` (no browser downloads).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from api_support import POISON, ApiAppFactory, make_token

from fakes import POISON_MESSAGE, T
from loopback import serving
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.domain.retrieval.rerank_calibration import (
    RERANK_RULE_ID,
    RerankCalibration,
    RerankUnmeasurable,
)
from vancetope_rag.store.port.heartbeats import Beat

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
uvicorn = pytest.importorskip("uvicorn", reason="needs the 'server' extra")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} missing (apt-get install chromium)"
)

PATHS = ["documents/alpha.md", "documents/beta.md", "documents/gamma.txt"]
BAD = "documents/broken.md"


@pytest.fixture
def ui_app(make_api_app: ApiAppFactory) -> RagApp:
    """Three indexed documents and one the provider rejects (failed after one attempt)."""
    app = make_api_app(provider="poison")
    for path in PATHS:
        app.documents.create(T, "p1", path, f"Notes about {path.split('/')[-1]}.")
    app.documents.create(T, "p1", BAD, f"This one holds {POISON}.")
    app.scheduler.run_until_idle(timeout_s=30)
    return app


@pytest.fixture
def base_url(ui_app: RagApp) -> Iterator[str]:
    with serving(create_api(ui_app), lifespan="off") as url:
        yield url


@pytest.fixture
def page(base_url: str) -> Iterator[sync_api.Page]:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=base_url)
            context.set_default_timeout(10_000)
            yield context.new_page()
        finally:
            browser.close()


def test_rag_tab_in_a_real_browser(page: sync_api.Page, ui_app: RagApp, tmp_path: Path) -> None:
    expect = sync_api.expect
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
        ),
    )
    status = ui_app.project_rags.status(T, "p1")
    assert status.chunk_count == 3

    # -- status card (token via ?token=, then dropped from the address bar) --------------
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#chunk-count")).to_have_text("3")
    expect(page.locator("#rag-id")).to_have_text(status.rag_id or "")
    expect(page.locator("#rag-model")).to_have_text("poison / poison-64")
    expect(page.locator("#rag-exists")).to_have_text("present")
    expect(page.locator('#state-counts li[data-state="indexed"]')).to_have_text("indexed: 3")
    expect(page.locator('#state-counts li[data-state="failed"]')).to_have_text("failed: 1")
    failed_row = page.locator("#failed-table tbody tr")
    expect(failed_row).to_have_count(1)
    expect(failed_row).to_contain_text(BAD)
    expect(failed_row).to_contain_text(POISON_MESSAGE)
    assert "token" not in page.url

    # -- Reindex ----------------------------------------------------------------------------
    page.click("#btn-reindex")
    expect(page.locator("#action-result")).to_have_text("Queued 4 documents for reindexing.")
    docs = ui_app.documents.list_documents(T, "p1")
    assert all(d.rag_dirty for d in docs)
    expect(page.locator('#state-counts li[data-state="pending"]')).to_have_text("pending: 4")

    # -- Rebuild: a dismissed confirmation changes nothing -----------------------------------
    old_id = status.rag_id
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#btn-rebuild")
    expect(page.locator("#btn-rebuild")).to_be_enabled()
    assert ui_app.project_rags.status(T, "p1").rag_id == old_id

    messages: list[str] = []

    def accept(dialog: sync_api.Dialog) -> None:
        messages.append(dialog.message)
        dialog.accept()

    # the poison document fails with the new generation too: allow it (1 of 4)
    ui_app.settings.set(T, "p1", "rag.rebuild.maxFailureRatio", 0.5)
    page.once("dialog", accept)
    page.click("#btn-rebuild")
    expect(page.locator("#action-result")).to_contain_text("Rebuild started: poison:poison-64")
    assert messages and "keeps answering" in messages[0]
    running = ui_app.rebuilds.active(T, "p1")
    assert running is not None
    # the live generation still answers; the rebuild shows its progress bar at 0 of 4
    expect(page.locator("#rag-id")).to_have_text(old_id or "")
    expect(page.locator("#rebuild-box")).to_be_visible()
    expect(page.locator("#rebuild-box")).to_have_attribute("data-state", "running")
    expect(page.locator("#rebuild-text")).to_have_text("running: 0 done · 0 failed · 4 waiting")
    assert page.locator("#rebuild-bar").evaluate("b => [b.value, b.max]") == [0, 4]
    expect(page.locator("#btn-cancel-rebuild")).to_be_visible()

    # -- the page follows the indexer by itself (no click) until the switch -------------------
    ui_app.scheduler.run_until_idle(timeout_s=30)
    expect(page.locator("#rebuild-box")).to_have_attribute("data-state", "completed")
    expect(page.locator("#rebuild-text")).to_have_text("completed: 3 done · 1 failed · 0 waiting")
    # the bar fills with what is done: the failed document is not progress (was 4 of 4)
    assert page.locator("#rebuild-bar").evaluate("b => [b.value, b.max]") == [3, 4]
    new_id = running.to_rag_id
    assert ui_app.project_rags.status(T, "p1").rag_id == new_id != old_id
    expect(page.locator("#rag-id")).to_have_text(new_id)
    expect(page.locator("#chunk-count")).to_have_text("3")
    expect(page.locator("#btn-cancel-rebuild")).to_be_hidden()
    expect(page.locator("#indexing-text")).to_have_text("3 done · 1 failed · 0 waiting")

    # -- a rebuild cancelled from the page: the live generation stays ---------------------------
    page.once("dialog", accept)
    page.click("#btn-rebuild")
    expect(page.locator("#rebuild-box")).to_have_attribute("data-state", "running")
    page.once("dialog", accept)
    page.click("#btn-cancel-rebuild")
    expect(page.locator("#action-result")).to_have_text(
        "Rebuild cancelled; the index stays on poison:poison-64."
    )
    expect(page.locator("#rebuild-box")).to_have_attribute("data-state", "cancelled")
    expect(page.locator("#rebuild-reason")).to_have_text("cancelled by a user")
    expect(page.locator("#rag-id")).to_have_text(new_id)
    assert ui_app.rebuilds.active(T, "p1") is None

    # -- §8.1 tristate: Never index --------------------------------------------------------
    row = page.locator(f'#documents-table tr[data-path="{PATHS[1]}"]')
    expect(row.locator('input[value="auto"]')).to_be_checked()
    row.get_by_label("Never index").check()
    expect(row.locator(".row-status")).to_have_text("saved")
    expect(row.locator(".doc-state")).to_have_text("pending (queued)")
    doc = ui_app.documents.get_by_path(T, "p1", PATHS[1])
    assert doc is not None
    assert doc.rag_enabled is False and doc.rag_dirty
    assert doc.index_state is IndexState.PENDING

    # the indexer drops its chunks; the page shows it after a refresh
    ui_app.scheduler.run_until_idle(timeout_s=30)
    page.click("#btn-refresh")
    expect(page.locator("#chunk-count")).to_have_text("2")
    expect(row.locator('input[value="off"]')).to_be_checked()

    page.screenshot(path=str(tmp_path / "rag-tab.png"), full_page=True)
    assert (tmp_path / "rag-tab.png").stat().st_size > 0
    assert problems == []


def test_without_token_the_page_asks_for_one(page: sync_api.Page) -> None:
    expect = sync_api.expect
    page.goto("/ui/t1/p1")
    expect(page.locator("#token-card")).to_be_visible()
    expect(page.locator("#main")).to_be_hidden()

    page.fill("#token-input", "not-a-jwt")
    page.click("#token-form button[type=submit]")
    expect(page.locator("#alert")).to_contain_text("INVALID_TOKEN")
    expect(page.locator("#token-card")).to_be_visible()

    page.fill("#token-input", make_token())
    page.click("#token-form button[type=submit]")
    expect(page.locator("#chunk-count")).to_have_text("3")
    expect(page.locator("#alert")).to_be_hidden()
    expect(page.locator("#token-card")).to_be_hidden()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/t1/p1", page.url)


def test_a_document_indexed_up_to_the_text_limit_says_so(
    page: sync_api.Page, ui_app: RagApp
) -> None:
    """The text limit in the UI: a truncated document is marked in the table and counted in the
    status card. (The limit is lowered on the running app: its default is 2 M characters.)"""
    from vancetope_rag.domain.texts import TextLimit

    expect = sync_api.expect
    ui_app.rags.limit = TextLimit(1000)
    ui_app.documents.create(T, "p1", "documents/long.md", "long notes " * 200)
    ui_app.scheduler.run_until_idle(timeout_s=30)
    page.goto(f"/ui/t1/p1?token={make_token()}")
    row = page.locator('#documents-table tr[data-path="documents/long.md"]')
    expect(row.locator(".doc-state")).to_have_text(
        "indexed (truncated: indexed up to the text limit)"
    )
    other = page.locator(f'#documents-table tr[data-path="{PATHS[0]}"]')
    expect(other.locator(".doc-state")).to_have_text("indexed")
    expect(page.locator('#state-counts li[data-state="truncated"]')).to_have_text(
        "indexed up to the text limit: 1"
    )


def test_unreadable_and_truncated_files_are_shown_with_their_reasons(
    page: sync_api.Page, ui_app: RagApp
) -> None:
    """Unreadable files in the UI: a file that cannot be read is listed as failed with its
    reason, and one read only up to a budget says which budget."""
    import filemakers as fm
    from vancetope_rag.services.importer import ImportSource

    expect = sync_api.expect
    ui_app.settings.set(T, "p1", "rag.extract.maxPages", "1")
    ui_app.importer.import_sources(
        T,
        "p1",
        [
            ImportSource("scan.png", data=fm.text_image("SCANNED")),
            ImportSource("two.pdf", data=fm.text_pdf(["page one", "page two"])),
        ],
    )
    ui_app.scheduler.run_until_idle(timeout_s=30)
    page.goto(f"/ui/t1/p1?token={make_token()}")
    failed = page.locator("#failed-table tbody tr", has_text="documents/scan.png")
    expect(failed).to_contain_text("no text layer — configure an OCR/vision extractor")
    row = page.locator('#documents-table tr[data-path="documents/two.pdf"]')
    expect(row.locator(".doc-state")).to_have_text(
        "indexed (truncated: only the first 1 of 2 pages were read (rag.extract.maxPages))"
    )


def test_a_document_kept_from_a_broken_copy_needs_attention(
    page: sync_api.Page, ui_app: RagApp, tmp_path: Path
) -> None:
    """A file replaced by a broken copy, in the UI: the document stays indexed from its last good
    text, and the status card lists it under "Needs attention" with the reason, also after a
    reindex."""
    import filemakers as fm

    expect = sync_api.expect
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "report.pdf").write_bytes(fm.text_pdf(["Harbour dues rise in spring"]))
    ui_app.importer.import_directory(T, "p1", folder)
    ui_app.scheduler.run_until_idle(timeout_s=30)
    (folder / "report.pdf").write_bytes(fm.encrypted_pdf("Harbour dues rise in spring"))
    ui_app.importer.import_directory(T, "p1", folder)
    ui_app.project_rags.reindex(T, "p1")
    ui_app.scheduler.run_until_idle(timeout_s=30)
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#attention-box")).to_be_visible()
    expect(page.locator("#attention-count")).to_have_text("(1)")
    row = page.locator('#attention-table tr[data-path="documents/report.pdf"]')
    expect(row).to_contain_text("encrypted")
    doc_row = page.locator('#documents-table tr[data-path="documents/report.pdf"]')
    expect(doc_row.locator(".doc-state")).to_have_text("indexed")


PHONE = {"width": 420, "height": 860}
DESKTOP = {"width": 1280, "height": 900}


def _no_horizontal_overflow(page: sync_api.Page) -> None:
    """Nothing of the page lies beyond the viewport's width (a phone cannot scroll to it)."""
    width = page.viewport_size["width"] if page.viewport_size else 0
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def _within_the_viewport(page: sync_api.Page, selector: str) -> None:
    width = page.viewport_size["width"] if page.viewport_size else 0
    for box in page.locator(selector).evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right] })"
    ):
        assert box[0] >= 0 and box[1] <= width + 0.5, (selector, box, width)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_refused_rebuild_says_why_beside_the_button_and_the_dialog_names_the_model(
    page: sync_api.Page, ui_app: RagApp, viewport: dict[str, int], tmp_path: Path
) -> None:
    """Before, the refusal appeared in the alert at the page top, out of view, and the
    confirmation did not say which model the index would be rebuilt onto."""
    expect = sync_api.expect
    page.set_viewport_size(viewport)
    ui_app.settings.set(T, "p1", "ai.embedding.model", "poison-32")
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#chunk-count")).to_have_text("3")
    messages: list[str] = []

    def accept(dialog: sync_api.Dialog) -> None:
        messages.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("#btn-rebuild")
    expect(page.locator("#action-result")).to_contain_text("poison:poison-32")
    assert "onto poison:poison-32" in messages[0] and "now on poison:poison-64" in messages[0]

    # a second rebuild while one runs is refused (409): the reason shows by the button
    page.once("dialog", accept)
    page.click("#btn-rebuild")
    error = page.locator("#action-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("REBUILD_RUNNING")
    expect(error).to_be_in_viewport()
    expect(page.locator("#alert")).to_be_hidden()
    page.screenshot(path=str(tmp_path / "refused.png"))
    # the next action that works clears it
    page.click("#btn-refresh")
    expect(error).to_be_hidden()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_test_query_box_shows_hits_scores_and_labels(
    page: sync_api.Page, ui_app: RagApp, viewport: dict[str, int], tmp_path: Path
) -> None:
    expect = sync_api.expect
    page.set_viewport_size(viewport)
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#chunk-count")).to_have_text("3")
    question = "notes about alpha"
    page.fill("#query-input", question)
    page.click("#btn-query")
    rows = page.locator("#query-table tbody tr")
    turn = ui_app.as_retriever(T, "p1").retrieve_hits(question)
    assert turn, "the retriever finds nothing: the test proves nothing"
    expect(rows).to_have_count(len(turn))
    # the order the turn uses, each number labelled: hybrid hits by their fused score
    assert all(h.fused_score is not None for h in turn)
    for i, hit in enumerate(turn):
        row = rows.nth(i)
        expect(row.locator("td").nth(0)).to_have_text(str(i + 1))
        expect(row.locator("td").nth(2)).to_have_text(
            re.compile(rf"^fused {hit.fused_score:.4f} \(dense (#\d+|–), lexical (#\d+|–)\)$")
        )
        expect(row.locator("td").nth(3)).to_have_text(f"cosine {hit.score:.3f}")
        expect(row.locator("td").nth(4)).to_have_text(hit.path or "")
    expect(rows.nth(0).locator("td").nth(1)).to_have_text("S1")
    expect(page.locator("#query-summary")).to_contain_text(f"{len(turn)} hit")
    expect(page.locator("#query-summary")).to_contain_text("by fused score")
    expect(page.locator("#query-summary")).not_to_contain_text("best first")
    # the box asks for no relevanceCut: it says its hits were not cut
    expect(page.locator("#query-summary")).to_contain_text("no relevance cut")
    _within_the_viewport(page, "#query-card")
    _no_horizontal_overflow(page)
    page.screenshot(path=str(tmp_path / "query.png"), full_page=True)

    # the project RAG switched off: the box says nothing is queried, and why
    ui_app.settings.set(T, "p1", "rag.project.enabled", False)
    page.click("#btn-query")
    expect(page.locator("#query-summary")).to_contain_text("Nothing is queried")
    expect(rows).to_have_count(0)


def test_the_status_card_shows_the_pinned_profile_and_the_calibration(
    page: sync_api.Page, ui_app: RagApp
) -> None:
    """Before, the card showed neither the model profile the RAG pinned nor what minScore
    auto and the relevance cut resolve to, nor when they were measured."""
    expect = sync_api.expect
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#chunk-count")).to_have_text("3")
    expect(page.locator("#rag-profile")).to_contain_text("dimension 64")
    expect(page.locator("#rag-calibration")).to_have_text("not calibrated yet")
    for i in range(24):  # enough chunks to calibrate
        ui_app.documents.create(T, "p1", f"documents/more/m{i:02}.md", f"More notes, part {i}.")
    ui_app.scheduler.run_until_idle(timeout_s=60)
    calibration = ui_app.project_rags.status(T, "p1").calibration
    assert calibration is not None
    gap = "none" if calibration.gap is None else f"{calibration.gap:.4f}"
    page.click("#btn-refresh")
    expect(page.locator("#rag-calibration")).to_contain_text(
        f"minScore auto {calibration.min_score:.4f}, relevance gap {gap} (calibrated "
    )
    expect(page.locator("#rag-calibration")).to_contain_text(f"over {calibration.chunks} chunks")
    expect(page.locator("#rag-calibration")).not_to_contain_text("reranker")

    # the project's reranker: its rule in its scale, or why the gap cuts its turns
    rag = ui_app.project_rags.find_default_rag(T, "p1")
    assert rag is not None
    rule = RerankCalibration(
        reranker="tei:bge-reranker",
        identity="digest",
        rule="relative",
        value=2.5,
        separation=0.9,
        chunks=calibration.chunks,
        rule_set=RERANK_RULE_ID,
        sources=(3.0,),
        background=(0.1, 0.2, 0.3),
    )
    ui_app.store.control.set_rag_calibration(T, "p1", rag.id, replace(calibration, rerank=rule))
    page.click("#btn-refresh")
    expect(page.locator("#rag-calibration")).to_contain_text(
        f"with reranker tei:bge-reranker: keeps hits {rule.describe()}"
    )
    nothing = RerankUnmeasurable("digest", 40, RERANK_RULE_ID)
    ui_app.store.control.set_rag_calibration(
        T, "p1", rag.id, replace(calibration, rerank_unmeasurable=nothing)
    )
    page.click("#btn-refresh")
    expect(page.locator("#rag-calibration")).to_contain_text(
        f"with the reranker: {nothing.describe()}"
    )


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_documents_list_pages_and_searches(
    page: sync_api.Page, ui_app: RagApp, viewport: dict[str, int]
) -> None:
    """Before, every document was one row of one page (125 rows: a 4,877 px page)."""
    expect = sync_api.expect
    page.set_viewport_size(viewport)
    for i in range(121):
        ui_app.documents.create(T, "p1", f"documents/notes/n{i:03}.md", f"note {i}")
    page.goto(f"/ui/t1/p1?token={make_token()}")
    rows = page.locator("#documents-table tbody tr")
    expect(rows).to_have_count(50)
    expect(page.locator("#documents-range")).to_have_text("1–50 of 125")
    expect(page.locator("#documents-prev")).to_be_disabled()
    page.click("#documents-next")
    expect(page.locator("#documents-range")).to_have_text("51–100 of 125")
    page.click("#documents-next")
    expect(page.locator("#documents-range")).to_have_text("101–125 of 125")
    expect(rows).to_have_count(25)
    expect(page.locator("#documents-next")).to_be_disabled()

    page.fill("#documents-search", "N04")  # any case
    expect(page.locator("#documents-range")).to_have_text("1–10 of 10")
    expect(rows).to_have_count(10)
    assert all("n04" in p for p in rows.evaluate_all("rs => rs.map(r => r.dataset.path)"))
    page.fill("#documents-search", "no such path")
    expect(page.locator("#documents-empty")).to_have_text("No document path holds “no such path”.")
    _no_horizontal_overflow(page)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_failed_documents_stay_listed_with_their_reason_after_a_reindex(
    page: sync_api.Page, ui_app: RagApp, viewport: dict[str, int], tmp_path: Path
) -> None:
    """Before, a reindex turned the failed document into plain "pending" and the failed list
    into "None"; and at 420 px the failed table was cut off at the card's edge."""
    expect = sync_api.expect
    page.set_viewport_size(viewport)
    ui_app.documents.create(T, "p1", "documents/" + "long-folder-name/" * 4 + "x.md", POISON)
    ui_app.scheduler.run_until_idle(timeout_s=30)
    page.goto(f"/ui/t1/p1?token={make_token()}")
    failed = page.locator("#failed-table tbody tr")
    expect(failed).to_have_count(2)
    page.click("#btn-reindex")
    expect(page.locator("#action-result")).to_have_text("Queued 5 documents for reindexing.")
    row = page.locator(f'#failed-table tbody tr[data-path="{BAD}"]')
    expect(row).to_contain_text("pending (will retry)")
    expect(row).to_contain_text(POISON_MESSAGE)
    expect(page.locator("#failed-empty")).to_be_hidden()
    doc_row = page.locator(f'#documents-table tr[data-path="{BAD}"]')
    expect(doc_row.locator(".doc-state")).to_have_text("pending (queued) (last attempt failed)")
    expect(page.locator("#indexing-text")).to_contain_text("0 done · 0 failed · 5 waiting")
    _within_the_viewport(page, "#failed-table td")
    _no_horizontal_overflow(page)
    page.screenshot(path=str(tmp_path / "failed.png"), full_page=True)


def test_the_status_card_says_when_no_indexer_runs(page: sync_api.Page, ui_app: RagApp) -> None:
    """Before, documents queued with no worker showed "pending" forever, with nothing
    saying why; the card now says no indexer ran, and names the live workers."""
    expect = sync_api.expect
    ui_app.documents.create(T, "p1", "documents/waiting.md", "queued with no worker running")
    page.goto(f"/ui/t1/p1?token={make_token()}")
    expect(page.locator("#rag-indexer")).to_contain_text("no indexer has run")
    expect(page.locator("#indexer-workers")).to_be_hidden()
    ui_app.store.control.record_heartbeat(
        Beat("node-a:1f", node_id="test-node", version="9.9", interval_s=30)
    )
    page.reload()
    expect(page.locator("#rag-indexer")).to_be_hidden()
    expect(page.locator("#indexer-workers")).to_contain_text("node-a:1f (9.9, last tick")


def test_an_absent_rag_says_why_and_how_to_fix_it(page: sync_api.Page, ui_app: RagApp) -> None:
    """openai without ai.embedding.apiKey: the page said only "absent (created on the next
    reindex or project start)", which no reindex would do; it shows the reason and the fix."""
    expect = sync_api.expect
    ui_app.project_rags.dispose_default_rag(T, "p1")
    ui_app.settings.set(T, None, "ai.embedding.provider", "openai")
    page.goto(f"/ui/t1/p1?token={make_token()}")
    absent = page.locator("#rag-exists")
    expect(absent).to_contain_text("absent: ai.embedding.apiKey is required")
    expect(absent).to_contain_text("any placeholder")
