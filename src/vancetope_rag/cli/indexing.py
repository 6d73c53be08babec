"""Getting documents in and indexed: ``import``, ``index``, ``worker``, ``reindex``, ``status``."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from vancetope_rag.cli import progress as terminal
from vancetope_rag.cli.base import Ctx, FilePath, cli, emit, errors_to_exit, fail, pass_ctx
from vancetope_rag.cli.progress import progress_lines, wait_for_rebuild
from vancetope_rag.domain.retrieval.calibration import (
    MIN_CALIBRATION_CHUNKS,
    UNCALIBRATED_MIN_SCORE,
)
from vancetope_rag.secrets import get_logger

if TYPE_CHECKING:
    from vancetope_rag.domain.heartbeats import IndexerStatus
    from vancetope_rag.services.importer import ImportSummary
    from vancetope_rag.services.indexing.scheduler import ProjectRagIndexScheduler, TickResult


#: The worker's own lines (it stopped, and why).
worker_log = get_logger("vancetope_rag.worker")


class _Interrupted(BaseException):
    """SIGINT or SIGTERM in an explicit indexer run; a BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` of the indexer swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise _Interrupted(signum)


@contextmanager
def claims_given_back_on_signal(scheduler: ProjectRagIndexScheduler) -> Iterator[None]:
    """Ctrl-C or SIGTERM of an indexer run in this process (``index``, ``reindex --wait``)
    gives the claims of the batch in hand back (pending again at once, not ``processing``
    until the lease expires), says so and exits 128 + the signal number."""
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except (_Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, _Interrupted) else signal.SIGINT
        for s in previous:  # a second Ctrl-C must not cut the give-back short
            signal.signal(s, signal.SIG_IGN)
        given = scheduler.give_back_claimed()
        try:
            kept = scheduler.releaser.retry()
        except Exception:  # the store may be what is failing; the lease frees them then
            kept = scheduler.releaser.pending
        name = signal.Signals(signum).name
        message = f"interrupted ({name}): gave back {given} claimed documents"
        if kept:
            message += (
                f"; {kept} could not be given back now, their lease "
                f"({scheduler.config.claim_ttl_s:g}s) frees them"
            )
        click.echo(f"\n{message}; run `vancetope-rag index` to go on", err=True)
        sys.exit(128 + signum)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@cli.command("import")
@click.argument("directory", type=FilePath(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--prefix", default="documents/", show_default=True, help="Path prefix in the project."
)
@click.option(
    "--dry-run", is_flag=True, help="Read everything, change nothing: say what would change."
)
@click.option(
    "--yes",
    is_flag=True,
    help="Delete also when more than half of this import's documents lost their file.",
)
@click.option(
    "--adopt",
    is_flag=True,
    help="Count documents under the prefix that were imported before imports recorded "
    "their folder as this import's (so their gone files are deleted too).",
)
@click.option("--no-prune", is_flag=True, help="Import only: keep documents whose file is gone.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@pass_ctx
def import_cmd(
    c: Ctx,
    directory: Path,
    prefix: str,
    dry_run: bool,
    yes: bool,
    adopt: bool,
    no_prune: bool,
    as_json: bool,
) -> None:
    """Sync the files of DIRECTORY to project documents: changed files are read again, a
    renamed file's document moves, and the documents of this import (DIRECTORY and
    --prefix) whose file is gone are deleted with their chunks. Documents of other imports,
    of the host and of tools are never deleted. A progress bar on a terminal.

    Exit 1 when more than half of this import's documents would be deleted without --yes
    (nothing is deleted then; the files were imported).
    """
    from vancetope_rag.services.importer import walk_directory

    with errors_to_exit():
        if not dry_run:
            c.bring_up("import")
        sources = list(walk_directory(directory))
        show_bar = not as_json and terminal.on_terminal() and bool(sources)
        with click.progressbar(
            length=max(len(sources), 1), label="importing", file=sys.stderr, hidden=not show_bar
        ) as bar:
            summary = c.app.importer.import_directory(
                c.tenant,
                c.project,
                directory,
                prefix=prefix,
                sources=sources,
                prune=not no_prune,
                adopt=adopt,
                yes=yes,
                dry_run=dry_run,
                on_file=lambda _: bar.update(1),
            )
    if as_json:
        emit(summary.to_json())
    else:
        _print_import(directory, summary)
    if summary.refused and not dry_run:
        fail(summary.refused)


def _print_import(directory: Path, summary: ImportSummary) -> None:
    would = "would be " if summary.dry_run else ""
    for s in summary.skipped_files:
        click.echo(f"skipped {s.path}: {s.reason}", err=True)
    for s in summary.failed_files:
        click.echo(f"failed {s.path}: {s.reason}", err=True)
    for s in summary.truncated_files:
        click.echo(f"truncated {s.path}: {s.reason}", err=True)
    for path in summary.over_limit:
        click.echo(
            f"over the limit {path}: only its first {summary.max_text_chars:,} characters will "
            "be indexed (VANCETOPE_RAG_MAX_TEXT_CHARS)",
            err=True,
        )
    for m in summary.moved_files:
        click.echo(f"{would}moved {m.old} -> {m.new}")
    if not summary.refused:
        for path in summary.deleted_paths:
            click.echo(f"{would}deleted {path} (its file is gone)")
    for kind, n in sorted(summary.by_type.items()):
        done = [f"{v} {k}" for k, v in n.to_json().items() if v]
        click.echo(f"  {kind}: {', '.join(done)}")
    over = f", {len(summary.over_limit)} over the text limit" if summary.over_limit else ""
    cut = f", {len(summary.truncated_files)} truncated" if summary.truncated_files else ""
    if summary.vision_frames:
        over += f", {summary.vision_frames} video frames described by the vision model"
    verb = "dry run of" if summary.dry_run else "imported"
    click.echo(
        f"{verb} {directory}: {summary.created} created, {summary.updated} updated, "
        f"{summary.moved} moved, {summary.deleted} deleted, {summary.unchanged} unchanged, "
        f"{summary.skipped} skipped, {summary.failed} failed{cut}{over}"
        + ("; nothing was changed" if summary.dry_run else "")
    )
    if summary.unadopted:
        click.echo(
            f"{summary.unadopted} documents under the prefix have no file in the folder but "
            "were imported before imports recorded their folder: kept; --adopt deletes them",
            err=True,
        )
    if summary.refused and summary.dry_run:
        click.echo(f"note: {summary.refused}", err=True)
    if summary.failed_files:
        click.echo(
            "failed files are documents in state 'failed', or keep the text of their last "
            "readable version (`status` lists them under 'needs attention'); fix them (or the "
            "settings, e.g. rag.extract.ocr) and import again",
            err=True,
        )


@cli.command("index")
@click.option(
    "--until-idle", is_flag=True, help="Also wait out retry back-offs and others' leases."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
@pass_ctx
def index_cmd(c: Ctx, until_idle: bool, as_json: bool) -> None:
    """Embed what needs it: run indexer ticks until nothing is waiting.

    A store that fails (full disk, locked, corrupt) ends the run with exit 1 and the store's
    message; --until-idle gives up after VANCETOPE_RAG_MAX_STORE_FAILURES failing ticks
    with nothing done in between, as `worker` does.

    Runs even when RAG_INDEXER_ENABLED=false: that switch only stops the background
    scheduler (worker, serve --with-indexer, plugin hosts), not an explicit run.
    """
    with errors_to_exit():
        app = c.app
        c.bring_up("index")
        # Embeddings off or a misconfigured provider is an error here, not a silent
        # "indexed 0": the scheduler only warns and skips such projects.
        rag = app.project_rags.indexable_rag(c.tenant, c.project)
        if not app.rags.index_ready(rag):  # the scheduler would skip the project quietly
            fail(
                f"the store's search indexes for dimension {rag.embedding_dimension} are not "
                "READY yet; run `vancetope-rag --store <uri> init --wait`, then index again"
            )
        sched = app.scheduler
        total_start = sched.pending()
        show_bar = not as_json and terminal.on_terminal() and total_start > 0
        failed_before = terminal.failed_documents(app)
        done = 0

        def on_tick(tick: TickResult, left: int) -> None:
            # done counts documents finished; a failed attempt is neither done (it is tried
            # again) nor failed until the document gives up: the store's count says that
            nonlocal done
            done += tick.indexed + tick.removed
            if bar is not None:
                failed = max(0, terminal.failed_documents(app) - failed_before)
                bar.show(done, failed, left)

        # a store that keeps failing raises its StoreError: exit 1 with its message
        with contextlib.ExitStack() as stack:
            bar = (
                stack.enter_context(terminal.WorkBar("indexing", total_start)) if show_bar else None
            )
            with claims_given_back_on_signal(sched):
                result = sched.run_until_idle(
                    on_tick=on_tick, stop_when_nothing_claimable=not until_idle
                )
        failures = [
            {"path": d.path, "state": d.index_state.value, "error": d.index_last_error}
            for d in app.documents.list_failures(c.tenant, c.project)
        ]
        # the provider went down, refused the settings or answers the wrong dimension: what
        # is left waits, attempts kept
        status = app.project_rags.status(c.tenant, c.project)
        paused = status.paused
        outage = (status.provider_circuit or {}).get("state") == "unreachable"
    summary = {**result.to_json(), "failed": len(failures), "paused": paused}
    if as_json:
        emit({**summary, "failures": failures})
    else:
        click.echo(
            f"indexed {summary['indexed']} documents ({summary['chunks']} chunks), "
            f"removed {summary['removed']}, failed {summary['failed']}; "
            f"{summary['embeddedTexts']} texts embedded, {summary['cacheHits']} from cache"
        )
        for f in failures:
            click.echo(f"failed {f['path']} ({f['state']}): {f['error']}", err=True)
        if paused:
            then = (
                "run `index` again once it answers (`worker` resumes by itself)"
                if outage
                else "no wait cures it: fix what it names, then run `index` again"
            )
            click.echo(
                f"error: indexing {paused}; the documents left keep their attempts: {then}",
                err=True,
            )
    if failures or paused:
        sys.exit(1)


@cli.command("worker")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics at http://<metrics-host>:<port>/metrics (default: off).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Interface of the metrics endpoint.",
)
@click.option(
    "--stop-grace",
    type=click.FloatRange(0, 3600),
    default=5.0,
    show_default=True,
    help="Seconds a batch in hand may take to finish after SIGTERM / Ctrl-C before its "
    "claims are given back (keep it under the supervisor's stop timeout: 10 s in Docker).",
)
@pass_ctx
def worker_cmd(c: Ctx, metrics_port: int | None, metrics_host: str, stop_grace: float) -> None:
    """Run the indexer scheduler in the foreground until SIGTERM / Ctrl-C.

    With RAG_INDEXER_ENABLED=false the worker says so on stderr and idles, indexing nothing,
    until it is stopped (exit 0): indexing can be paused without a process manager
    restarting a worker that quit. `vancetope-rag index` still indexes on demand.

    On SIGTERM / Ctrl-C a batch in hand gets --stop-grace seconds to finish; then its
    claims are given back (pending again at once, not `processing` until their lease
    expires) and the worker exits 0. Late writes of the abandoned batch are fenced out.

    Logs one line per indexer tick that did work (INFO, shown without -v). With
    --metrics-port it serves /metrics as `serve` does (VANCETOPE_RAG_METRICS_TOKEN
    guards it the same way).
    """
    if c.verbose == 0:  # a worker's log is its output: the tick lines are INFO
        logging.getLogger("vancetope_rag").setLevel(logging.INFO)
    with errors_to_exit():
        app = c.app
        stop = _StopSignal()
        signal.signal(signal.SIGTERM, stop.on_signal)
        signal.signal(signal.SIGINT, stop.on_signal)
        server = None
        if metrics_port is not None:
            from vancetope_rag.health import Readiness
            from vancetope_rag.metrics import serve_metrics

            token = app.config.metrics_token
            shown = f"[{metrics_host}]" if ":" in metrics_host else metrics_host
            try:
                server = serve_metrics(
                    app.metrics,
                    metrics_host,
                    metrics_port,
                    token=token.get_secret_value() if token else None,
                    ready=Readiness(app.store.control.check_ready).answer,
                )
            except OSError as exc:
                fail(
                    f"cannot serve /metrics on {shown}:{metrics_port}: "
                    f"{exc.strerror or exc}; pick another --metrics-port, or a "
                    "--metrics-host this machine has"
                )
            click.echo(
                f"metrics at http://{shown}:{metrics_port}/metrics (probes: /healthz, /readyz)",
                err=True,
            )
            if token is None and metrics_host not in ("127.0.0.1", "localhost", "::1"):
                click.echo(
                    "warning: /metrics is open on a non-loopback address; set "
                    "VANCETOPE_RAG_METRICS_TOKEN or keep it on a private network",
                    err=True,
                )
        try:
            _run_worker(c, stop, stop_grace)
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()


class _StopSignal(threading.Event):
    """Set by SIGTERM / Ctrl-C; remembers which, for the worker's last line."""

    signal_name = ""

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = self.signal_name or signal.Signals(signum).name
        self.set()


#: How long a stopping worker waits for the store to take back the claims of the batch in
#: hand (after --stop-grace): during an outage every call would wait the pool's 15 s.
GIVE_BACK_S = 1.0


def _run_worker(c: Ctx, stop: _StopSignal, grace_s: float) -> None:
    with errors_to_exit():
        app = c.app
        scheduler = app.scheduler
        scheduler.start()
        if not scheduler.enabled:
            click.echo(
                f"worker {scheduler.worker_id}: the background indexer is off "
                "(RAG_INDEXER_ENABLED=false); idling until SIGTERM / Ctrl-C",
                err=True,
            )
            while not stop.wait(0.5):
                pass
            worker_log.info("worker %s stopped (%s)", scheduler.worker_id, stop.signal_name)
            return
        click.echo(f"worker {scheduler.worker_id} serving node {app.config.node_id}", err=True)
        started = time.monotonic()
        while not stop.wait(0.5):
            if not scheduler.running:
                scheduler.stop(give_back_s=GIVE_BACK_S)  # gives back what claims it can
                reason = scheduler.fatal_error or "the indexer thread stopped unexpectedly"
                worker_log.error("worker %s stopped: %s", scheduler.worker_id, reason)
                fail(reason)
        # a batch still running after the grace is given back; its model call dies with the
        # process (a daemon thread), its late writes would be fenced out
        scheduler.stop(timeout=grace_s, give_back_s=GIVE_BACK_S)
        given = scheduler.given_back
        claims = (
            f"gave back {given} claimed documents"
            if scheduler.gave_back_in_time
            else "the store did not answer: the batch's claims left to their lease"
        )
        worker_log.info(
            "worker %s stopped (%s) after %.0fs; %s",
            scheduler.worker_id,
            stop.signal_name,
            time.monotonic() - started,
            claims,
            extra={"worker": scheduler.worker_id, "signal": stop.signal_name, "given_back": given},
        )


@cli.command("status")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def status_cmd(c: Ctx, as_json: bool) -> None:
    """The project RAG's status (spec §7): per-state document counts and the progress of the
    indexer and of a rebuild (the numbers REST's status shows)."""
    with errors_to_exit():
        status = c.app.project_rags.status(c.tenant, c.project)
    data = status.to_json()
    from vancetope_rag.app import vector_kernels

    runtime = c.app.embeddings.runtime()
    kernels = vector_kernels(c.app.store)
    if as_json:
        extra: dict[str, object] = {"embeddingRuntime": runtime} if runtime else {}
        extra |= {"vectorPass": [k.to_json() for k in kernels]} if kernels else {}
        emit({**data, **extra})
        return
    if not status.exists:
        why = f": {status.no_rag_reason}" if status.no_rag_reason else ""
        click.echo(f"no _documents RAG in this project{why}")
    else:
        click.echo(
            f"_documents {data['ragId']}: {data['embeddingProvider']}:{data['embeddingModel']}, "
            f"{data['chunkCount']} chunks, created {data['createdAt']}"
        )
    click.echo("documents: " + ", ".join(f"{k} {v}" for k, v in status.documents.items()))
    for name, line in runtime.items():
        click.echo(f"{name}: {line}")
    for choice in kernels:
        click.echo(choice.describe())
    if status.paused:
        click.echo(status.paused)
    for line in indexer_lines(status.indexer):
        click.echo(line)
    if status.exists:
        auto = data["minScoreAuto"]
        click.echo(
            f"minScore auto: not calibrated yet ({UNCALIBRATED_MIN_SCORE} until the RAG holds "
            f"{MIN_CALIBRATION_CHUNKS} chunks)"
            if auto is None
            else f"minScore auto: {auto['minScore']:.4f}, relevance gap "
            f"{'none' if auto.get('gap') is None else format(auto['gap'], '.4f')} (calibrated "
            f"over {auto['chunks']} chunks, {auto['calibratedAt']})"
        )
        if auto is not None and auto.get("rerank"):
            cut = auto["rerank"]
            click.echo(
                f"relevance cut with reranker {cut['reranker']}: keeps hits {cut['keeps']} "
                f"({cut['rule']}, separation {cut['separation']:.2f}; calibrated over "
                f"{cut['chunks']} chunks, {cut['calibratedAt']})"
            )
        elif auto is not None and auto.get("rerankUnmeasurable"):
            click.echo(f"relevance cut with the reranker: {auto['rerankUnmeasurable']['means']}")
    if status.model_profile:
        click.echo(f"pinned model profile: {profile_line(status.model_profile)}")
    if status.profile_note:
        click.echo(f"model profile: {status.profile_note}")
    if status.chunk_counting:
        click.echo(f"chunks sized by: {status.chunk_counting}")
    for line in progress_lines(status.progress):
        click.echo(line)
    if status.needs_attention_count:
        click.echo(
            f"needs attention: {status.needs_attention_count} (indexed from the last readable "
            "version of their file; fix the file and import again)"
        )
        for item in status.needs_attention:
            click.echo(f"  {item.path}: {item.error}")
        if status.needs_attention_count > len(status.needs_attention):
            click.echo(f"  … and {status.needs_attention_count - len(status.needs_attention)} more")


def profile_line(profile: dict[str, object]) -> str:
    """``dimension 768, window 512, query prefix 'query: ', document prefix 'passage: '``."""
    window = profile.get("window")
    parts = [
        f"dimension {profile['dimension']}",
        "window unknown (created before model profiles)" if window is None else f"window {window}",
    ]
    prefixes = [
        f"{name} prefix {profile[key]!r}"
        for name, key in (("query", "queryPrefix"), ("document", "documentPrefix"))
        if profile.get(key)
    ]
    return ", ".join(parts + (prefixes or ["no prefixes"]))


def indexer_lines(indexer: IndexerStatus | None) -> list[str]:
    """The status lines of the indexer: why nothing moves, and the live workers."""
    if indexer is None:
        return []
    lines = [indexer.note] if indexer.note else []
    if indexer.workers:
        shown = [
            f"{w.worker_id} (node {w.node_id}, version {w.version}, last tick "
            f"{w.last_tick.isoformat(timespec='seconds')})"
            for w in indexer.workers
        ]
        lines.append("indexer workers: " + ", ".join(shown))
    return lines


@cli.command("reindex")
@click.option(
    "--rebuild",
    is_flag=True,
    help="Build a new generation with the current embedding model beside the live one "
    "(which keeps answering) and switch to it when it is complete.",
)
@click.option("--wait", is_flag=True, help="With --rebuild: index here until the switch.")
@click.option("--cancel", is_flag=True, help="Cancel the running rebuild (live index kept).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def reindex_cmd(c: Ctx, rebuild: bool, wait: bool, cancel: bool, as_json: bool) -> None:
    """Queue every eligible document for the indexer, or rebuild onto the current model.

    --rebuild answers at once (status shows the progress); it is refused, and the index
    kept, when the current embedding settings cannot build the new generation (provider
    none or misconfigured) or a rebuild runs already. --wait runs the indexer in this
    process with a progress bar until the new generation is live (exit 1 if it fails).
    """
    if cancel and (rebuild or wait):
        fail("--cancel cannot be combined with --rebuild or --wait")
    if wait and not rebuild:
        fail("--wait goes with --rebuild")
    with errors_to_exit():
        if cancel:
            ended = c.app.project_rags.cancel_rebuild(c.tenant, c.project)
            if as_json:
                emit({"cancelled": True, "migration": ended.ref_json()})
            else:
                click.echo(
                    f"cancelled rebuild {ended.id} ({ended.to_model}); the live index "
                    f"({ended.from_model}) is unchanged"
                )
            return
        c.bring_up("reindex")
        result = c.app.project_rags.reindex(c.tenant, c.project, rebuild=rebuild)
        if wait:
            with claims_given_back_on_signal(c.app.scheduler):
                outcome = wait_for_rebuild(
                    c.app,
                    c.tenant,
                    c.project,
                    result.migration,
                    bar=not as_json and terminal.on_terminal(),
                )
    if as_json:
        emit({**result.to_json(), **({"outcome": outcome.to_json()} if wait else {})})
    elif result.migration is not None:
        m = result.migration
        click.echo(
            f"rebuild {m.id} started: {m.from_model} -> {m.to_model}, "
            f"{result.documents_queued} documents queued; the live index answers "
            "until the new one is complete"
        )
    else:
        verb = "created the RAG and queued" if rebuild else "queued"
        click.echo(f"{verb} {result.documents_queued} documents; run `vancetope-rag index`")
    if wait:
        if not as_json:
            for line in progress_lines(outcome):
                click.echo(line)
        migration = outcome.migration
        if migration is not None and migration.migration.state.value != "completed":
            sys.exit(1)
