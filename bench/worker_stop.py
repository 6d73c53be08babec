#!/usr/bin/env python
"""How long a SIGTERM takes to end a worker during a PostgreSQL outage.

The scenario of ``tests/cli/test_worker_store_outage.py`` (``tests/worker_outage.py``: a
pgserver of its own, a batch in hand whose model call is held open, the server stopped
under the worker), timed from SIGTERM to exit, ``--runs`` times. ``--src`` runs another
source tree's CLI (``--src /path/to/old/src`` measures the code before the fix).

Target (issue 39): under 10 s with the default ``--stop-grace`` (5 s).

    python bench/worker_stop.py [--runs 3] [--src DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _machine import machine_line  # noqa: E402

from worker_outage import stop_during_outage  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", type=Path, default=HERE.parent / "src")
    parser.add_argument("--bound", type=float, default=300.0, help="kill after so long")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    took: list[float | None] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            took.append(stop_during_outage(Path(tmp), src=args.src, bound_s=args.bound).took)
    done = [t for t in took if t is not None]
    result = {
        "runs": args.runs,
        "src": str(args.src),
        "stopSeconds": [None if t is None else round(t, 2) for t in took],
        "median": round(statistics.median(done), 2) if done else None,
        "max": round(max(done), 2) if done else None,
        "outlived": len(took) - len(done),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(machine_line())
        print(
            f"SIGTERM to exit during the outage: median {result['median']} s, max "
            f"{result['max']} s over {len(done)} runs ({result['outlived']} outlived "
            f"{args.bound:g} s): {result['stopSeconds']}"
        )


if __name__ == "__main__":
    main()
