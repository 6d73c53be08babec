"""An indexer worker process for the multi-process sync tests (run as a script, not imported).

    python sync_worker.py --store URI --node NODE --worker ID --log FILE [--slow SECONDS]
        [--claim-ttl S] [--rounds N --ready PREFIX --go PREFIX] [--timeout S] [--started FILE]
        [--retired-grace S]

Opens the app on the shared store, logs every committed document (JSONL: round, doc id,
version, state) to --log, runs ``run_until_idle`` and prints the BatchResult totals as one
JSON line. With ``--rounds N`` it does that N times, each after touching ``<ready>-<round>``
and waiting for ``<go>-<round>`` to exist (so two workers start each round together).
``--slow`` replaces the ``hashing`` provider by one that sleeps before every model call
(same vectors); ``--started`` is touched when the first text embed call begins.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--claim-ttl", type=float, default=60.0)
    ap.add_argument("--slow", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ready")
    ap.add_argument("--go")
    ap.add_argument("--started")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--retired-grace", type=float, default=300.0)
    args = ap.parse_args()

    from llama_index.core.base.embeddings.base import Embedding

    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.default_plugins.hashing import HashingEmbedding, HashingProvider
    from vancetope_rag.embeddings import EmbeddingRegistry, EmbeddingSettings, LoadedModel
    from vancetope_rag.store.port.documents import CleanMark

    class SlowHashing(HashingEmbedding):
        delay: float = 0.0
        started: str | None = None

        def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
            if self.started:
                Path(self.started).touch()
            time.sleep(self.delay)
            return [self._vector(t) for t in texts]

        def _get_text_embedding(self, text: str) -> Embedding:
            return self._get_text_embeddings([text])[0]

    class SlowHashingProvider(HashingProvider):
        def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
            fast = super().load(settings, model)
            embed = SlowHashing(dimension=fast.dimension, delay=args.slow, started=args.started)
            return LoadedModel(
                provider=fast.provider,
                model=fast.model,
                dimension=fast.dimension,
                embed_model=embed,
                max_input_tokens=fast.max_input_tokens,
                tokenizer=fast.tokenizer,
            )

    registry = EmbeddingRegistry()
    slow = args.slow > 0 or args.started
    registry.register(SlowHashingProvider() if slow else HashingProvider())
    config = EngineConfig(
        store=args.store,
        node_id=args.node,
        indexer_batch_size=args.batch,
        claim_ttl_s=args.claim_ttl,
        retry_backoff_s=0.0,
        indexer_interval_s=0.05,
        indexer_initial_delay_s=0.0,
        retired_grace_s=args.retired_grace,
    )
    app = RagApp.open(config, embeddings=registry, worker_id=args.worker)

    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    control = app.store.control
    original = control.mark_rag_clean
    current = {"round": 0}

    def logged(mark: CleanMark) -> bool:
        ok = bool(original(mark))
        if ok:
            entry = {"round": current["round"], "doc": mark.document_id, "version": mark.version}
            log.write(json.dumps({**entry, "state": mark.state.value}) + "\n")
            log.flush()
        return ok

    control.mark_rag_clean = logged  # type: ignore[method-assign]

    for r in range(1, args.rounds + 1):
        current["round"] = r
        if args.ready and args.go:
            Path(f"{args.ready}-{r}").touch()
            deadline = time.monotonic() + 120
            while not Path(f"{args.go}-{r}").exists():
                if time.monotonic() > deadline:
                    sys.exit("never got the go signal")
                time.sleep(0.005)
        t0 = time.monotonic()
        result = app.scheduler.run_until_idle(timeout_s=args.timeout)
        out = {
            **result.to_json(),
            "round": r,
            "lostLease": result.lost_lease,
            "claimed": result.claimed,
            "seconds": round(time.monotonic() - t0, 3),
        }
        print(json.dumps(out), flush=True)
    app.close()


if __name__ == "__main__":
    main()
