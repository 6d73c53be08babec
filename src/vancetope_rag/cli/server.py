"""Serving the REST API and web UI (``serve``), the chat proxy (``proxy``), and minting their
credentials (``token``, ``proxy-key``)."""

from __future__ import annotations

import errno
import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

import click

from vancetope_rag.cli.base import (
    Ctx,
    FilePath,
    RecipeRef,
    check_ident,
    cli,
    emit,
    errors_to_exit,
    fail,
    pass_ctx,
)

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
    /healthz and /readyz answer without one (probes for a load balancer). Logs one access
    line per request (INFO, shown without -v; the probes' and /metrics' at DEBUG).
    """
    try:
        import uvicorn

        from vancetope_rag.api import create_api
    except ImportError:
        fail(_SERVER_EXTRA)
    with errors_to_exit():
        app = c.app
        api = create_api(app)
    listener = _listen(host, port)  # before the indexer starts and anything says "serving"
    if with_indexer:
        with errors_to_exit():
            app.scheduler.start()
    indexer = "off"
    if with_indexer:
        indexer = "on" if app.scheduler.enabled else "off (RAG_INDEXER_ENABLED=false)"
    banner = f"serving {_base_url(host, port)} (UI: /ui/<tenant>/<project>); indexer {indexer}"
    _run(uvicorn, api, listener, host, port, banner, c.verbose)


def _base_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port``, or exit 1 naming why not (the port taken, the
    address not this machine's): bound before the server says it serves."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock: socket.socket | None = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        if sock is not None:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "the port is in use by another process: stop it or pass another --port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "the address is not one of this machine's: check --host"
        elif exc.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges): pass another --port"
        else:
            why = exc.strerror or str(exc)
        fail(f"cannot listen on {shown}: {why}")
    return sock


def _run(
    uvicorn: Any,
    asgi: Any,
    listener: socket.socket,
    host: str,
    port: int,
    banner: str,
    verbose: int,
) -> None:
    """Say what serves where (and warn of plain HTTP off loopback), then serve ``asgi`` with
    ``uvicorn`` on ``listener`` (bound already, by :func:`_listen`) until SIGINT/SIGTERM.
    The access lines are a server's output, as a worker's ticks: INFO without ``-v`` as
    with it; ``-vv`` adds the probes'."""
    if verbose == 0:
        logging.getLogger("vancetope_rag.access").setLevel(logging.INFO)
    click.echo(banner, err=True)
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
    from vancetope_rag.api.lingering import LingeringH11Protocol

    # Our own access log leaves out query strings (the UI accepts ?token=); uvicorn's would not.
    # Refusals close without a reset while the request's body still arrives (api.lingering).
    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        access_log=False,
        log_config=None,
        http=LingeringH11Protocol,
    )
    uvicorn.Server(config).run(sockets=[listener])


@cli.command("proxy")
@click.option(
    "--upstream",
    default=None,
    help="Base URL of the OpenAI-compatible upstream, with its /v1 "
    "(default: VANCETOPE_RAG_PROXY_UPSTREAM).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8081, show_default=True)
@click.option(
    "--keys",
    "keys_file",
    type=FilePath(exists=True, dir_okay=False),
    default=None,
    help="Callers' API-key file (default: VANCETOPE_RAG_PROXY_KEYS_FILE).",
)
@click.option(
    "--recipe",
    type=RecipeRef(),
    metavar="NAME|FILE",
    default=None,
    help="Recipe (a bundled one's name or a file's path) for callers whose key names none "
    "(default: VANCETOPE_RAG_PROXY_RECIPE).",
)
@click.option(
    "--placement",
    type=click.Choice(["separate", "merge"]),
    default=None,
    help="The block as its own system message, or merged into the caller's last one "
    "(default: VANCETOPE_RAG_PROXY_PLACEMENT, else separate).",
)
@click.option(
    "--with-indexer",
    is_flag=True,
    help="Also run the indexer scheduler thread (unless RAG_INDEXER_ENABLED=false).",
)
@pass_ctx
def proxy_cmd(
    c: Ctx,
    upstream: str | None,
    host: str,
    port: int,
    keys_file: str | None,
    recipe: str | None,
    placement: str | None,
    with_indexer: bool,
) -> None:
    """Serve an OpenAI-compatible chat proxy that adds project RAG (docs/proxy.md).

    Clients use http://HOST:PORT/p/<project>/v1 as their base URL and a proxy key
    (`vancetope-rag proxy-key`) or a JWT as their API key. Logs one access line per request
    (INFO, shown without -v; the probes' and /metrics' at DEBUG), as `serve`.
    """
    try:
        import uvicorn

        from vancetope_rag.proxy import ProxyConfig, create_proxy
    except ImportError:
        fail(_SERVER_EXTRA.replace("the REST API", "the proxy"))
    given: dict[str, Any] = {"upstream": upstream, "keys_file": keys_file, "recipe": recipe}
    given["placement"] = placement
    with errors_to_exit():
        config = ProxyConfig(**{k: v for k, v in given.items() if v is not None})
        app = c.app
        proxy = create_proxy(app, config)
    listener = _listen(host, port)  # before the indexer starts and anything says "proxying"
    if with_indexer:
        with errors_to_exit():
            app.scheduler.start()
    banner = f"proxying {_base_url(host, port)}/p/<project>/v1 -> {config.upstream}"
    _run(uvicorn, proxy, listener, host, port, banner, c.verbose)


def _grant_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--tenant`` and ``--project`` of what a credential grants (``token``, ``proxy-key``)."""
    command = click.option(
        "--project",
        "for_projects",
        multiple=True,
        help="Project, repeatable; '*' = every project of the tenant (default: the global "
        "--project).",
    )(command)
    return click.option(
        "--tenant", "for_tenant", default=None, help="Tenant (default: the global --tenant)."
    )(command)


def _granted(
    c: Ctx, for_tenant: str | None, for_projects: tuple[str, ...]
) -> tuple[str, list[str]]:
    """The tenant and projects a credential grants; ``[]``: the global --project."""
    tenant = check_ident(for_tenant, "--tenant") if for_tenant else c.tenant
    every = "*"  # every project of the tenant, in a token's claim and a key file alike
    return tenant, [p if p == every else check_ident(p, "--project") for p in for_projects]


@cli.command("proxy-key")
@click.option("--name", required=True, help="The key's name in the key file (logs, rates).")
@_grant_options
@click.option(
    "--recipe",
    default=None,
    help="A bundled recipe's name, or a recipe file's path relative to the key file.",
)
@click.option(
    "--requests-per-minute", type=click.IntRange(0, 1_000_000), default=None, help="0: no limit."
)
@pass_ctx
def proxy_key_cmd(
    c: Ctx,
    for_tenant: str | None,
    for_projects: tuple[str, ...],
    name: str,
    recipe: str | None,
    requests_per_minute: int | None,
) -> None:
    """Make a proxy API key: the key on stdout (hand it to the caller, it is shown once),
    its key-file entry (the hash only) on stderr."""
    import yaml

    from vancetope_rag.proxy.keys import ALL_PROJECTS, hash_key, new_key

    tenant, projects = _granted(c, for_tenant, for_projects)
    key = new_key()
    entry: dict[str, object] = {
        "name": name,
        "hash": hash_key(key),
        "tenant": tenant,
        "projects": ALL_PROJECTS if ALL_PROJECTS in projects else (projects or [c.project]),
    }
    if recipe:
        entry["recipe"] = recipe
    if requests_per_minute is not None:
        entry["requestsPerMinute"] = requests_per_minute
    click.echo("add this entry under 'keys:' in the proxy key file:", err=True)
    click.echo(yaml.safe_dump([entry], sort_keys=False).rstrip(), err=True)
    click.echo(key)


@cli.command("token")
@_grant_options
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

    tenant, projects = _granted(c, for_tenant, for_projects)
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
