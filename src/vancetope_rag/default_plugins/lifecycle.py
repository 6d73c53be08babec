"""Project lifecycle and document hooks → ProjectLifecycle / DocumentService."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vancetope_rag.errors import InvalidInputError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.services.documents import check_path, parse_override

if TYPE_CHECKING:
    from vancetope_rag.domain.records import Document
    from vancetope_rag.hookspecs import HostApp


@hookimpl
def project_bring(app: HostApp, tenant_id: str, project_id: str, home_node: str | None) -> None:
    app.lifecycle.bring(tenant_id, project_id, home_node=home_node)


@hookimpl
def project_suspend(app: HostApp, tenant_id: str, project_id: str) -> None:
    app.lifecycle.suspend(tenant_id, project_id)


@hookimpl
def project_close(app: HostApp, tenant_id: str, project_id: str) -> None:
    app.lifecycle.close(tenant_id, project_id)


@hookimpl
def document_saved(
    app: HostApp,
    tenant_id: str,
    project_id: str,
    path: str,
    content: str,
    mime_type: str | None,
    rag_enabled: str | None,
    metadata: Mapping[str, Any] | None,
) -> Document:
    if not isinstance(content, str):
        raise InvalidInputError("document content must be text")
    # Every argument is checked before anything is written: a bad override must not leave
    # a created document behind (the metadata is checked by the upsert, before it writes).
    override = None if rag_enabled is None else parse_override(rag_enabled)
    result = app.documents.upsert_by_path(
        tenant_id, project_id, path, content, mime_type=mime_type, metadata=metadata
    )
    doc = result.document
    if rag_enabled is not None and override != doc.rag_enabled:
        doc = app.documents.set_rag_enabled_override(tenant_id, project_id, doc.id, rag_enabled)
    return doc


@hookimpl
def summary_saved(
    app: HostApp, tenant_id: str, project_id: str, path: str, summary: str | None
) -> Document:
    return app.documents.set_summary_by_path(tenant_id, project_id, path, summary)


@hookimpl
def document_deleted(app: HostApp, tenant_id: str, project_id: str, path: str) -> None:
    doc = app.documents.get_by_path(tenant_id, project_id, check_path(path))
    if doc is not None:
        app.documents.delete(tenant_id, project_id, doc.id)
