#!/usr/bin/env python
"""Hybrid fusion parameters on SciFact: nDCG@10 over a grid of RRF k, lexical
weight and stopword handling, through the package's own retrieval path on an indexed store.

Needs a store that ``bench/scifact.py --store URI`` indexed (it reuses the ``bench`` tenant's
project whose SciFact documents are all indexed). Every setting is tuned on the test split:
the numbers pick a robust default, they are not a held-out estimate.

    python bench/scifact_fusion.py --store sqlite:////path/scifact.db
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scifact as sf
from _machine import machine_line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--data", default=str(sf.DEFAULT_DATA))
    ap.add_argument("--ks", default="10,20,30,60")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import vancetope_rag.store.inprocess.bm25 as lexical
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.domain.retrieval.ranking import FusionParams
    from vancetope_rag.store.port.types import RagScope

    data = Path(args.data)
    queries, qrels = sf.load_queries(data), sf.load_qrels(data / "qrels" / "test.tsv")
    corpus = sf.load_corpus(data)
    app = RagApp.open(EngineConfig(store=args.store, node_id="bench-fusion"))
    project = sf._indexed_project(app, "bench", len(corpus))
    if project is None:
        raise SystemExit("no indexed SciFact project in this store; run bench/scifact.py first")
    rag = app.project_rags.find_default_rag("bench", project)
    assert rag is not None
    cid = {
        d.id: d.path.rsplit("/", 1)[-1][:-4] for d in app.documents.list_documents("bench", project)
    }
    model = app.rags.model_for(rag).embed_model
    vectors = {q: model.get_query_embedding(queries[q]) for q in qrels}
    scope = RagScope.of(rag)

    def ndcg(top_k: int, fusion: FusionParams | None) -> float:
        run = {}
        for q in qrels:
            if fusion is None:
                hits = app.rags.query_vector(rag, vectors[q], top_k=top_k, max_per_doc=1)
            else:
                app.rags.retriever.fusion = fusion
                hits = app.rags.retriever.hybrid(
                    scope,
                    queries[q],
                    vectors[q],
                    top_k=top_k,
                    min_score=None,
                    max_per_doc=1,
                    filters=None,
                )
            run[q] = {cid[h.source_ref]: -float(i) for i, h in enumerate(hits)}
        return sf.evaluate(qrels, run)["ndcg@10"]

    print(f"dense                                nDCG@10 {ndcg(100, None):.4f}")
    stopwords = lexical.STOPWORDS
    print("stopwords  k     w_lex  nDCG@10 (top_k=100)  nDCG@10 (top_k=10)")
    for drop in (True, False):
        lexical.STOPWORDS = stopwords if drop else frozenset()
        for k in (float(x) for x in args.ks.split(",")):
            for w in (0.75, 1.0, 1.25) if k == 20 else (1.0,):
                f = FusionParams(k=k, lexical_weight=w)
                print(
                    f"{'dropped' if drop else 'kept':<10} {k:<5g} {w:<6} "
                    f"{ndcg(100, f):.4f}               {ndcg(10, f):.4f}",
                    flush=True,
                )
    lexical.STOPWORDS = stopwords
    print(machine_line())
    app.close()


if __name__ == "__main__":
    main()
