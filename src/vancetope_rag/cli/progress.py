"""Progress on a terminal: the status lines of work in progress and ``reindex --rebuild
--wait``'s loop. The numbers are the store's (``RebuildService.progress``), the ones
``status --json`` and REST show."""

from __future__ import annotations

import sys
import time
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
    parts = [f"{work.rate:.1f} docs/s"] if work.rate else []
    if work.pending and work.eta_s is not None:
        parts.append(f"about {work.eta_s:.0f}s left")
    return f" ({', '.join(parts)})" if parts else ""


def progress_lines(progress: ProjectProgress | None) -> list[str]:
    """Human lines for status: the indexer's queue and the latest rebuild."""
    if progress is None:
        return []
    w = progress.indexing
    lines = [
        f"indexing: {w.done} of {w.total} done, {w.failed} failed, {w.pending} pending{_rate(w)}"
    ]
    if progress.migration is not None:
        m, work = progress.migration.migration, progress.migration.work
        lines.append(
            f"rebuild {m.id} ({m.from_model} -> {m.to_model}): {m.state.value}, {work.done} of "
            f"{work.total} done, {work.failed} failed{_rate(work)}"
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
    shown = 0
    pbar = click.progressbar(length=max(length, 1), label=label, file=sys.stderr) if bar else None
    while True:
        tick = scheduler.tick()
        progress = app.rebuilds.progress(tenant_id, project_id)
        current = progress.migration
        if current is None or current.migration.id != migration.id:
            break
        done = current.work.done + current.work.failed
        if pbar is not None:
            pbar.length = max(current.work.total, 1)
            pbar.update(max(0, done - shown))
        shown = max(shown, done)
        if not current.migration.state.active:
            break
        if tick.claimed == 0:  # waiting: a retry time, another worker, or search to catch up
            time.sleep(poll_s)
    if pbar is not None:
        pbar.render_finish()
    return progress
