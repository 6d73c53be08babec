#!/usr/bin/env python
"""``minScore: auto`` on SciFact: does the calibrated threshold keep the relevant hits and drop
the benchmark's off-topic turns, as the hand-tuned 0.35 did for the embedded model?

Runs on a store that ``bench/scifact.py --store URI`` indexed (the SciFact project of tenant
``bench``), through the package's own path:

1. calibrates the project's ``_documents`` RAG with the shipped probe turns
   (``app.calibrator.calibrate``: the same call the indexer makes; the probes are disjoint
   from the benchmark's 30 off-topic turns);
2. runs the 300 test claims through ``app.rags.query(rag, claim, top_k=100, max_per_doc=1,
   mode=…)`` and counts, over the first 5 documents of each, how many relevant hits each
   threshold keeps (as ``bench/scifact.py``'s calibration table does);
3. sends the benchmark's 30 off-topic chat turns through the real AutoInject step
   (``app.autoinject.decide``) at the default ``minScore`` (auto) and at 0.35, and counts the
   turns that get no block.

``--partial`` accepts a project whose indexing is not finished: the indexed documents are the
corpus, the qrels are cut to them (the figures are then not comparable with a full run).

    python bench/calibration.py --store sqlite:////tmp/scifact.db --mode hybrid --json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _scifact() -> Any:
    """``bench/scifact.py`` (data loaders, off-topic turns, machine line)."""
    spec = importlib.util.spec_from_file_location("bench_scifact", HERE / "scifact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scifact"] = module
    spec.loader.exec_module(module)
    return module


scifact = _scifact()


def kept_share(top5: Sequence[tuple[float, bool]], threshold: float) -> tuple[int, int]:
    """(relevant top-5 hits scoring >= threshold, relevant top-5 hits)."""
    relevant = [s for s, r in top5 if r]
    return sum(1 for s in relevant if s >= threshold), len(relevant)


def _project(app: Any, tenant: str, partial: bool) -> tuple[str, Any]:
    best: tuple[int, str] | None = None
    for proj in app.store.control.list_projects(tenant_id=tenant):
        counts = app.store.control.document_state_counts(tenant, proj.project_id)
        done = counts.get("indexed", 0)
        if not partial and done != sum(counts.values()):
            continue
        if best is None or done > best[0]:
            best = (done, proj.project_id)
    if best is None:
        raise SystemExit(f"no fully indexed project of tenant {tenant!r} (try --partial)")
    rag = app.project_rags.find_default_rag(tenant, best[1])
    return best[1], rag


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.domain.records import IndexState
    from vancetope_rag.domain.retrieval.calibration import AUTO
    from vancetope_rag.domain.settings.cascade import AutoInject
    from vancetope_rag.recipes import RagParams

    data = Path(args.data).resolve()
    queries = scifact.load_queries(data)
    qrels_all = scifact.load_qrels(data / "qrels" / "test.tsv")
    tenant = "bench"
    app = RagApp.open(EngineConfig(store=args.store, node_id="bench-calibration"))
    try:
        project, rag = _project(app, tenant, args.partial)
        doc_to_cid: dict[str, str] = {}
        for doc in app.documents.list_documents(tenant, project):
            if doc.index_state is IndexState.INDEXED:
                doc_to_cid[doc.id] = doc.path.rsplit("/", 1)[-1].removesuffix(".txt")
        present = set(doc_to_cid.values())
        qrels = {
            q: {c: g for c, g in rels.items() if c in present}
            for q, rels in qrels_all.items()
            if any(g > 0 and c in present for c, g in rels.items())
        }
        t0 = time.perf_counter()
        cal = app.calibrator.calibrate(rag)
        calibrate_s = time.perf_counter() - t0
        rag = app.rags.get(tenant, project, rag.id)
        scifact._log(f"calibrated in {calibrate_s:.1f}s: minScore auto = {cal.min_score:.4f}")

        top5: list[tuple[float, bool]] = []
        for qid, rels in qrels.items():
            hits = app.rags.query(rag, queries[qid], top_k=100, max_per_doc=1, mode=args.mode)
            for h in hits[:5]:
                cid = doc_to_cid.get(h.source_ref)
                top5.append((float(h.score), rels.get(cid or "", 0) > 0))
        thresholds = {"auto": cal.min_score, "0.35": 0.35}
        kept = {name: kept_share(top5, t) for name, t in thresholds.items()}

        turns: list[dict[str, Any]] = []
        for turn in scifact.OFF_TOPIC_PROBES:
            best = app.rags.query(rag, turn, top_k=1, mode="dense")
            row: dict[str, Any] = {"turn": turn, "best": float(best[0].score) if best else None}
            for name, value in (("auto", AUTO), ("0.35", 0.35)):
                params = RagParams(
                    auto_inject=AutoInject.ON, retrieval_mode=args.mode, min_score=value
                )
                row[name] = app.autoinject.decide(tenant, project, [turn], params).block is not None
            turns.append(row)
        default = app.autoinject.decide(
            tenant,
            project,
            [scifact.OFF_TOPIC_PROBES[0]],
            RagParams(auto_inject=AutoInject.ON, retrieval_mode=args.mode),
        )
        return {
            "mode": args.mode,
            "documents": len(doc_to_cid),
            "chunks": app.rags.chunk_count(rag),
            "queries": len(qrels),
            "partial": len(qrels) != len(qrels_all),
            "calibration": {**cal.to_dict(), "summary": cal.summary(), "seconds": calibrate_s},
            "default_min_score": app.config.retrieval_min_score,
            "default_turn_reason": default.reason,
            "relevant_top5_kept": {k: {"kept": a, "of": b} for k, (a, b) in kept.items()},
            # every (cosine, relevant) of the top 5: other thresholds can be read off a saved run
            "top5": top5,
            "off_topic": turns,
            "off_topic_dropped": {
                name: sum(1 for t in turns if not t[name]) for name in thresholds
            },
            "machine": scifact.machine_info(),
            "command": "python bench/calibration.py " + " ".join(sys.argv[1:]),
        }
    finally:
        app.close()


def render(r: Mapping[str, Any]) -> str:
    cal = r["calibration"]
    s = cal["summary"]
    lines = [
        "minScore auto on SciFact" + ("  [PARTIAL: not comparable]" if r["partial"] else ""),
        f"  command      {r['command']}",
        f"  code         vancetope-rag {r['machine'].get('commit')}",
        f"  machine      {scifact.machine_line(r['machine'])}",
        f"  corpus       {r['documents']} documents, {r['chunks']} chunks, {r['queries']} "
        f"queries, mode {r['mode']}",
        f"  probes       {len(cal['scores'])} best cosines: "
        + "  ".join(f"{k} {v:.3f}" for k, v in s.items())
        + f"  ({cal['seconds']:.1f} s)",
        f"  auto         minScore {cal['minScore']:.4f}",
        "",
        "  threshold   relevant top-5 kept      off-topic turns dropped (of 30)",
    ]
    for name in ("auto", "0.35"):
        k = r["relevant_top5_kept"][name]
        share = k["kept"] / k["of"] if k["of"] else float("nan")
        lines.append(
            f"  {name:<10}  {k['kept']:>4}/{k['of']:<4} {share:7.1%}        "
            f"{r['off_topic_dropped'][name]:>2}"
        )
    injected = [t for t in r["off_topic"] if t["auto"]]
    for t in injected:
        lines.append(f"  injected at auto: {t['turn']!r} (best cosine {t['best']:.3f})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="a store bench/scifact.py indexed (required to run)")
    parser.add_argument("--data", default=str(scifact.DEFAULT_DATA), help="SciFact dir")
    parser.add_argument("--mode", default="hybrid", choices=("dense", "hybrid"))
    parser.add_argument("--partial", action="store_true", help="accept unfinished indexing")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--render", metavar="JSON", default=None, help="report of a saved run")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(Path(args.render).read_text(encoding="utf-8"))))
        return 0
    if not args.store:
        parser.error("--store is required (a store bench/scifact.py indexed)")
    result = run(args)
    print(json.dumps(result, indent=2, default=str) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
