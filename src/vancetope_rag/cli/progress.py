"""Progress on a terminal: the status lines of work in progress and ``reindex --rebuild
--wait``'s loop. The numbers are the store's (``RebuildService.progress``), the ones
``status --json`` and REST show."""

from __future__ import annotations

import contextlib
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

import click

from vancetope_rag.domain.rebuilds import Progress, ProjectProgress, Rebuild
from vancetope_rag.errors import RagError

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp


def on_terminal() -> bool:
    """Progress bars only for a person watching stderr (not for pipes, logs or JSON)."""
    return sys.stderr.isatty()


def _rate(work: Progress) -> str:
    """Rate and time left, only while the work runs: an ended or paused piece of work has no
    ETA (``Progress.eta_s`` is None then), a paused one says why."""
    if work.paused:
        return f" (paused: {work.paused})"
    parts = [f"{work.rate:.1f} docs/s"] if work.rate and work.eta_s is not None else []
    if work.eta_s is not None:
        parts.append(f"about {work.eta_s:.0f}s left")
    return f" ({', '.join(parts)})" if parts else ""


def counts_text(done: int, failed: int, waiting: int, skipped: int = 0) -> str:
    """Done, failed, skipped (when any: not eligible, nothing indexed) and waiting: separate
    numbers, never one sum called progress."""
    also = f"{skipped} skipped, " if skipped else ""
    return f"{done} done, {failed} failed, {also}{waiting} waiting"


def _work_text(work: Progress) -> str:
    """A piece of work's counts, then its rate and time left."""
    return counts_text(work.done, work.failed, work.pending, work.skipped) + _rate(work)


class WorkBar:
    """A progress bar on stderr whose position is the documents *done* (failed ones are not
    progress) and whose text gives done, failed and waiting, with the store's rate and ETA
    when there is one (click's own ETA, timed from bar updates, is not shown: it read
    "00:30:23" for a 20 s rebuild)."""

    def __init__(self, label: str, length: int) -> None:
        self._bar = click.progressbar(
            length=max(length, 1),
            label=label,
            file=sys.stderr,
            show_eta=False,
            show_percent=True,
            item_show_func=lambda text: text,
        )
        self._shown = 0

    def show(self, done: int, failed: int, waiting: int, rate: str = "", skipped: int = 0) -> None:
        """Move to ``done`` of all the documents, the counts beside the bar."""
        self._bar.length = max(done + failed + skipped + waiting, 1)
        self._bar.current_item = counts_text(done, failed, waiting, skipped) + rate
        # drawn even when nothing got done (``update(0)`` draws nothing): a failure, a
        # pause or the end of the ETA is news too
        self._bar.make_step(max(0, done - self._shown))
        self._bar.render_progress()
        self._shown = max(self._shown, done)

    def show_work(self, work: Progress) -> None:
        self.show(work.done, work.failed, work.pending, _rate(work), work.skipped)

    def __enter__(self) -> WorkBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.render_finish()  # an error line starts on a line of its own


def failed_documents(app: RagApp) -> int:
    """Documents failed for good in the projects this node indexes (what ``index`` runs)."""
    control = app.store.control
    return sum(
        control.document_state_counts(p.tenant_id, p.project_id).get("failed", 0)
        for p in control.projects_for_node(app.config.node_id)
    )


def progress_lines(progress: ProjectProgress | None) -> list[str]:
    """Human lines for status: the indexer's queue and the latest rebuild."""
    if progress is None:
        return []
    lines = [f"indexing: {_work_text(progress.indexing)}"]
    if progress.migration is not None:
        m, work = progress.migration.migration, progress.migration.work
        lines.append(
            f"rebuild {m.id} ({m.from_model} -> {m.to_model}): {m.state.value}, {_work_text(work)}"
        )
        if m.reason:
            lines.append(f"  {m.reason}")
    return lines


def wait_for_rebuild(
    app: RagApp,
    tenant_id: str,
    project_id: str,
    migration: Rebuild | None,
    *,
    bar: bool,
    poll_s: float = 0.5,
) -> ProjectProgress:
    """Run indexer ticks here until ``migration`` ends (without one: until nothing is left
    to index), with a progress bar on stderr when ``bar``."""
    scheduler = app.scheduler
    served = {
        (p.tenant_id, p.project_id) for p in app.store.control.projects_for_node(app.config.node_id)
    }
    if (tenant_id, project_id) not in served:
        raise RagError(
            f"project {project_id!r} is homed on another node; its worker does the "
            "rebuild there (status shows its progress)"
        )
    if migration is None:
        scheduler.run_until_idle()
        return app.rebuilds.progress(tenant_id, project_id)
    progress = app.rebuilds.progress(tenant_id, project_id)
    length = progress.migration.work.total if progress.migration else 0
    label = f"rebuild {migration.from_model} -> {migration.to_model}"
    with contextlib.ExitStack() as stack:
        pbar = stack.enter_context(WorkBar(label, length)) if bar else None
        while True:
            tick = scheduler.tick()
            progress = app.rebuilds.progress(tenant_id, project_id)
            current = progress.migration
            if current is None or current.migration.id != migration.id:
                break
            if pbar is not None:
                pbar.show_work(current.work)
            if not current.migration.state.active:
                break
            if tick.claimed == 0:  # waiting: a retry time, another worker, or search to catch up
                time.sleep(poll_s)
    return progress
