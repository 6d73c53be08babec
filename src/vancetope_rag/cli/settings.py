"""``settings get`` / ``settings set``: cascade settings per tenant or project, each value
shown with where it comes from (project, tenant or the built-in default)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from vancetope_rag.cli.base import Ctx, cli, emit, errors_to_exit, fail, pass_ctx
from vancetope_rag.domain.retrieval.calibration import AUTO, resolve_min_score
from vancetope_rag.domain.retrieval.relevance import RELEVANCE_AUTO, resolve_gap

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp


@cli.group("settings")
def settings_group() -> None:
    """Cascade settings (rag.*, ai.embedding.*) per tenant or project."""


def _where(source: str, scope: str) -> str:
    """``(tenant)``, or ``(default; not set at tenant scope)`` when the scope asked about has
    no value of its own."""
    if scope in ("effective", source):
        return f"({source})"
    return f"({source}; not set at {scope} scope)"


@settings_group.command("get")
@click.argument("key", required=False)
@click.option(
    "--scope",
    type=click.Choice(["tenant", "project", "effective"]),
    default="effective",
    help="tenant: what projects inherit; project / effective: the value the project uses.",
)
@click.option("--json", "as_json", is_flag=True, help='{key: {"value", "source"}}.')
@pass_ctx
def settings_get(c: Ctx, key: str | None, scope: str, as_json: bool) -> None:
    """Show KEY (or every key) and where its value comes from; secrets are masked."""
    with errors_to_exit():
        settings = c.app.settings
        project = None if scope == "tenant" else c.project
        out = {
            k: settings.get_public_with_source(c.tenant, project, k)
            for k in ([key] if key else settings.keys())
        }
        used = applied_values(c.app, c.tenant, c.project) if scope == "effective" else {}
    if as_json:
        emit(
            {
                k: {"value": v, "source": source}
                | ({"applied": used[k][0], "appliedFrom": used[k][1]} if k in used else {})
                for k, (v, source) in out.items()
            }
        )
        return
    for k, (v, source) in out.items():
        if k in used:
            value, why = used[k]
            click.echo(f"{k} = {json.dumps(value, default=str)} ({why})")
            continue
        click.echo(f"{k} = {json.dumps(v, default=str)} {_where(source, scope)}")


def applied_values(app: RagApp, tenant: str, project: str) -> dict[str, tuple[object, str]]:
    """The retrieval settings as a turn of the project applies them, each with where its value
    comes from: an empty setting's engine default (``5``, ``default``), ``auto`` as the
    number the RAG's calibration gives (``0.8265``, ``auto, calibrated 2026-12-06``)."""
    snapshot = app.settings.snapshot(tenant, project)
    params = app.autoinject.params(tenant, project, None, snapshot)
    rag = app.project_rags.find_default_rag(tenant, project)
    calibration = rag.calibration if rag is not None else None
    when = (
        "not calibrated yet"
        if calibration is None
        else f"calibrated {calibration.calibrated_at:%Y-%m-%d}"
        if calibration.calibrated_at is not None
        else "calibrated"
    )

    def source(key: str, fallback: str = "default") -> str:
        _, where = app.settings.get_public_with_source(tenant, project, key)
        return fallback if where == "default" else where

    def auto(key: str) -> str:
        where = source(key, "")
        return f"{where + ': ' if where else ''}auto, {when}"

    out: dict[str, tuple[object, str]] = {
        "rag.topK": (params.top_k, source("rag.topK")),
        "rag.maxPerDocument": (params.max_per_doc, source("rag.maxPerDocument")),
        "rag.autoInject.maxTokens": (params.max_tokens, source("rag.autoInject.maxTokens")),
    }
    if params.min_score == AUTO:
        threshold = resolve_min_score(AUTO, calibration)
        out["rag.minScore"] = (threshold, auto("rag.minScore"))
    else:
        out["rag.minScore"] = (params.min_score, source("rag.minScore"))
    if params.relevance_cut == RELEVANCE_AUTO:
        gap = resolve_gap(RELEVANCE_AUTO, calibration.gap if calibration else None, params.mode)
        shown: object = "off" if gap is None else gap
        note = auto("rag.autoInject.relevanceCut")
        out["rag.autoInject.relevanceCut"] = (
            shown,
            f"{note}; the relevance gap in {params.mode} mode" if gap is not None else note,
        )
    return out


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
        shown, source = c.app.settings.get_public_with_source(c.tenant, project, key)
        used, used_from = c.app.settings.get_public_with_source(c.tenant, c.project, key)
    # A tenant value the current project overrides is not what that project uses: say so.
    note = ""
    if scope == "tenant" and used_from == "project":
        note = f"; project {c.project!r} overrides it with {json.dumps(used, default=str)}"
    if unset:
        # What the scope falls back to, said as inherited: never labelled as set here.
        shown_text = json.dumps(shown, default=str)
        click.echo(f"{key} unset at {scope} scope; now {shown_text} (from {source}){note}")
        return
    click.echo(f"{key} = {json.dumps(shown, default=str)} ({source}){note}")
