"""Asking the index: ``query`` (hits) and ``context`` (the turn's ``<rag-context>`` block)."""

from __future__ import annotations

from pathlib import Path

import click

from vancetope_rag.cli.base import Ctx, FilePath, cli, emit, errors_to_exit, pass_ctx
from vancetope_rag.domain.citations import cite
from vancetope_rag.domain.lookalikes import clean_label
from vancetope_rag.domain.records import DEFAULT_RAG_NAME


@cli.command("query")
@click.argument("text")
@click.option("--rag", "rag_name", default="_documents", show_default=True)
@click.option(
    "--top-k",
    type=click.IntRange(1, 1000),
    default=None,
    help="Hits at most; default: the project's rag.topK (else 5).",
)
@click.option(
    "--min-score",
    type=click.FloatRange(-1, 1),
    default=None,
    help="Cosine threshold; default: the project's rag.minScore.",
)
@click.option(
    "--max-per-doc",
    type=click.IntRange(1, 1000),
    default=None,
    help="Hits per document at most; default: the project's rag.maxPerDocument.",
)
@click.option(
    "--mode",
    type=click.Choice(["dense", "hybrid"], case_sensitive=False),
    default=None,
    help="Retrieval mode; default: the project's rag.retrieval.mode setting.",
)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def query_cmd(
    c: Ctx,
    text: str,
    rag_name: str,
    top_k: int | None,
    min_score: float | None,
    max_per_doc: int | None,
    mode: str | None,
    as_json: bool,
) -> None:
    """Hits for TEXT, best first (the score shown is the cosine similarity).

    Options left out come from the settings cascade, as for the retriever a turn uses."""
    with errors_to_exit():
        app = c.app
        rag = app.rags.get(c.tenant, c.project, rag_name)
        retriever = app.as_retriever(c.tenant, c.project, rag=rag.name)
        hits = retriever.query_rag(
            rag, text, top_k=top_k, min_score=min_score, max_per_doc=max_per_doc, mode=mode
        )
    if as_json:
        # The label and source a rag_query tool call shows for the same hits.
        cited = cite(hits, project_rag=rag.name == DEFAULT_RAG_NAME)
        emit(
            [{"label": h.label, "source": clean_label(h.source), **h.hit.to_json()} for h in cited]
        )
        return
    for h in hits:
        marker = " [summary]" if h.kind == "summary" else ""
        ranks = ""
        if h.fused_score is not None:
            dense = f"#{h.dense_rank}" if h.dense_rank else "-"
            lexical = f"#{h.lexical_rank}" if h.lexical_rank else "-"
            ranks = f"  (dense {dense}, lexical {lexical})"
        click.echo(f"{h.score:.3f}  {h.path or h.source_ref}{marker}{ranks}")
        click.echo("       " + h.text[:200].replace("\n", " "))


@cli.command("context")
@click.argument("text")
@click.option("--recipe", type=FilePath(dir_okay=False, path_type=Path), default=None)
@click.option("--explain", is_flag=True, help="Say on stderr why a block was or was not made.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The decision as JSON: enabled, decidedBy, reason, hits (labelled) and block.",
)
@pass_ctx
def context_cmd(c: Ctx, text: str, recipe: Path | None, explain: bool, as_json: bool) -> None:
    """The <rag-context> system message a turn with user message TEXT would get."""
    from vancetope_rag.recipes import load_recipe

    with errors_to_exit():
        params = load_recipe(recipe).rag if recipe else None
        decision = c.app.autoinject.decide(c.tenant, c.project, [text], params)
    if as_json:
        cited = cite(list(decision.hits), project_rag=True)
        hits = [
            {"label": h.label, "source": clean_label(h.source), **h.hit.to_json()} for h in cited
        ]
        emit(
            {
                "enabled": decision.enabled,
                "decidedBy": decision.decided_by,
                "reason": decision.reason,
                "hits": hits,
                "block": decision.block,
            }
        )
        return
    if explain:
        click.echo(
            f"autoInject {'on' if decision.enabled else 'off'} (decided by "
            f"{decision.decided_by}): {decision.reason}",
            err=True,
        )
    if decision.block:
        click.echo(decision.block)
