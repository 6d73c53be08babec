#!/usr/bin/env python
"""What the ``<rag-context>`` block holds on SciFact: today's block next to fixed gap cuts.

Each of the 300 SciFact test claims is one chat turn through the real pre-turn path,
``app.autoinject.decide(...)`` with AutoInject ON and today's defaults (topK 5, ``minScore
auto``, maxPerDocument 2, the 1,500-token budget), in ``hybrid`` and ``dense`` mode. Per turn
the benchmark reads the excerpts the block shows and scores them against the claim's relevant
abstracts:

- **excerpt precision**: the share of the block's excerpts that come from a relevant abstract
  (mean over turns with a block);
- **document precision**: the same with sibling chunks of one abstract counted once;
- **block recall**: the share of the claim's relevant abstracts the block holds (mean over
  turns);
- **hit turns**: turns whose block holds at least one relevant excerpt;
- **tokens per block** (the rendered block, as the budget counts it; 0 for no block) and
  **tokens per shown excerpt**.

The **fixed gap cut** keeps the excerpts whose cosine is within ``gap`` of the turn's best
excerpt (gaps 0.03-0.15), rendered again through the same template and budget: the baseline
any relevance cut has to beat at equal tokens.

It needs the indexed SciFact project of ``bench/scifact.py`` (about 15 minutes of indexing on
2 cores, once)::

    python bench/scifact.py --store sqlite:////tmp/scifact/rag.db      # index once
    python bench/block_precision.py --store sqlite:////tmp/scifact/rag.db
    python bench/block_precision.py --store … --json > run.json         # one JSON object

The **relevance cut** (``rag.autoInject.relevanceCut``, issue 42) runs through the same real
path, ``decide(...)`` with the recipe's ``relevanceCut: auto`` (the RAG's calibrated gap; a
RAG calibrated before the cut existed is calibrated again first, the only write the benchmark
makes: run it on a copy of the store to keep the original as it is); its rule at fixed gaps
(``rule 0.xx``) is applied to the same candidates as the gap rows, and the cut function's own
time is measured alone (median over the turns' candidates).

The metric functions import nothing heavy (``tests/unit/test_bench_block_metrics.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scifact  # the data loaders, the indexed project and the machine line

HERE = Path(__file__).resolve().parent

#: The fixed gap cuts of the baseline curve (cosine below the turn's best excerpt).
GAPS: tuple[float, ...] = (0.03, 0.05, 0.07, 0.09, 0.11, 0.13, 0.15)

#: The relevance cut's rule at fixed gaps: its own curve next to the fixed gap's.
RULE_GAPS: tuple[float, ...] = (0.09, 0.13, 0.17, 0.21)


@dataclass(frozen=True)
class Shown:
    """One excerpt of a block: the abstract it comes from and its tokens."""

    doc: str
    score: float


def turn_metrics(shown: Sequence[Shown], relevant: set[str], tokens: int) -> dict[str, Any]:
    """The measures of one turn's block (``tokens``: the rendered block's, 0 for none)."""
    docs = {s.doc for s in shown}
    hits = sum(1 for s in shown if s.doc in relevant)
    return {
        "excerpts": len(shown),
        "tokens": tokens,
        "precision": hits / len(shown) if shown else None,
        "doc_precision": len(docs & relevant) / len(docs) if docs else None,
        "recall": len(docs & relevant) / len(relevant) if relevant else 0.0,
        "hit": hits > 0,
    }


def summarize(turns: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Means over turns (precisions over the turns that got a block)."""

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else float("nan")

    with_block = [t for t in turns if t["excerpts"]]
    excerpts = sum(t["excerpts"] for t in turns)
    return {
        "turns": len(turns),
        "blocks": len(with_block),
        "excerpts_per_block": mean([t["excerpts"] for t in turns]),
        "tokens_per_block": mean([t["tokens"] for t in turns]),
        "tokens_per_excerpt": sum(t["tokens"] for t in turns) / excerpts if excerpts else 0.0,
        "precision": mean([t["precision"] for t in with_block]),
        "doc_precision": mean([t["doc_precision"] for t in with_block]),
        "recall": mean([t["recall"] for t in turns]),
        "hit_turns": mean([1.0 if t["hit"] else 0.0 for t in turns]),
    }


def gap_cut(scores: Sequence[float], gap: float) -> list[int]:
    """Indices of the excerpts within ``gap`` of the best cosine, in their order."""
    if not scores:
        return []
    best = max(scores)
    return [i for i, s in enumerate(scores) if s >= best - gap]


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.domain.block.budget import fit_to_budget
    from vancetope_rag.domain.block.context_block import render_context_block
    from vancetope_rag.domain.retrieval.relevance import (
        RELEVANCE_AUTO,
        RELEVANCE_OFF,
        cut_by_relevance,
    )
    from vancetope_rag.domain.settings.cascade import AutoInject
    from vancetope_rag.recipes import RagParams
    from vancetope_rag.services.tokens import count_tokens

    data = Path(args.data).resolve()
    queries = scifact.load_queries(data)
    qrels = scifact.load_qrels(data / "qrels" / "test.tsv")
    tenant = "bench"
    app = RagApp.open(
        EngineConfig(store=args.store, node_id="bench-block", indexer_initial_delay_s=1e9)
    )
    try:
        project = scifact._indexed_project(app, tenant, len(scifact.load_corpus(data)))
        if project is None:
            raise SystemExit(
                f"no fully indexed SciFact project in {args.store}: run bench/scifact.py"
            )
        rag = app.project_rags.find_default_rag(tenant, project)
        if rag.calibration is None or rag.calibration.gap is None:
            app.calibrator.calibrate(rag)  # calibrated before the relevance cut existed
            rag = app.project_rags.find_default_rag(tenant, project)
        doc_of = {
            doc.id: doc.path.rsplit("/", 1)[-1].removesuffix(".txt")
            for doc in app.documents.list_documents(tenant, project)
        }
        result: dict[str, Any] = {
            "chunks": app.rags.chunk_count(rag),
            "min_score_auto": rag.calibration.min_score if rag.calibration else None,
            "gap_auto": rag.calibration.gap if rag.calibration else None,
            "modes": {},
        }
        budget = app.config.autoinject_max_tokens
        excerpt_texts: list[str] = []  # the turns' candidates, for the cut's time alone

        def block_of(kept: Sequence[Any], relevant: set[str]) -> dict[str, Any]:
            block, fitted = fit_to_budget(
                kept,
                lambda some: render_context_block(some, None, project_rag=True),
                count_tokens,
                budget,
            )
            cut = [Shown(doc_of.get(h.source_ref, h.source_ref), h.score) for h in fitted]
            return turn_metrics(cut, relevant, count_tokens(block) if block else 0)

        def shown_of(decision: Any, relevant: set[str]) -> dict[str, Any]:
            hits = list(decision.hits) if decision.block else []
            shown = [Shown(doc_of.get(h.source_ref, h.source_ref), h.score) for h in hits]
            tokens = count_tokens(decision.block) if decision.block else 0
            return turn_metrics(shown, relevant, tokens)

        for mode in args.modes:
            params = RagParams(
                auto_inject=AutoInject.ON, retrieval_mode=mode, relevance_cut=RELEVANCE_OFF
            )
            with_cut = RagParams(
                auto_inject=AutoInject.ON, retrieval_mode=mode, relevance_cut=RELEVANCE_AUTO
            )
            today: list[dict[str, Any]] = []
            auto: list[dict[str, Any]] = []
            cuts: dict[float, list[dict[str, Any]]] = {g: [] for g in GAPS}
            rules: dict[float, list[dict[str, Any]]] = {g: [] for g in RULE_GAPS}
            cut_seconds: list[float] = []
            reasons: dict[str, list[int]] = {}
            t0 = time.perf_counter()
            for qid, rels in qrels.items():
                relevant = {c for c, g in rels.items() if g > 0}
                decision = app.autoinject.decide(tenant, project, [queries[qid]], params)
                today.append(shown_of(decision, relevant))
                cut_on = app.autoinject.decide(tenant, project, [queries[qid]], with_cut)
                auto.append(shown_of(cut_on, relevant))
                tally_reasons(reasons, cut_on, relevant, doc_of)
                # every candidate of the turn: the shown ones and those over the budget
                hits = [*decision.hits, *(d.hit for d in decision.dropped)]
                if not decision.block:
                    hits = []
                excerpt_texts.extend(h.text for h in hits)
                for gap in GAPS:
                    kept = [hits[i] for i in gap_cut([h.score for h in hits], gap)]
                    cuts[gap].append(block_of(kept, relevant))
                for gap in RULE_GAPS:
                    started = time.perf_counter()
                    rule = cut_by_relevance(hits, gap, query=queries[qid])
                    cut_seconds.append(time.perf_counter() - started)
                    rules[gap].append(block_of(rule.kept, relevant))
            result["modes"][mode] = {
                "today": summarize(today),
                "gaps": {f"{g:.2f}": summarize(cuts[g]) for g in GAPS},
                "rules": {f"{g:.2f}": summarize(rules[g]) for g in RULE_GAPS},
                "auto": summarize(auto),
                "auto_reasons": reasons,
                "cut_median_us": statistics.median(cut_seconds) * 1e6 if cut_seconds else 0.0,
                "seconds": time.perf_counter() - t0,
            }
        result["cut_100_hits_median_us"] = _time_cut_alone(
            cut_by_relevance, excerpt_texts, queries[next(iter(qrels))]
        )
        result["machine"] = scifact.machine_info()
        result["command"] = "python bench/block_precision.py " + " ".join(sys.argv[1:])
        return result
    finally:
        app.close()


def tally_reasons(
    tally: dict[str, list[int]], decision: Any, relevant: set[str], doc_of: Mapping[str, str]
) -> None:
    """Add one turn's cut to ``tally``: per reason the cut gave (``gap``, ``fused``,
    ``words``), the hits it dropped and how many of them came from a relevant abstract."""
    for d in decision.dropped:
        kind = d.reason.split()[0]
        if kind == "over":  # the token budget's, not the cut's
            continue
        entry = tally.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += doc_of.get(d.hit.source_ref, d.hit.source_ref) in relevant


def _time_cut_alone(
    cut: Any, texts: Sequence[str], query: str, n: int = 100, repeat: int = 2000
) -> float:
    """The cut's median time (µs) on a turn of ``n`` hybrid hits (20x the default topK) with
    the texts of real excerpts (``texts``, the first ``n``) and a real turn (``query``): the
    cut reads only the turn's selected hits and their words, so the RAG's size (100k chunks
    or 10) is not in its cost."""
    from vancetope_rag.domain.records import Hit

    hits = [
        Hit(
            score=0.9 - i / (2 * n),
            text=texts[i % len(texts)],
            source_ref=f"d{i}",
            fused_score=1 / (61 + i),
            dense_rank=i + 1,
            lexical_rank=n - i,
        )
        for i in range(n)
    ]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        cut(hits, 0.15, None, query)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def render(r: Mapping[str, Any]) -> str:
    cols = ("excerpts", "tokens", "tok/exc", "precision", "doc prec", "recall", "hit turns")
    lines = [
        f"SciFact test claims, {r['chunks']} chunks, minScore auto = {r['min_score_auto']}, "
        f"relevance gap auto = {r.get('gap_auto')}",
        "",
    ]
    for mode, m in r["modes"].items():
        base = m["today"]
        lines.append(f"## {mode}")
        lines.append("| block | " + " | ".join(cols) + " |")
        lines.append("|---" * (len(cols) + 1) + "|")

        def row(name: str, s: Mapping[str, float], base: Mapping[str, float] = base) -> str:
            return (
                f"| {name} | {s['excerpts_per_block']:.2f} | {s['tokens_per_block']:.0f} "
                f"({s['tokens_per_block'] / base['tokens_per_block']:.2f}x) | "
                f"{s['tokens_per_excerpt']:.0f} | {s['precision']:.3f} | "
                f"{s['doc_precision']:.3f} | "
                f"{s['recall']:.3f} ({s['recall'] / base['recall']:.2f}x) | "
                f"{s['hit_turns']:.3f} ({s['hit_turns'] / base['hit_turns']:.2f}x) |"
            )

        lines.append(row("today", base))
        for gap, s in m["gaps"].items():
            lines.append(row(f"gap {gap}", s))
        for gap, s in m.get("rules", {}).items():
            lines.append(row(f"rule {gap}", s))
        if "auto" in m:
            lines.append(row("**cut auto**", m["auto"]))
            lines.append("")
            reasons = m.get("auto_reasons", {}).items()
            told = ", ".join(f"{kind} {n} ({hit} relevant)" for kind, (n, hit) in reasons)
            lines.append(f"cut auto, hits by reason: {told}")
            lines.append(f"cut function, median per turn: {m['cut_median_us']:.1f} µs")
        lines.append("")
    if "cut_100_hits_median_us" in r:
        lines.append(
            f"cut function alone on a 100-hit turn: median {r['cut_100_hits_median_us']:.1f} µs"
        )
    lines.append(scifact.machine_line(r["machine"]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True, help="store URI of bench/scifact.py's index")
    parser.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--mode", default="hybrid,dense", help="hybrid, dense or both")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.modes or any(m not in ("dense", "hybrid") for m in args.modes):
        parser.error("--mode takes dense, hybrid or both (hybrid,dense)")
    result = run(args)
    print(json.dumps(result) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
