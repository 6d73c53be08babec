"""Store administration: ``init`` prepares a store for production (collections, indexes);
``prepare`` readies the embedding providers of this machine; ``copy`` moves everything a
store holds into another one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from vancetope_rag.cli.base import Ctx, check_ident, cli, emit, errors_to_exit, pass_ctx
from vancetope_rag.domain.records import IndexStatus

if TYPE_CHECKING:
    from vancetope_rag.services.store_copy import CopyReport


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
@click.option(
    "--prune",
    is_flag=True,
    help="MongoDB Atlas: drop the search indexes of dimensions no RAG uses (listed as "
    "DROPPED); Free and Flex clusters allow only a few.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the index statuses as JSON.")
@pass_ctx
def init_cmd(
    c: Ctx,
    wait: bool,
    timeout_s: float,
    dimensions: tuple[int, ...],
    prune: bool,
    as_json: bool,
) -> None:
    """Create collections and indexes (MongoDB Atlas: one chunk collection per embedding
    dimension with its vector and full-text search indexes) for every dimension of the RAG
    catalog; migrate an older layout. Safe to run on every deployment.

    The embedded SQLite store needs no init (its schema is made on open); it accepts it.
    """
    with errors_to_exit():
        statuses = c.app.init_store(
            dimensions=dimensions, wait=wait, timeout_s=timeout_s, prune=prune
        )
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


@cli.command("prepare")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def prepare_cmd(c: Ctx, as_json: bool) -> None:
    """Ready the in-process embedding model ahead of the first chat turn: export it to ONNX,
    check the export against torch and measure which backend is faster here (stored in
    VANCETOPE_RAG_EMBEDDED_CACHE_DIR), and time the SQLite vector cache's kernels for
    384-dimensional rows (stored in VANCETOPE_RAG_KERNEL_CACHE_DIR); a server would otherwise
    do both in the background."""
    from vancetope_rag.app import vector_kernels

    with errors_to_exit():
        done = c.app.embeddings.prepare()
        # the embedded model's dimension; a RAG of another one is measured at its first load
        kernels = vector_kernels(c.app.store, prepare_dim=384)
    if as_json:
        emit({**done, **({"vectorPass": [k.to_json() for k in kernels]} if kernels else {})})
        return
    for name, line in done.items():
        click.echo(f"{name}: {line}")
    for choice in kernels:
        click.echo(choice.describe())


def _summary_lines(report: CopyReport) -> list[str]:
    found, written, present = report.found, report.written, report.present
    rows = [
        ("projects", found.projects, written.projects, present.projects),
        ("settings", found.settings, written.settings, present.settings),
        ("RAGs", found.rags, written.rags, present.rags),
        ("documents", found.documents, written.documents, present.documents),
        ("chunks", found.chunks, written.chunks, present.chunks),
        (
            "cached embeddings",
            found.cached_embeddings,
            written.cached_embeddings,
            present.cached_embeddings,
        ),
    ]
    if report.dry_run:
        lines = ["dry run: nothing written; the source holds"]
        lines += [f"  {name:<18} {n}" for name, n, _, _ in rows]
    else:
        lines = [f"  {'':<18} {'source':>10} {'written':>10} {'already':>10}"]
        lines += [f"  {name:<18} {n:>10} {w:>10} {p:>10}" for name, n, w, p in rows]
    if not report.cache_copied:
        lines.append("the embedding cache is copied only by a copy of the whole store")
    if report.requeued:
        lines.append(
            f"{report.requeued} document(s) were being indexed at the source: queued at the "
            "target, its indexer does them again"
        )
    return lines


def _refuse_group_options(ctx: click.Context) -> None:
    """``vancetope-rag --tenant t copy …`` would copy every tenant (copy's own options come
    after its name; ``--store`` names no side of a copy): say so instead of guessing."""
    group = ctx.parent
    if group is None:
        return
    given = [
        f"--{name}"
        for name in ("store", "tenant", "project")
        if group.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} before `copy` choose nothing for it: name the stores with "
            "--from and --to, and put --tenant / --project after `copy`",
            ctx,
        )


@cli.command("copy")
@click.option("--from", "source", required=True, metavar="URI", help="The store to copy from.")
@click.option("--to", "target", required=True, metavar="URI", help="The store to copy into.")
@click.option("--tenant", "tenant_id", default=None, help="Copy only this tenant's projects.")
@click.option(
    "--project",
    "project_id",
    default=None,
    help="Copy only projects with this id (with --tenant: that one project).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Documents or chunk sources read and written at a time (bounds memory).",
)
@click.option(
    "--dry-run", is_flag=True, help="Count what the source holds; open no target, write nothing."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def copy_cmd(
    ctx: click.Context,
    source: str,
    target: str,
    tenant_id: str | None,
    project_id: str | None,
    batch_size: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Copy a store into another without re-embedding: documents, settings, the RAG
    catalog, chunks with their vectors and the embedding cache, e.g. from
    sqlite:///rag.db to a production store. The target is initialized as needed.

    Safe to run again (an interrupted copy completes); a record the target holds otherwise
    stops the copy, nothing is overwritten. Stop the workers on the source first: what
    changes during the copy may be missed. A project with a rebuild in progress is refused.
    """
    _refuse_group_options(ctx)
    # Imported here: `--help` stays fast without the store and LlamaIndex.
    from vancetope_rag.app import open_store_copy
    from vancetope_rag.services.store_copy import CopySelection
    from vancetope_rag.store import redact_store_uri

    selection = CopySelection(
        tenant_id=None if tenant_id is None else check_ident(tenant_id, "--tenant"),
        project_id=None if project_id is None else check_ident(project_id, "--project"),
    )

    def say(line: str) -> None:
        click.echo(line, err=True)

    with errors_to_exit():
        say(
            f"copying {selection.describe()} from {redact_store_uri(source)} to "
            f"{redact_store_uri(target)}" + (" (dry run)" if dry_run else "")
        )
        with open_store_copy(
            source,
            target,
            selection=selection,
            batch_size=batch_size,
            progress=say,
            dry_run=dry_run,
        ) as copier:
            report = copier.run(dry_run=dry_run)
    if as_json:
        emit(report.to_json())
    else:
        for line in _summary_lines(report):
            click.echo(line)
    if report.found.total() == 0:
        say(f"warning: the source holds nothing to copy for {selection.describe()}")
    waiting = [s for s in report.indexes if not s.ready]
    if waiting:
        say(
            f"{len(waiting)} search index(es) of the target still building; queries on them "
            "fail until READY: run `init --wait` on the target"
        )
