"""Serving the REST API and web UI (``serve``) and minting its tokens (``token``)."""

from __future__ import annotations

import signal

import click

from vancetope_rag.cli.base import Ctx, check_ident, cli, emit, errors_to_exit, fail, pass_ctx

_SERVER_EXTRA = "the REST API needs the 'server' extra: pip install 'vancetope-rag[server]'"


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option(
    "--with-indexer",
    is_flag=True,
    help="Also run the indexer scheduler thread (unless RAG_INDEXER_ENABLED=false).",
)
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
    indexer = "off"
    if with_indexer:
        indexer = "on" if app.scheduler.enabled else "off (RAG_INDEXER_ENABLED=false)"
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"serving http://{shown}:{port} (UI: /ui/<tenant>/<project>); indexer {indexer}",
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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {token, tenant, projects, subject, expiresInS} instead of the bare token.",
)
@pass_ctx
def token_cmd(
    c: Ctx,
    for_tenant: str | None,
    for_projects: tuple[str, ...],
    subject: str,
    ttl: int,
    as_json: bool,
) -> None:
    """Print a JWT with WRITE on the project(s), signed with VANCETOPE_RAG_JWT_SECRET."""
    try:
        from vancetope_rag.api.auth import ALL_PROJECTS, issue_token
    except ImportError:
        fail(_SERVER_EXTRA)
    from vancetope_rag.config import EngineConfig

    tenant = check_ident(for_tenant, "--tenant") if for_tenant else c.tenant
    projects = [p if p == ALL_PROJECTS else check_ident(p, "--project") for p in for_projects]
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
    if as_json:
        emit(
            {
                "token": token,
                "tenant": tenant,
                "projects": projects,
                "subject": subject,
                "expiresInS": ttl,
            }
        )
        return
    click.echo(f"token for tenant {tenant!r}, projects {projects}, valid {ttl}s", err=True)
    click.echo(token)
