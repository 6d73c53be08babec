"""``vancetope-rag calibrate`` and ``query --min-score auto`` on a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rerank_server import RerankServer
from vancetope_rag.domain.retrieval.calibration import (
    MIN_CALIBRATION_CHUNKS,
    PROBE_TURNS,
    derive_min_score,
)
from vancetope_rag.domain.retrieval.rerank_calibration import RERANK_CALIBRATION_QUERIES


@pytest.fixture
def indexed(run, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(MIN_CALIBRATION_CHUNKS):
        (root / f"n{i:02}.md").write_text(f"Glacier survey {i}: ice retreat of {i + 2} metres.")
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("import", str(root))
    run("index")


def test_calibrate_shows_the_distribution_and_the_chosen_value(run, indexed: None) -> None:
    shown = json.loads(run("calibrate", "--dry-run", "--json").stdout)
    assert shown["saved"] is False and shown["chunks"] == MIN_CALIBRATION_CHUNKS
    assert len(shown["scores"]) == len(PROBE_TURNS)
    assert shown["minScore"] == derive_min_score(shown["scores"])
    assert shown["previousMinScore"] is not None  # the indexer calibrated it already
    assert set(shown["summary"]) == {"min", "p25", "p50", "p75", "max"}
    assert shown["highestProbes"][0]["score"] == max(shown["scores"])
    assert shown["applied"] == shown["minScore"]  # nothing explicit in the cascade

    text = run("calibrate").stdout
    assert f"{len(PROBE_TURNS)} off-topic probe turns" in text
    assert "<- minScore" in text or "above every probe" in text
    assert f"minScore auto = {shown['minScore']:.4f}" in text and "saved" in text
    assert f"relevance gap (relevanceCut auto) = {shown['gap']:.4f} from" in text

    run("settings", "set", "rag.minScore", "0.9")
    note = run("calibrate").stdout
    assert "this project's turns use minScore 0.9" in note


def test_query_takes_min_score_auto_and_refuses_words(run, indexed: None) -> None:
    hits = json.loads(run("query", "glacier ice retreat", "--min-score", "auto", "--json").stdout)
    floor = json.loads(run("calibrate", "--dry-run", "--json").stdout)["minScore"]
    assert hits and all(h["score"] >= floor for h in hits)
    bad = run("query", "glacier", "--min-score", "high", ok=False)
    assert bad.exit_code == 2 and "--min-score must be a number from -1 to 1 or 'auto'" in (
        bad.output
    )


def test_calibrate_names_a_missing_rag(run, indexed: None) -> None:
    result = run("calibrate", "--rag", "nope", ok=False)
    assert result.exit_code == 1 and "no RAG 'nope'" in result.stderr


def test_status_shows_what_auto_means(run, indexed: None) -> None:
    floor = json.loads(run("calibrate", "--json").stdout)
    status = json.loads(run("status", "--json").stdout)
    assert status["minScoreAuto"]["minScore"] == floor["minScore"]
    assert status["minScoreAuto"]["chunks"] == MIN_CALIBRATION_CHUNKS
    gap = status["minScoreAuto"]["gap"]
    assert gap == floor["gap"] and gap is not None
    assert (
        f"minScore auto: {floor['minScore']:.4f}, relevance gap {gap:.4f} (calibrated over"
        in run("status").stdout
    )


def test_query_and_context_take_the_relevance_cut(run, indexed: None) -> None:
    question = ["glacier ice retreat of 7 metres", "--min-score", "-1", "--top-k", "10"]
    plain = json.loads(run("query", *question, "--json").stdout)
    cut = json.loads(run("query", *question, "--relevance-cut", "0", "--json").stdout)
    assert len(plain) == 10  # off by default: topK 10 gets 10
    assert 1 <= len(cut) < 10 and cut[0] == plain[0]
    bad = run("query", "glacier", "--relevance-cut", "sometimes", ok=False)
    assert bad.exit_code != 0 and "relevance_cut must be" in bad.output

    run("settings", "set", "rag.autoInject.enabled", "ON")
    run("settings", "set", "rag.minScore", "--", "-1")
    run("settings", "set", "rag.autoInject.relevanceCut", "0")
    decision = json.loads(run("context", question[0], "--json").stdout)
    assert decision["dropped"] and all(d["reason"].startswith("gap ") for d in decision["dropped"])
    shown = {h["path"] for h in decision["hits"]}
    assert shown.isdisjoint(d["path"] for d in decision["dropped"])
    explained = run("context", question[0], "--explain")
    assert "dropped documents/" in explained.stderr and ": gap " in explained.stderr


def test_query_says_what_the_cut_dropped_and_why(run, indexed: None) -> None:
    """A cut ``query`` names what its hits were cut by and each hit it dropped with the
    reason, as ``context --explain`` words them; ``--explain`` gives the same in JSON."""
    question = ["glacier ice retreat of 7 metres", "--min-score", "-1", "--top-k", "10"]
    cut = [*question, "--relevance-cut", "0.01"]
    text = run("query", *cut).stdout
    assert "\ncut: cosine within 0.010 of the best" in text
    hits = json.loads(run("query", *cut, "--json").stdout)
    explained = json.loads(run("query", *cut, "--json", "--explain").stdout)
    assert explained["hits"] == hits  # the same hits, now beside the cut
    assert explained["cut"]["by"] == "gap" and explained["cut"]["value"] == 0.01
    dropped = explained["dropped"]
    assert dropped and len(hits) + len(dropped) == 10
    lines = text.splitlines()
    assert f"cut: {explained['cut']['keeps']}" in lines
    shown = [line for line in lines if line.startswith("  dropped ")]
    assert len(shown) == len(dropped)
    for line, d in zip(shown, dropped, strict=True):
        assert line.startswith(f"  dropped {d['path']}  ") and "  cosine " in line
        assert line.endswith(f": {d['reason']}") and d["reason"].startswith("gap ")
    assert all(h["path"] not in line for h in hits for line in shown)


def test_query_without_a_cut_prints_the_hits_alone(run, indexed: None) -> None:
    """No cut, nothing new: a header, and a line of numbers and one of text per hit."""
    question = ["glacier ice retreat of 7 metres", "--min-score", "-1", "--top-k", "4"]
    hits = json.loads(run("query", *question, "--json").stdout)
    for args in ([], ["--relevance-cut", "off"]):
        lines = run("query", *question, *args).stdout.splitlines()
        assert lines[0].startswith("4 hits in the order the turn uses: ")
        assert len(lines) == 1 + 2 * len(hits)
        for i, (line, h) in enumerate(zip(lines[1::2], hits, strict=True), 1):
            assert line.startswith(f"#{i}  {h['path']}  ") and "  cosine " in line
        assert all(line.startswith("       ") for line in lines[2::2])
    explained = json.loads(run("query", *question, "--json", "--explain").stdout)
    assert explained == {"hits": hits, "cut": {"by": "none"}, "dropped": []}


def test_a_dry_run_notes_no_explicit_number_when_none_is_set(run, tmp_path: Path) -> None:
    """The dry run's own floor is what auto would mean: told apart from the stored one, it
    is no "explicit number in the cascade" (none is set)."""
    root = tmp_path / "chat"
    root.mkdir()
    for i, turn in enumerate(PROBE_TURNS[:MIN_CALIBRATION_CHUNKS]):  # chat like the probes'
        (root / f"c{i:02}.md").write_text(turn)
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("import", str(root))
    run("index")  # calibrated here: the probes find themselves
    gone = [f"documents/c{i:02}.md" for i in range(MIN_CALIBRATION_CHUNKS // 2)]
    run("documents", "delete", *gone)  # the RAG shrinks: its floor moves
    shown = json.loads(run("calibrate", "--dry-run", "--json").stdout)
    assert shown["minScore"] != shown["previousMinScore"]
    assert shown["applied"] == shown["minScore"]
    text = run("calibrate", "--dry-run").stdout
    assert "explicit number" not in text and "wins over auto" not in text


def _indexed_glacier_notes(run, tmp_path: Path) -> None:
    """:data:`MIN_CALIBRATION_CHUNKS` notes of two sentences each (one asks, the other
    answers), imported and indexed with the hashing provider."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(MIN_CALIBRATION_CHUNKS):
        (root / f"n{i:02}.md").write_text(
            f"Glacier survey {i}: ice retreat of {i + 2} metres this summer. The survey "
            f"team measured the glacier tongue {i} with drones and stakes."
        )
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("import", str(root))
    run("index")


def test_with_a_reranker_calibrate_status_and_explain_show_its_cut(run, tmp_path: Path) -> None:
    """The rerank calibration beside the gap: measured by ``calibrate``, shown by ``status``,
    and the candidates its cut dropped say ``rerank`` in ``context --explain``."""
    _indexed_glacier_notes(run, tmp_path)
    srv = RerankServer("tei")
    try:
        run("settings", "set", "ai.rerank.provider", "tei", "--scope", "tenant")
        run("settings", "set", "ai.rerank.baseUrl", srv.base_url, "--scope", "tenant")
        shown = json.loads(run("calibrate", "--json").stdout)
        cut = shown["rerank"]
        assert cut["reranker"] == "tei:tei" and cut["rule"] in ("relative", "absolute")
        assert 1 <= len(srv.requests) <= RERANK_CALIBRATION_QUERIES
        assert "relevance cut with reranker tei:tei: keeps hits " in run("calibrate").stdout

        status = json.loads(run("status", "--json").stdout)["minScoreAuto"]
        assert status["rerank"]["value"] == cut["value"] and status["gap"] == shown["gap"]
        assert "identity" not in status["rerank"]  # a digest of the URL stays in the store
        assert "relevance cut with reranker tei:tei: keeps hits" in run("status").stdout

        run("settings", "set", "rag.autoInject.enabled", "ON")
        run("settings", "set", "rag.minScore", "--", "-1")
        run("settings", "set", "rag.topK", "20")  # every note is a hit of the turn
        # measured on scores from 0 to 1; now the reranker loves one note and rejects the
        # note of the best cosine
        srv.prefer, srv.shun = "survey 7:", "survey 9:"
        explained = run("context", "glacier ice retreat of 9 metres", "--explain")
        assert "by the reranker's score" in explained.stderr
        (line,) = [x for x in explained.stderr.splitlines() if "documents/n09.md" in x]
        assert "dropped" in line and "(dense #1," in line and ": cut: rerank " in line
        assert "survey 7:" in explained.stdout  # the reranker's choice is in the block
    finally:
        srv.down()


def test_status_and_calibrate_say_when_the_reranker_had_nothing_to_measure(
    run, tmp_path: Path
) -> None:
    """A reranker that answers but gives no rule: its turns are cut by the gap, and both
    commands say why instead of showing no rerank cut at all."""
    _indexed_glacier_notes(run, tmp_path)
    srv = RerankServer("tei")
    srv.top = 1  # one rank an answer: no source scored beside its background
    try:
        run("settings", "set", "ai.rerank.provider", "tei", "--scope", "tenant")
        run("settings", "set", "ai.rerank.baseUrl", srv.base_url, "--scope", "tenant")
        said = f"relevance cut with the reranker: nothing to measure over {MIN_CALIBRATION_CHUNKS}"
        assert said in run("calibrate").stdout
        assert said in run("status").stdout
        status = json.loads(run("status", "--json").stdout)["minScoreAuto"]
        assert status["rerank"] is None
        assert status["rerankUnmeasurable"]["chunks"] == MIN_CALIBRATION_CHUNKS
    finally:
        srv.down()
