"""``vancetope-rag`` command line: a thin layer over :class:`vancetope_rag.app.RagApp`.

One module per command group; each registers its commands on :data:`cli` when imported.
Commands reach data only through the app's services and map their errors to exit codes.
"""

from __future__ import annotations

from vancetope_rag.cli import documents, files, indexing, retrieval, server, settings, store
from vancetope_rag.cli.base import cli

__all__ = ["cli", "main"]

# Imported for their side effect: the commands they register on `cli`.
_COMMAND_MODULES = (documents, files, indexing, retrieval, server, settings, store)


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="vancetope-rag")
