"""The project's documents: ``documents list`` and ``documents delete``."""

from __future__ import annotations

import click

from vancetope_rag.cli.base import Ctx, cli, emit, errors_to_exit, pass_ctx
from vancetope_rag.domain.records import IndexState


@cli.group("documents")
def documents_group() -> None:
    """List the project's documents, or delete some (their chunks go at once)."""


@documents_group.command("list")
@click.option(
    "--state",
    type=click.Choice([s.value for s in IndexState]),
    default=None,
    help="Only documents in this index state.",
)
@click.option("--prefix", default=None, help="Only documents whose path starts with this.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def documents_list(c: Ctx, state: str | None, prefix: str | None, as_json: bool) -> None:
    """One line a document: path, index state, id (what `files visualize --document-id`
    takes), and why it failed or needs attention."""
    with errors_to_exit():
        docs = c.app.documents.list_documents(c.tenant, c.project, path_prefix=prefix)
    if state is not None:
        docs = [d for d in docs if d.index_state.value == state]
    rows = [
        {
            "id": d.id,
            "path": d.path,
            "state": d.index_state.value,
            "queued": d.rag_dirty,
            "error": d.index_last_error,
            "extractionError": d.extraction_error,
            "imported": d.import_origin is not None,
        }
        for d in docs
    ]
    if as_json:
        emit({"total": len(rows), "documents": rows})
        return
    for row in rows:
        queued = " (queued)" if row["queued"] else ""
        line = f"{row['path']}\t{row['state']}{queued}\t{row['id']}"
        why = row["error"] or row["extractionError"]
        if why:
            line += f"\t{why}"
        click.echo(line)
    click.echo(f"{len(rows)} documents", err=True)


@documents_group.command("delete")
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def documents_delete(c: Ctx, paths: tuple[str, ...], as_json: bool) -> None:
    """Delete the documents at PATHS (project paths, e.g. documents/notes/a.md) and their
    chunks. Every path is checked first: one that names no document deletes nothing."""
    with errors_to_exit():
        deleted = c.app.documents.delete_paths(c.tenant, c.project, list(paths))
    if as_json:
        emit({"deleted": [d.path for d in deleted]})
        return
    for doc in deleted:
        click.echo(f"deleted {doc.path}")
