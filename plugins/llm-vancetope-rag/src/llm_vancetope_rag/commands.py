"""``llm rag status | import | index | query``: our CLI's own commands under ``llm``.

The group loads them only when ``llm rag …`` runs, so ``llm --help`` and every other llm
command never import vancetope-rag's CLI (nor LlamaIndex behind it).
"""

from __future__ import annotations

import click

from llm_vancetope_rag.host import DEFAULT_ID, ENV_PROJECT, ENV_STORE, ENV_TENANT

COMMANDS = ("status", "import", "index", "query")


class RagGroup(click.Group):
    """A group whose commands are ``vancetope-rag``'s, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        from vancetope_rag.cli import cli as ours

        return ours.commands[cmd_name]


@click.group(cls=RagGroup)
@click.option("--store", envvar=ENV_STORE, help="Store URI. Default: ./vancetope-rag.db")
@click.option("--tenant", envvar=ENV_TENANT, default=DEFAULT_ID, show_default=True)
@click.option("--project", envvar=ENV_PROJECT, default=DEFAULT_ID, show_default=True)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def rag(ctx: click.Context, store: str | None, tenant: str, project: str, verbose: int) -> None:
    """The vancetope-rag project index: status, import, index, query."""
    # The same context object our CLI's group makes: its commands find it by type.
    from vancetope_rag.cli.base import Ctx, check_ident
    from vancetope_rag.cli.logs import configure_logging

    configure_logging(verbose, "text")
    ctx.obj = Ctx(
        store, check_ident(tenant, "--tenant"), check_ident(project, "--project"), verbose
    )
    ctx.call_on_close(ctx.obj.close)
