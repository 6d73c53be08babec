"""``vancetope-rag`` command line: a thin layer over :class:`vancetope_rag.app.RagApp`."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from vancetope_rag.errors import RagError

F = TypeVar("F", bound=Callable[..., Any])

MAX_IMPORT_BYTES = 50 * 1024 * 1024


class Ctx:
    """Options shared by every command; the app is opened lazily, once."""

    def __init__(self, store: str | None, tenant: str, project: str, verbose: int) -> None:
        self.store = store
        self.tenant = tenant
        self.project = project
        self.verbose = verbose
        self._app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:
            from vancetope_rag.app import RagApp
            from vancetope_rag.config import EngineConfig

            overrides = {"store": self.store} if self.store else {}
            config = EngineConfig(**overrides)  # type: ignore[arg-type]
            self._app = RagApp.open(config)
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@contextmanager
def errors_to_exit() -> Iterator[None]:
    try:
        yield
    except RagError as exc:
        fail(exc.message)
    except (ValueError, OSError) as exc:  # pydantic config errors, unreadable files
        fail(str(exc))


def emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _check_ident(value: str, what: str) -> str:
    if not value or not value.strip() or len(value) > 200 or any(c in value for c in "\x00/\\"):
        raise click.BadParameter(f"{what} must be 1-200 characters without '/', '\\' or NUL")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    envvar="VANCETOPE_RAG_STORE",
    help="Store URI (sqlite:///path/rag.db or mongodb://…). Default: ./vancetope-rag.db",
)
@click.option("--tenant", envvar="VANCETOPE_RAG_TENANT", default="default", show_default=True)
@click.option("--project", envvar="VANCETOPE_RAG_PROJECT", default="default", show_default=True)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, store: str | None, tenant: str, project: str, verbose: int) -> None:
    """Project RAG: import documents, index them, query, and build the <rag-context> block."""
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("httpx", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    ctx.obj = Ctx(
        store, _check_ident(tenant, "--tenant"), _check_ident(project, "--project"), verbose
    )
    ctx.call_on_close(ctx.obj.close)


pass_ctx = click.make_pass_decorator(Ctx)


def _ensure_running(c: Ctx) -> None:
    app = c.app
    project = app.store.control.get_project(c.tenant, c.project)
    if project is None or project.status.value != "RUNNING":
        app.lifecycle.bring(c.tenant, c.project)


def _require_embeddings(c: Ctx) -> None:
    if not c.app.rags.is_embedding_enabled(c.tenant, c.project):
        fail(
            f"embeddings are off for tenant {c.tenant!r} (ai.embedding.provider=none); enable "
            "them with: vancetope-rag settings set ai.embedding.provider embedded --scope tenant"
        )
    # A misconfigured provider (no key, unknown name, missing extra) is an error here, not
    # a silent "indexed 0": the scheduler only warns and skips such projects.
    rag = c.app.project_rags.ensure_default_rag(c.tenant, c.project, strict=True)
    if rag is not None:
        c.app.rags.model_for(rag)


# -- import ------------------------------------------------------------------------------


def _walk(root: Path) -> Iterator[tuple[str, Path | None, str | None]]:
    """(relative path, file or None, skip reason or None), sorted, hidden entries skipped."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if name.startswith("."):
                continue
            if full.is_symlink():
                yield rel, None, "symbolic link (not followed)"
            elif not full.is_file():
                yield rel, None, "not a regular file"
            else:
                yield rel, full, None


@cli.command("import")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--prefix", default="documents/", show_default=True, help="Path prefix in the project."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@pass_ctx
def import_cmd(c: Ctx, directory: Path, prefix: str, as_json: bool) -> None:
    """Import the files of DIRECTORY as project documents (changed files only)."""
    from vancetope_rag.domain.eligibility import guess_mime_type, is_textual
    from vancetope_rag.extract import extract_text

    if prefix and not prefix.endswith("/"):
        prefix += "/"
    counts = {"created": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    skipped: list[dict[str, str]] = []
    with errors_to_exit():
        app = c.app
        _ensure_running(c)
        for rel, full, reason in _walk(directory):
            path = prefix + rel
            if full is not None and reason is None:
                try:
                    size = full.stat().st_size
                    if size > MAX_IMPORT_BYTES:
                        raise RagError(f"larger than {MAX_IMPORT_BYTES // (1024 * 1024)} MiB")
                    mime = guess_mime_type(rel)
                    extracted = extract_text(
                        full.read_bytes(),
                        path=rel,
                        mime_type=mime,
                        max_chars=app.config.extract_max_chars,
                        registry=app.extractors,
                    )
                    stored_mime = mime if is_textual(mime) else "text/plain"
                    result = app.documents.upsert_by_path(
                        c.tenant, c.project, path, extracted.text, mime_type=stored_mime
                    )
                    counts[result.action] += 1
                    continue
                except (RagError, OSError) as exc:
                    reason = exc.message if isinstance(exc, RagError) else str(exc)
            counts["skipped"] += 1
            skipped.append({"path": rel, "reason": reason or "unknown"})
    if as_json:
        emit({**counts, "skippedFiles": skipped})
        return
    for s in skipped:
        click.echo(f"skipped {s['path']}: {s['reason']}", err=True)
    click.echo(
        f"imported {directory}: {counts['created']} created, {counts['updated']} updated, "
        f"{counts['unchanged']} unchanged, {counts['skipped']} skipped"
    )


# -- index / worker ----------------------------------------------------------------------


@cli.command("index")
@click.option(
    "--until-idle", is_flag=True, help="Also wait out retry back-offs and others' leases."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@pass_ctx
def index_cmd(c: Ctx, until_idle: bool, as_json: bool) -> None:
    """Embed what needs it: run indexer ticks until nothing is waiting."""
    with errors_to_exit():
        app = c.app
        _ensure_running(c)
        _require_embeddings(c)
        sched = app.scheduler
        total_start = sched.pending()
        show_bar = not as_json and sys.stderr.isatty() and total_start > 0
        bar = (
            click.progressbar(length=total_start, label="indexing", file=sys.stderr)
            if show_bar
            else None
        )

        def on_tick(tick: Any, left: int) -> None:
            if bar is not None:
                bar.update(tick.indexed + tick.removed + tick.failed)

        if until_idle:
            result = sched.run_until_idle(on_tick=on_tick)
        else:
            result = sched.run_until_idle(on_tick=on_tick, stop_when_nothing_claimable=True)
        if bar is not None:
            bar.render_finish()
        failed_docs = [
            {"path": d.path, "state": d.index_state.value, "error": d.index_last_error}
            for d in app.documents.list_documents(c.tenant, c.project)
            if d.index_last_error and d.index_state.value in ("failed", "pending")
        ]
    summary = {**result.to_json(), "failed": len(failed_docs)}
    if as_json:
        emit({**summary, "failures": failed_docs})
    else:
        click.echo(
            f"indexed {summary['indexed']} documents ({summary['chunks']} chunks), "
            f"removed {summary['removed']}, failed {summary['failed']}; "
            f"{summary['embeddedTexts']} texts embedded, {summary['cacheHits']} from cache"
        )
        for f in failed_docs:
            click.echo(f"failed {f['path']} ({f['state']}): {f['error']}", err=True)
    if failed_docs:
        sys.exit(1)


@cli.command("worker")
@pass_ctx
def worker_cmd(c: Ctx) -> None:
    """Run the indexer scheduler in the foreground until SIGTERM / Ctrl-C."""
    import threading

    with errors_to_exit():
        app = c.app
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        app.scheduler.start()
        click.echo(f"worker {app.scheduler.worker_id} serving node {app.config.node_id}", err=True)
        while not stop.wait(0.5):
            if not app.scheduler.running:
                fail("the indexer thread stopped unexpectedly")
        app.scheduler.stop()


# -- query / context / status / reindex --------------------------------------------------


@cli.command("query")
@click.argument("text")
@click.option("--rag", "rag_name", default="_documents", show_default=True)
@click.option("--top-k", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--min-score", type=click.FloatRange(-1, 1), default=None)
@click.option("--max-per-doc", type=click.IntRange(1, 1000), default=None)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def query_cmd(
    c: Ctx,
    text: str,
    rag_name: str,
    top_k: int,
    min_score: float | None,
    max_per_doc: int | None,
    as_json: bool,
) -> None:
    """Hits for TEXT, best first."""
    with errors_to_exit():
        app = c.app
        rag = app.rags.get(c.tenant, c.project, rag_name)
        hits = app.rags.query(
            rag, text, top_k=top_k, min_score=min_score, max_per_doc=max_per_doc
        )
    if as_json:
        emit([h.to_json() for h in hits])
        return
    for h in hits:
        marker = " [summary]" if h.kind == "summary" else ""
        click.echo(f"{h.score:.3f}  {h.path or h.source_ref}{marker}")
        click.echo("       " + h.text[:200].replace("\n", " "))


@cli.command("context")
@click.argument("text")
@click.option("--recipe", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--explain", is_flag=True, help="Say on stderr why a block was or was not made.")
@pass_ctx
def context_cmd(c: Ctx, text: str, recipe: Path | None, explain: bool) -> None:
    """The <rag-context> system message a turn with user message TEXT would get."""
    from vancetope_rag.recipes import load_recipe

    with errors_to_exit():
        params = load_recipe(recipe).rag if recipe else None
        decision = c.app.autoinject.decide(c.tenant, c.project, [text], params)
    if explain:
        click.echo(
            f"autoInject {'on' if decision.enabled else 'off'} (decided by "
            f"{decision.decided_by}): {decision.reason}",
            err=True,
        )
    if decision.block:
        click.echo(decision.block)


@cli.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def status_cmd(c: Ctx, as_json: bool) -> None:
    """The project RAG's status (spec §7) with per-state document counts."""
    with errors_to_exit():
        status = c.app.project_rags.status(c.tenant, c.project)
    data = status.to_json()
    if as_json:
        emit(data)
        return
    if not status.exists:
        click.echo("no _documents RAG in this project")
    else:
        click.echo(
            f"_documents {data['ragId']}: {data['embeddingProvider']}:{data['embeddingModel']}, "
            f"{data['chunkCount']} chunks, created {data['createdAt']}"
        )
    click.echo("documents: " + ", ".join(f"{k} {v}" for k, v in data["documents"].items()))


@cli.command("reindex")
@click.option("--rebuild", is_flag=True, help="Drop and re-create with the current model first.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def reindex_cmd(c: Ctx, rebuild: bool, as_json: bool) -> None:
    """Queue every eligible document for the indexer."""
    with errors_to_exit():
        _ensure_running(c)
        result = c.app.project_rags.reindex(c.tenant, c.project, rebuild=rebuild)
    if as_json:
        emit(result.to_json())
    else:
        verb = "rebuilt the RAG and queued" if rebuild else "queued"
        click.echo(f"{verb} {result.documents_queued} documents; run `vancetope-rag index`")


# -- settings ----------------------------------------------------------------------------


@cli.group("settings")
def settings_group() -> None:
    """Cascade settings (rag.*, ai.embedding.*) per tenant or project."""


@settings_group.command("get")
@click.argument("key", required=False)
@click.option("--scope", type=click.Choice(["tenant", "project", "effective"]), default="effective")
@pass_ctx
def settings_get(c: Ctx, key: str | None, scope: str) -> None:
    """Show KEY (or every key); secrets are masked."""
    from vancetope_rag.domain.cascade import SETTINGS

    keys = [key] if key else sorted(SETTINGS)
    with errors_to_exit():
        out = {}
        for k in keys:
            if scope == "tenant":
                value = c.app.settings.get_public(c.tenant, None, k)
            elif scope == "project":
                _, project_vals = c.app.settings.scopes(c.tenant, c.project)
                from vancetope_rag.domain.cascade import mask_secret

                value = mask_secret(k, project_vals.get(k))
            else:
                value = c.app.settings.get_public(c.tenant, c.project, k)
            out[k] = value
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


def main() -> None:
    cli(prog_name="vancetope-rag")



# -- REST API / web UI -------------------------------------------------------------------

_SERVER_EXTRA = "the REST API needs the 'server' extra: pip install 'vancetope-rag[server]'"


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--with-indexer", is_flag=True, help="Also run the indexer scheduler thread.")
@pass_ctx
def serve_cmd(c: Ctx, host: str, port: int, with_indexer: bool) -> None:
    """Serve the REST API (spec §7) and the RAG web UI at /ui/<tenant>/<project>.

    Needs VANCETOPE_RAG_JWT_SECRET; callers send a JWT (see `vancetope-rag token`).
    """
    try:
        import uvicorn

        from vancetope_rag.api import create_api
    except ImportError:
        fail(_SERVER_EXTRA)
    with errors_to_exit():
        app = c.app
        api = create_api(app)
        if with_indexer:
            app.scheduler.start()
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"serving http://{shown}:{port} (UI: /ui/<tenant>/<project>); "
        f"indexer {'on' if with_indexer else 'off'}",
        err=True,
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(
            "warning: plain HTTP on a non-loopback address; put a TLS proxy in front, "
            "bearer tokens travel in every request",
            err=True,
        )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    # handler it found: make that a no-op so the indexer and store are closed on the way out.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    # Our own access log leaves out query strings (the UI accepts ?token=); uvicorn's would not.
    uvicorn.run(api, host=host, port=port, access_log=False, log_config=None)


@cli.command("token")
@click.option("--tenant", "for_tenant", default=None, help="Tenant (default: the global --tenant).")
@click.option(
    "--project",
    "for_projects",
    multiple=True,
    help="Project, repeatable; '*' = every project of the tenant (default: the global --project).",
)
@click.option("--subject", default="operator", show_default=True, help="The token's 'sub'.")
@click.option(
    "--ttl",
    type=click.IntRange(60, 30 * 86400),
    default=3600,
    show_default=True,
    help="Lifetime in seconds.",
)
@pass_ctx
def token_cmd(
    c: Ctx, for_tenant: str | None, for_projects: tuple[str, ...], subject: str, ttl: int
) -> None:
    """Print a JWT with WRITE on the project(s), signed with VANCETOPE_RAG_JWT_SECRET."""
    try:
        from vancetope_rag.api.auth import ALL_PROJECTS, issue_token
    except ImportError:
        fail(_SERVER_EXTRA)
    from vancetope_rag.config import EngineConfig

    tenant = _check_ident(for_tenant, "--tenant") if for_tenant else c.tenant
    projects = [p if p == ALL_PROJECTS else _check_ident(p, "--project") for p in for_projects]
    if not projects:
        projects = [c.project]
    with errors_to_exit():
        secret = EngineConfig().jwt_secret
        token = issue_token(
            secret.get_secret_value() if secret else "",
            subject=subject,
            tenant=tenant,
            projects=ALL_PROJECTS if ALL_PROJECTS in projects else projects,
            ttl_s=ttl,
        )
    click.echo(f"token for tenant {tenant!r}, projects {projects}, valid {ttl}s", err=True)
    click.echo(token)


if __name__ == "__main__":  # pragma: no cover
    main()
