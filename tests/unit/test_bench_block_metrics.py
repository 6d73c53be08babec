"""The measures of ``bench/block_precision.py`` on hand-computed blocks.

``bench/`` is not a package: the test imports the script from there, as the scripts import
each other; importing it must not load the embedding model, torch or the store.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import block_precision as bench

Shown = bench.Shown


def test_siblings_count_once_in_document_precision_but_twice_in_excerpt_precision() -> None:
    shown = [Shown("a", 0.8), Shown("a", 0.7), Shown("b", 0.6)]
    m = bench.turn_metrics(shown, {"a", "c"}, tokens=300)
    assert m["precision"] == 2 / 3
    assert m["doc_precision"] == 1 / 2
    assert m["recall"] == 1 / 2
    assert m["hit"] is True


def test_a_turn_without_block_counts_in_recall_and_tokens_not_in_precision() -> None:
    turns = [
        bench.turn_metrics([Shown("a", 0.8)], {"a"}, tokens=100),
        bench.turn_metrics([], {"b"}, tokens=0),
    ]
    s = bench.summarize(turns)
    assert s["precision"] == 1.0
    assert s["recall"] == 0.5
    assert s["hit_turns"] == 0.5
    assert s["tokens_per_block"] == 50
    assert s["tokens_per_excerpt"] == 100
    assert s["blocks"] == 1


def test_gap_cut_keeps_what_is_within_the_gap_of_the_best_in_order() -> None:
    assert bench.gap_cut([0.70, 0.85, 0.80, 0.74], 0.1) == [1, 2]
    assert bench.gap_cut([0.70, 0.85, 0.80, 0.75], 0.1) == [1, 2, 3]
    assert bench.gap_cut([], 0.1) == []


def test_summary_of_no_turn_is_not_a_number() -> None:
    assert math.isnan(bench.summarize([])["precision"])


def test_the_cut_is_tallied_by_reason_without_the_budget() -> None:
    from types import SimpleNamespace

    def dropped(doc: str, reason: str) -> SimpleNamespace:
        return SimpleNamespace(hit=SimpleNamespace(source_ref=doc), reason=reason)

    decision = SimpleNamespace(
        dropped=[
            dropped("id-a", "gap 0.200 > 0.150"),
            dropped("id-b", "words 0.00 of the turn's < 0.30 of the best-worded hit's 1.00"),
            dropped("id-c", "gap 0.180 > 0.150"),
            dropped("id-a", "over rag.autoInject.maxTokens=1500"),
        ]
    )
    tally: dict[str, list[int]] = {}
    bench.tally_reasons(tally, decision, {"a"}, {"id-a": "a", "id-b": "b", "id-c": "c"})
    assert tally == {"gap": [2, 1], "words": [1, 0]}
