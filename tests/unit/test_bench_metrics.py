"""The metric functions of ``bench/scifact.py`` on hand-computed examples.

The script is loaded by path (``bench/`` is not a package); importing it must not load the
embedding model, torch or the store.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scifact.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_scifact", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scifact"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_import_is_light() -> None:
    # Loading the script must not pull the model stack in (it may already be loaded by
    # another test in the same session, so only check what the script itself imports).
    assert not hasattr(bench, "torch")
    assert not hasattr(bench, "RagApp")


def test_ndcg_binary_hand_example() -> None:
    # Two relevant docs a, b; ranking a, c, b.
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) = 1.6309297535714575.
    rels = {"a": 1, "b": 1}
    scores = {"a": 0.9, "c": 0.8, "b": 0.7}
    expected = 1.5 / (1 + 1 / math.log2(3))
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(expected)
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(0.9197207891481877)
    # Cut at 1: only a (relevant) is seen, ideal is 1 as well.
    assert bench.ndcg_at_k(rels, scores, 1) == pytest.approx(1.0)
    # Cut at 2: DCG = 1, IDCG = 1 + 1/log2(3).
    assert bench.ndcg_at_k(rels, scores, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_ndcg_graded_uses_linear_gain_like_trec_eval() -> None:
    # trec_eval's ndcg uses the qrels grade as the gain (not 2^rel - 1).
    rels = {"d1": 2, "d2": 1}
    scores = {"d2": 0.9, "d1": 0.5}
    dcg = 1 + 2 / math.log2(3)
    idcg = 2 + 1 / math.log2(3)
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(dcg / idcg)
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(0.8597186998521972)


def test_ideal_dcg_counts_relevant_docs_never_retrieved() -> None:
    # Three relevant, only one retrieved (at rank 1): DCG = 1, IDCG = 1 + 1/log2(3) + 1/2.
    rels = {"a": 1, "b": 1, "c": 1}
    scores = {"a": 0.9, "x": 0.8}
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(1 / (1 + 1 / math.log2(3) + 0.5))


def test_non_positive_grades_are_not_relevant() -> None:
    rels = {"a": 0, "b": 1}
    scores = {"a": 0.9, "b": 0.8}
    assert bench.ndcg_at_k(rels, scores, 10) == pytest.approx(1 / math.log2(3))
    assert bench.recall_at_k(rels, scores, 1) == 0.0
    assert bench.recall_at_k(rels, scores, 2) == 1.0


def test_recall_hand_example() -> None:
    rels = {"a": 1, "b": 1, "c": 1, "d": 1}
    scores = {"a": 0.9, "x": 0.8, "b": 0.7, "y": 0.6, "c": 0.1}
    assert bench.recall_at_k(rels, scores, 1) == pytest.approx(0.25)
    assert bench.recall_at_k(rels, scores, 3) == pytest.approx(0.5)
    assert bench.recall_at_k(rels, scores, 100) == pytest.approx(0.75)
    assert bench.recall_at_k({}, scores, 10) == 0.0


def test_rank_orders_by_score_then_doc_id_descending() -> None:
    # trec_eval breaks score ties by document id, descending.
    assert bench.rank({"a": 0.5, "c": 0.5, "b": 0.9, "d": 0.1}) == ["b", "c", "a", "d"]
    # The tie order matters for the metric: relevant "a" tied with "z" lands second.
    assert bench.ndcg_at_k({"a": 1}, {"a": 0.5, "z": 0.5}, 10) == pytest.approx(1 / math.log2(3))


def test_evaluate_averages_over_qrels_queries_missing_run_counts_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"d": 1}}
    run = {
        "q1": {"a": 0.9, "x": 0.1},  # ndcg 1, r@10 1
        "q2": {"x": 0.9, "b": 0.8},  # ndcg (1/log2 3)/(1 + 1/log2 3), r@10 0.5
        # q3 missing: 0
        "q9": {"a": 1.0},  # not in qrels: ignored
    }
    out = bench.evaluate(qrels, run)
    q2 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert out["ndcg@10"] == pytest.approx((1 + q2 + 0) / 3)
    assert out["recall@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert out["recall@100"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert set(out) == {"ndcg@10", "recall@10", "recall@100"}


def test_threshold_table() -> None:
    samples = [(0.7, True), (0.5, True), (0.45, False), (0.3, False), (0.2, True)]
    rows = bench.threshold_table(samples, (0.2, 0.4, 0.6), noise=[0.1, 0.25, 0.5])
    by_t = {r["threshold"]: r for r in rows}
    assert by_t[0.2]["passed"] == 5
    assert by_t[0.2]["precision"] == pytest.approx(3 / 5)
    assert by_t[0.2]["recall"] == pytest.approx(1.0)
    assert by_t[0.2]["noise_pass"] == pytest.approx(2 / 3)
    assert by_t[0.4]["passed"] == 3  # 0.7, 0.5, 0.45 (>= is kept, as AutoInject does)
    assert by_t[0.4]["precision"] == pytest.approx(2 / 3)
    assert by_t[0.4]["recall"] == pytest.approx(2 / 3)
    assert by_t[0.4]["noise_pass"] == pytest.approx(1 / 3)
    assert by_t[0.6]["passed"] == 1
    assert by_t[0.6]["precision"] == pytest.approx(1.0)
    assert by_t[0.6]["recall"] == pytest.approx(1 / 3)
    assert math.isnan(bench.threshold_table([(0.1, False)], (0.5,))[0]["precision"])


def test_thresholds_are_the_calibration_grid() -> None:
    assert bench.THRESHOLDS == (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)


def test_percentile_matches_linear_interpolation() -> None:
    vals = [4.0, 1.0, 3.0, 2.0]
    assert bench.percentile(vals, 0) == 1.0
    assert bench.percentile(vals, 50) == pytest.approx(2.5)
    assert bench.percentile(vals, 100) == 4.0
    assert bench.summarize([])["n"] == 0


def test_load_qrels_skips_header(tmp_path: Path) -> None:
    f = tmp_path / "test.tsv"
    f.write_text("query-id\tcorpus-id\tscore\n1\t10\t1\n1\t11\t2\n3\t12\t1\n", encoding="utf-8")
    assert bench.load_qrels(f) == {"1": {"10": 1, "11": 2}, "3": {"12": 1}}
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t10\t1\n", encoding="utf-8")
    with pytest.raises(ValueError):
        bench.load_qrels(bad)


def test_subset_keeps_relevant_docs_first() -> None:
    corpus = {c: ("t", "x") for c in ["1", "2", "3", "4", "5"]}
    qrels = {"q1": {"4": 1}, "q2": {"5": 1, "9": 1}}
    ids, sub = bench.select_subset(corpus, qrels, 3)
    assert ids == ["4", "5", "1"]
    assert sub == {"q1": {"4": 1}, "q2": {"5": 1}}


def test_document_text_and_path() -> None:
    assert bench.doc_text("Title.", "Body text.") == "Title. Body text."
    assert bench.doc_path("4983") == "documents/scifact/4983.txt"
    assert SCRIPT.parents[2] / "shared" / "data" / "scifact" == bench.DEFAULT_DATA
