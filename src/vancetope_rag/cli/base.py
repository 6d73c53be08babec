"""The ``vancetope-rag`` group, its global options and what every command shares: the lazily
opened app, error-to-exit-code mapping and JSON output."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import click

from vancetope_rag.cli.logs import LOG_FORMATS, configure_logging
from vancetope_rag.errors import RagError
from vancetope_rag.secrets import get_logger, redact

log = get_logger(__name__)

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp


class Ctx:
    """Options shared by every command; the app is opened lazily, once."""

    def __init__(self, store: str | None, tenant: str, project: str, verbose: int) -> None:
        self.store = store
        self.tenant = tenant
        self.project = project
        self.verbose = verbose
        self._app: RagApp | None = None

    @property
    def app(self) -> RagApp:
        if self._app is None:
            # Imported here: `--help` and `token` stay fast without LlamaIndex and the store.
            from vancetope_rag.app import RagApp
            from vancetope_rag.config import EngineConfig

            config = EngineConfig(store=self.store) if self.store else EngineConfig()
            self._app = RagApp.open(config)
        return self._app

    def bring_up(self, command: str) -> None:
        """Bring the project up unless it runs (the CLI's choice), with a notice on stderr.

        ``import``/``index``/``reindex`` on a closed, suspended or unknown project would
        otherwise do nothing useful: only running projects are indexed.
        """
        why = self.app.lifecycle.bring_unless_running(self.tenant, self.project)
        if why is not None:
            click.echo(f"notice: {why}; brought it up for {command}", err=True)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


class FilePath(click.Path):
    """``click.Path`` that refuses what no file name can hold as a usage error: ``click.Path``
    stats the value, and a NUL there raised a bare ``ValueError``, a lone surrogate a bare
    ``UnicodeEncodeError``."""

    def convert(
        self,
        value: str | os.PathLike[str],
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str | bytes | os.PathLike[str]:
        _refuse_unnameable(self, value, param, ctx)
        return super().convert(value, param, ctx)


class RecipeRef(click.ParamType[str]):
    """A ``--recipe``: a bundled recipe's name or a file's path (``load_recipe`` tells them
    apart). Refuses what no file name can hold, as :class:`FilePath` does, without a stat: a
    bundled name is no file."""

    name = "recipe"

    def convert(
        self,
        value: str | os.PathLike[str],
        param: click.Parameter | None,
        ctx: click.Context | None,
    ) -> str:
        _refuse_unnameable(self, value, param, ctx)
        return os.fspath(value)


def _refuse_unnameable(
    kind: click.ParamType[Any],
    value: str | os.PathLike[str],
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> None:
    if "\0" in os.fspath(value):
        kind.fail("a path cannot contain a NUL character", param, ctx)
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        kind.fail(f"{os.fspath(value)!a} cannot be a file name on this system", param, ctx)


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@contextmanager
def errors_to_exit() -> Iterator[None]:
    """Every error becomes ``error: <message>`` and exit code 1, never a traceback: a user
    can act on a RagError's message; anything else is a bug, shown in one line (its
    traceback is logged at debug level: run with -vv to see it)."""
    try:
        yield
    except RagError as exc:
        fail(redact(exc.message))
    except (ValueError, OSError) as exc:  # pydantic config errors, unreadable files
        fail(redact(str(exc)))
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        fail(f"internal error: {type(exc).__name__}; run with -vv for the details")


def emit(data: object) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def check_ident(value: str, what: str) -> str:
    """A tenant or project option, by the one id rule (:func:`check_id`); usage error else."""
    from vancetope_rag.domain.texts import check_id

    try:
        return check_id(value, what)
    except RagError as exc:
        raise click.BadParameter(exc.message) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    envvar="VANCETOPE_RAG_STORE",
    help="Store URI (sqlite:///path/rag.db or mongodb://…). Default: ./vancetope-rag.db",
)
@click.option("--tenant", envvar="VANCETOPE_RAG_TENANT", default="default", show_default=True)
@click.option("--project", envvar="VANCETOPE_RAG_PROJECT", default="default", show_default=True)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    show_default=True,
    envvar="VANCETOPE_RAG_LOG_FORMAT",
    help="Log lines on stderr: timestamped text, or one JSON object a line.",
)
@click.pass_context
def cli(
    ctx: click.Context, store: str | None, tenant: str, project: str, verbose: int, log_format: str
) -> None:
    """Project RAG: import documents, index them, query, and build the <rag-context> block."""
    configure_logging(verbose, log_format)
    ctx.obj = Ctx(
        store, check_ident(tenant, "--tenant"), check_ident(project, "--project"), verbose
    )
    ctx.call_on_close(ctx.obj.close)


pass_ctx = click.make_pass_decorator(Ctx)
