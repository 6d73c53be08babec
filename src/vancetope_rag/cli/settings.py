"""``settings get`` / ``settings set``: cascade settings per tenant or project."""

from __future__ import annotations

import json

import click

from vancetope_rag.cli.base import Ctx, cli, errors_to_exit, fail, pass_ctx


@cli.group("settings")
def settings_group() -> None:
    """Cascade settings (rag.*, ai.embedding.*) per tenant or project."""


@settings_group.command("get")
@click.argument("key", required=False)
@click.option("--scope", type=click.Choice(["tenant", "project", "effective"]), default="effective")
@pass_ctx
def settings_get(c: Ctx, key: str | None, scope: str) -> None:
    """Show KEY (or every key); secrets are masked."""
    with errors_to_exit():
        settings = c.app.settings
        out = {}
        for k in [key] if key else settings.keys():
            if scope == "tenant":
                out[k] = settings.get_public(c.tenant, None, k)
            elif scope == "project":
                out[k] = settings.get_public_as_set(c.tenant, c.project, k)
            else:
                out[k] = settings.get_public(c.tenant, c.project, k)
    for k, v in out.items():
        click.echo(f"{k} = {json.dumps(v, default=str)}")


@settings_group.command("set")
@click.argument("key")
@click.argument("value", required=False)
@click.option("--scope", type=click.Choice(["tenant", "project"]), default="project")
@click.option("--unset", is_flag=True, help="Remove the value at this scope.")
@pass_ctx
def settings_set(c: Ctx, key: str, value: str | None, scope: str, unset: bool) -> None:
    """Set KEY to VALUE at --scope (project by default)."""
    if value is None and not unset:
        fail("give a VALUE, or --unset to remove the setting", 2)
    with errors_to_exit():
        project = None if scope == "tenant" else c.project
        c.app.settings.set(c.tenant, project, key, None if unset else value)
        shown = c.app.settings.get_public(c.tenant, project, key)
    click.echo(f"{key} = {json.dumps(shown, default=str)} ({scope})")
