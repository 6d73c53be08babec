"""Asking the index: ``query`` (hits) and ``context`` (the turn's ``<rag-context>`` block)."""

from __future__ import annotations

from dataclasses import replace

import click

from vancetope_rag.cli.base import Ctx, RecipeRef, cli, emit, errors_to_exit, pass_ctx
from vancetope_rag.domain.block.citations import cite
from vancetope_rag.domain.block.lookalikes import clean_label
from vancetope_rag.domain.records import DEFAULT_RAG_NAME
from vancetope_rag.domain.retrieval.calibration import PROBE_TURNS, MinScore, parse_min_score
from vancetope_rag.domain.retrieval.hit_order import ORDER_TEXT, hit_numbers, order_of
from vancetope_rag.errors import InvalidInputError


class MinScoreType(click.ParamType["MinScore | None", object]):
    """``--min-score``: a cosine from -1 to 1, or ``auto``."""

    name = "auto|-1..1"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> MinScore | None:
        try:
            return parse_min_score(value, "--min-score")
        except InvalidInputError as exc:
            self.fail(exc.message, param, ctx)


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
    type=MinScoreType(),
    default=None,
    help="Cosine threshold from -1 to 1, or auto (the RAG's calibrated threshold); "
    "default: the project's rag.minScore.",
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
@click.option(
    "--relevance-cut",
    default=None,
    help="auto: only the hits likely relevant next to the best one (the RAG's calibrated "
    "gap); a number: that cosine gap; default: off (topK hits). The text output then says "
    "what the hits were cut by and each hit the cut dropped, with why.",
)
@click.option("--json", "as_json", is_flag=True, help="The hits as a JSON list (labelled).")
@click.option(
    "--explain",
    is_flag=True,
    help="With --json: an object of hits, cut (what the relevance cut cut by; by none without "
    "one) and dropped (each with its reason) instead of the list, as REST's test query "
    "answers (the text output says them whenever a cut applies).",
)
@pass_ctx
def query_cmd(
    c: Ctx,
    text: str,
    rag_name: str,
    top_k: int | None,
    min_score: MinScore | None,
    max_per_doc: int | None,
    mode: str | None,
    relevance_cut: str | None,
    as_json: bool,
    explain: bool,
) -> None:
    """Hits for TEXT in the order a turn uses (the reranker's, the fused order of a hybrid
    query, or the cosine's), each number labelled (cosine, fused, rerank).

    Options left out come from the settings cascade, as for the retriever a turn uses."""
    with errors_to_exit():
        app = c.app
        rag = app.rags.get(c.tenant, c.project, rag_name)
        retriever = app.as_retriever(c.tenant, c.project, rag=rag.name)
        result = retriever.query_rag_cut(
            rag,
            text,
            top_k=top_k,
            min_score=min_score,
            max_per_doc=max_per_doc,
            mode=mode,
            relevance_cut=relevance_cut,
        )
    hits = list(result.kept)
    if as_json:
        # The label and source a rag_query tool call shows for the same hits.
        cited = cite(hits, project_rag=rag.name == DEFAULT_RAG_NAME)
        labelled = [
            {"label": h.label, "source": clean_label(h.source), **h.hit.to_json()} for h in cited
        ]
        # A plain list unless asked: scripts parse it.
        emit(
            {
                "hits": labelled,
                "cut": result.cut_json(),
                "dropped": [d.to_json() for d in result.dropped],
            }
            if explain
            else labelled
        )
        return
    if hits:
        click.echo(f"{len(hits)} hits in the order the turn uses: {ORDER_TEXT[order_of(hits)]}")
    for i, h in enumerate(hits, 1):
        marker = " [summary]" if h.kind == "summary" else ""
        click.echo(f"#{i}  {h.path or h.source_ref}{marker}  {hit_numbers(h)}")
        click.echo("       " + h.text[:200].replace("\n", " "))
    if result.cut is not None and hits:  # no hits: nothing was cut
        click.echo(f"cut: {result.cut.keeps}")
    for d in result.dropped:
        click.echo(f"  dropped {d.hit.path or d.hit.source_ref}  {hit_numbers(d.hit)}: {d.reason}")


@cli.command("context")
@click.argument("text")
@click.option(
    "--recipe",
    type=RecipeRef(),
    metavar="NAME|FILE",
    default=None,
    help="A bundled recipe's name (docs-assistant, general-assistant, discussion) or a recipe "
    "file's path (one with a '/' or ending in .yaml/.yml).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Say on stderr why a block was or was not made, and list every candidate with why it "
    "was shown or dropped (threshold, cut, cap, topK, budget).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The decision as JSON: enabled, decidedBy, reason, hits (labelled) and block.",
)
@pass_ctx
def context_cmd(c: Ctx, text: str, recipe: str | None, explain: bool, as_json: bool) -> None:
    """The <rag-context> system message a turn with user message TEXT would get."""
    from vancetope_rag.recipes import load_recipe

    with errors_to_exit():
        params = load_recipe(recipe).rag if recipe else None
        decision = c.app.autoinject.decide(c.tenant, c.project, [text], params)
        verdicts = (
            c.app.autoinject.candidates(c.tenant, c.project, [text], decision, params)
            if explain
            else []
        )
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
                "dropped": [d.to_json() for d in decision.dropped],
                "block": decision.block,
                **({"candidates": [v.to_json() for v in verdicts]} if explain else {}),
            }
        )
        return
    if explain:
        click.echo(
            f"autoInject {'on' if decision.enabled else 'off'} (decided by "
            f"{decision.decided_by}): {decision.reason}",
            err=True,
        )
        if verdicts:
            order = ORDER_TEXT[order_of([v.hit for v in verdicts])]
            click.echo(f"candidates in the order the turn used, {order}:", err=True)
        for i, v in enumerate(verdicts, 1):
            state = "shown  " if v.shown else "dropped"
            why = "" if v.shown else f": {v.why}"
            click.echo(
                f"  #{i:<3} {state} {v.hit.path or v.hit.source_ref}  {hit_numbers(v.hit)}{why}",
                err=True,
            )
    if decision.block:
        click.echo(decision.block)


@cli.command("calibrate")
@click.option("--rag", "rag_name", default="_documents", show_default=True)
@click.option("--dry-run", is_flag=True, help="Measure and show, but keep the stored calibration.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def calibrate_cmd(c: Ctx, rag_name: str, dry_run: bool, as_json: bool) -> None:
    """Measure the RAG's noise floor now and store what minScore auto means for it.

    Embeds the shipped off-topic probe turns with the RAG's model, searches each against the
    RAG's chunks and shows the distribution of their best cosines with the threshold chosen
    from it (the indexer does the same when a RAG first has enough chunks, and again as it
    grows or is rebuilt)."""
    with errors_to_exit():
        app = c.app
        rag = app.rags.get(c.tenant, c.project, rag_name)
        measure = app.calibrator.measure if dry_run else app.calibrator.calibrate
        calibration = measure(rag)
        retriever = app.as_retriever(c.tenant, c.project, rag=rag.name)
        # the cascade's own value ("auto" or a number), not the plan's, which the stored
        # calibration resolved already: a dry run's floor would read as an explicit number
        params = retriever.params(app.settings.snapshot(c.tenant, c.project))
        applied = params.for_rag(replace(rag, calibration=calibration)).min_score
    probes = sorted(zip(calibration.scores, PROBE_TURNS, strict=True), reverse=True)
    data = {
        "rag": rag.name,
        "ragId": rag.id,
        "model": f"{rag.embedding_provider}:{rag.embedding_model}",
        **calibration.to_dict(),
        "previousMinScore": rag.calibration.min_score if rag.calibration else None,
        "summary": calibration.summary(),
        "saved": not dry_run,
        "applied": applied,
        "highestProbes": [{"score": s, "probe": t} for s, t in probes[:5]],
    }
    if as_json:
        emit(data)
        return
    click.echo(
        f"{rag.name} ({data['model']}, {calibration.chunks} chunks): the best cosine of each of "
        f"{len(calibration.scores)} off-topic probe turns"
    )
    click.echo("  " + "  ".join(f"{k} {v:.3f}" for k, v in calibration.summary().items()))
    for line in histogram(calibration.scores, calibration.min_score):
        click.echo("  " + line)
    for score, turn in probes[:3]:
        click.echo(f"  highest  {score:.3f}  {turn}")
    before = data["previousMinScore"]
    was = "not calibrated before" if before is None else f"was {before:.4f}"
    click.echo(
        f"minScore auto = {calibration.min_score:.4f} ({was}; "
        + ("not saved: --dry-run)" if dry_run else "saved)")
    )
    gap = calibration.gap
    click.echo(
        "relevance gap (relevanceCut auto) = "
        + (
            "none (no pseudo-query had a background)"
            if gap is None
            else f"{gap:.4f} from {len(calibration.spreads)} pseudo-queries of the RAG's own "
            "documents"
        )
    )
    if calibration.rerank is not None:
        cut = calibration.rerank
        click.echo(
            f"relevance cut with reranker {cut.reranker}: keeps hits {cut.describe()} "
            f"({cut.rule}, separation {cut.separation:.2f} over {len(cut.sources)} "
            "pseudo-queries)"
        )
    elif calibration.rerank_unmeasurable is not None:
        click.echo(f"relevance cut with the reranker: {calibration.rerank_unmeasurable.describe()}")
    if applied != calibration.min_score:
        click.echo(
            f"note: this project's turns use minScore {applied}: an explicit number in the "
            "cascade (recipe, rag.minScore or RAG_RETRIEVAL_MIN_SCORE) wins over auto"
        )


def histogram(scores: tuple[float, ...], threshold: float, bins: int = 8) -> list[str]:
    """A text histogram of ``scores`` with the bin that holds ``threshold`` marked."""
    low, high = min(scores), max(scores)
    width = (high - low) / bins or 1.0
    counts = [0] * bins
    for s in scores:
        counts[min(bins - 1, int((s - low) / width))] += 1
    lines = []
    for i, n in enumerate(counts):
        start = low + i * width
        mark = " <- minScore" if start <= threshold < start + width else ""
        lines.append(f"{start:6.3f} .. {start + width:6.3f}  {'#' * n:<{max(counts)}} {n}{mark}")
    if threshold >= high:
        lines.append(f"{'':16}minScore {threshold:.3f} is above every probe")
    return lines
