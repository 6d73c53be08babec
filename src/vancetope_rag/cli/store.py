"""Store administration: ``init`` prepares a store for production (collections, indexes)."""

from __future__ import annotations

import click

from vancetope_rag.cli.base import Ctx, cli, emit, errors_to_exit, pass_ctx
from vancetope_rag.domain.records import IndexStatus


def _as_json(s: IndexStatus) -> dict[str, object]:
    return {
        "collection": s.collection,
        "index": s.name,
        "type": s.kind,
        "status": s.status,
        "ready": s.ready,
        "detail": s.detail,
    }


@cli.command("init")
@click.option("--wait", is_flag=True, help="Return only once every search index is READY.")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    help="Seconds --wait waits before giving up.",
)
@click.option(
    "--dimension",
    "dimensions",
    type=click.IntRange(1, 8192),
    multiple=True,
    help="Also prepare this embedding dimension (repeatable), e.g. 384 before the first RAG.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the index statuses as JSON.")
@pass_ctx
def init_cmd(
    c: Ctx, wait: bool, timeout_s: float, dimensions: tuple[int, ...], as_json: bool
) -> None:
    """Create collections and indexes (MongoDB Atlas: one chunk collection per embedding
    dimension with its vector and full-text search indexes) for every dimension of the RAG
    catalog; migrate an older layout. Safe to run on every deployment.

    The embedded SQLite store needs no init (its schema is made on open); it accepts it.
    """
    with errors_to_exit():
        statuses = c.app.init_store(dimensions=dimensions, wait=wait, timeout_s=timeout_s)
    if as_json:
        emit([_as_json(s) for s in statuses])
        return
    if not statuses:
        click.echo(
            "store ready (no RAG yet: indexes are made with the first RAG, or pass --dimension)"
        )
        return
    for s in statuses:
        detail = f"  {s.detail}" if s.detail else ""
        click.echo(f"{s.collection:<16} {s.name:<24} {s.kind:<13} {s.status}{detail}")
    waiting = [s for s in statuses if not s.ready]
    if waiting:
        click.echo(
            f"{len(waiting)} index(es) still building; queries on them fail until "
            "READY — run `init --wait` to wait for them",
            err=True,
        )
