"""``files visualize``: the ``files_visualize`` tool on the command line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from vancetope_rag.cli.base import Ctx, FilePath, cli, emit, errors_to_exit, fail, pass_ctx
from vancetope_rag.errors import RagError
from vancetope_rag.secrets import redact


@cli.group("files")
def files_group() -> None:
    """Look at one file without indexing it (the files_visualize tool)."""


@files_group.command("visualize")
@click.option("--file-path", "file_path", default=None, help="A file relative to the workspace.")
@click.option("--document-id", "document_id", default=None, help="A project document's id.")
@click.option(
    "--workspace",
    type=FilePath(exists=True, file_okay=False),
    default=None,
    help="The workspace folder --file-path is relative to. Default: the project's workspace "
    "(VANCETOPE_RAG_WORKSPACES_DIR/<tenant>/<project>) when there is one, else the current "
    "folder.",
)
@click.option("--offset", type=click.IntRange(min=0), default=None, help="Start here (a 'next').")
@click.option("--pages", default=None, help="Pages or sections to read, e.g. 3-4.")
@click.option("--vision", is_flag=True, help="Let the vision model look at the pages too.")
@click.option("--json", "as_json", is_flag=True, help="The tool's answer as JSON.")
@pass_ctx
def files_visualize(
    c: Ctx,
    file_path: str | None,
    document_id: str | None,
    workspace: str | None,
    offset: int | None,
    pages: str | None,
    vision: bool,
    as_json: bool,
) -> None:
    """A bounded, text-first reading of one file: its sections, the limits applied, and how
    to continue (--offset or --pages) when it was truncated. Exit 1 with the MM_BRIDGE_* code
    when the file cannot be read."""
    if (file_path is None) == (document_id is None):
        fail("give one of --file-path or --document-id", 2)
    with errors_to_exit(), _named_errors(as_json):
        bridge = c.app.bridge
        request = bridge.request(offset, pages, vision or None)
        if document_id is not None:
            answer = bridge.read_document(c.tenant, c.project, document_id, request)
        else:
            assert file_path is not None
            root = (
                Path(workspace)
                if workspace
                else c.app.workspace_root(c.tenant, c.project) or Path.cwd()
            )
            answer = bridge.read_file(c.tenant, c.project, root, file_path, request)
    if as_json:
        emit(answer)
        return
    _print(answer)


@contextmanager
def _named_errors(as_json: bool) -> Iterator[None]:
    """A refusal says its code (``MM_BRIDGE_VISION_NOT_CONFIGURED``…) and the extraction's
    cause; with ``--json`` as the tool's error object on stdout."""
    try:
        yield
    except RagError as exc:
        failure = {"error": redact(exc.message), "code": exc.code}
        cause = getattr(exc, "cause", None)
        if isinstance(cause, str):
            failure["cause"] = cause
        if as_json:
            emit(failure)
            sys.exit(1)
        because = f", cause {cause}" if isinstance(cause, str) else ""
        fail(f"{failure['error']} [{exc.code}{because}]")


def _print(answer: dict[str, Any]) -> None:
    for section in answer["sections"]:
        if section["title"]:
            click.echo(f"--- {section['title']} ---")
        click.echo(section["text"].rstrip("\n"))
    limits = answer["limits"]
    click.echo(
        f"{answer['chars']:,} of {answer['totalChars']:,} characters from offset "
        f"{answer['offset']:,}; limits: maxChars {limits['maxChars']:,}, visionMaxPages "
        f"{limits['visionMaxPages']}, maxFrames {limits['maxFrames']}",
        err=True,
    )
    if answer["truncatedReason"]:
        click.echo(f"truncated: {answer['truncatedReason']}", err=True)
    follow = answer.get("next")
    if follow:
        how = f"--offset {follow['offset']}" if "offset" in follow else f"--pages {follow['pages']}"
        click.echo(f"continue with {how}", err=True)
