"""The ``rag_*`` agent tools (spec §9) and ``files_visualize`` (the multimodal bridge of the
second specification) as LlamaIndex ``FunctionTool``s bound to one project.

What the model is told about each tool (when to use it, every parameter) is in
:mod:`vancetope_rag.tools.schemas`.

Every tool runs inside the tenant and project it was built for: a RAG id from another tenant
or project is simply not found. Errors come back as a tool result (``{"error": …}``) flagged
``is_error``, never as an exception that would crash the agent's turn; arguments are checked
against the schema first (:mod:`vancetope_rag.tools.results`). Secrets are never part of a
result.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.tools import FunctionTool

from vancetope_rag.domain.block.citations import cite
from vancetope_rag.domain.eligibility import guess_mime_type
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, RagRecord
from vancetope_rag.errors import ExtractionError, InvalidInputError
from vancetope_rag.services.indexing.sources import (
    SourceText,
    manual_source_ref,
    section_parts,
)
from vancetope_rag.services.workspace import read_workspace_file
from vancetope_rag.tools.results import RagTool, tool_body
from vancetope_rag.tools.schemas import TOOL_SPECS

if TYPE_CHECKING:
    from vancetope_rag.hookspecs import HostApp

MAX_WORKSPACE_FILE_BYTES = 20 * 1024 * 1024
MAX_BULK_DOCUMENTS = 1000


def _rag_json(app: HostApp, rag: RagRecord) -> dict[str, Any]:
    return {
        "ragId": rag.id,
        "name": rag.name,
        "title": rag.title,
        "description": rag.description,
        "embeddingProvider": rag.embedding_provider,
        "embeddingModel": rag.embedding_model,
        "chunkSize": rag.chunk_size,
        "chunkOverlap": rag.chunk_overlap,
        "chunkCount": app.rags.chunk_count(rag),
        "createdAt": rag.created_at.isoformat() if rag.created_at else None,
    }


def _opt_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, got {value!r}")
    return value


class RagTools:
    """The tool functions, bound to one tenant and project."""

    def __init__(
        self, app: HostApp, tenant_id: str, project_id: str, workspace_root: Path | None
    ) -> None:
        self.app = app
        self.tenant_id = tenant_id
        self.project_id = project_id
        self.workspace_root = workspace_root

    def _rag(self, rag_id: str) -> RagRecord:
        return self.app.rags.get(self.tenant_id, self.project_id, rag_id)

    def rag_create(
        self,
        name: str,
        title: str | None = None,
        description: str | None = None,
        chunkSize: int | None = None,
        chunkOverlap: int | None = None,
    ) -> dict[str, Any]:
        """Create a new RAG (vector index) in this project. Names starting with '_' are
        reserved. chunkSize/chunkOverlap are in the embedding model's tokens."""
        rag = self.app.rags.create(
            self.tenant_id,
            self.project_id,
            name,
            title=title,
            description=description,
            chunk_size=_opt_int(chunkSize, "chunkSize"),
            chunk_overlap=_opt_int(chunkOverlap, "chunkOverlap"),
        )
        return _rag_json(self.app, rag)

    def rag_add_text(
        self,
        ragId: str,
        text: str,
        sourceRef: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Add a text to a RAG. sourceRef groups chunks (e.g. a URL or file name). Texts
        longer than the engine's limit are refused: split them."""
        rag = self._rag(ragId)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidInputError("metadata must be an object of string keys")
        ref = sourceRef
        if ref is None or (isinstance(ref, str) and not ref.strip()):
            ref = uuid.uuid4().hex  # the one the service would draw: the result shows it
        stats = self.app.rags.add_text(rag, ref, text, metadata)
        # In _documents the write is stored under its own manual: ref, never a document's.
        return {
            "ragId": rag.id,
            "sourceRef": manual_source_ref(rag, ref),
            "chunksAdded": stats.chunks,
        }

    def rag_add_workspace_file(
        self,
        ragId: str,
        path: str,
        sourceRef: str | None = None,
    ) -> dict[str, Any]:
        """Add a file from the project's workspace (a relative path inside it) to a RAG."""
        rag = self._rag(ragId)
        if self.workspace_root is None:
            raise InvalidInputError("this project has no workspace folder configured")
        rel, data = read_workspace_file(
            self.workspace_root, path, max_bytes=MAX_WORKSPACE_FILE_BYTES
        )
        extraction = self.app.extraction
        plan = extraction.plan(
            self.tenant_id, self.project_id, max_chars=self.app.config.max_text_chars
        )
        read = extraction.extract(data, path=rel, mime=guess_mime_type(rel), plan=plan)
        if read.text is None:
            raise read.error or ExtractionError(f"cannot extract text from {rel!r}")
        extracted = read.text
        ref = sourceRef or f"workspace:{rel}"
        parts = section_parts(extracted.section_texts(), rel)
        stats = self.app.rags.replace_source(rag, ref, parts)
        return {
            "ragId": rag.id,
            "sourceRef": manual_source_ref(rag, ref),
            "path": rel,
            "chunks": stats.chunks,
            "truncated": extracted.truncated,
            "truncatedReason": extracted.truncated_reason,
            "sections": len(extracted.sections),
        }

    def rag_add_document(self, ragId: str, documentId: str) -> dict[str, Any]:
        """Add one project document (by id) to a RAG; re-adding replaces its chunks."""
        rag = self._rag(ragId)
        doc = self.app.documents.get(self.tenant_id, self.project_id, documentId)
        if not doc.content.strip():
            raise InvalidInputError(f"document {doc.path!r} is empty")
        stats = self.app.rags.replace_source(rag, doc.id, [SourceText(doc.content, path=doc.path)])
        return {
            "ragId": rag.id,
            "documentId": doc.id,
            "sourceRef": manual_source_ref(rag, doc.id),
            "path": doc.path,
            "chunks": stats.chunks,
            "truncated": bool(stats.truncated),  # indexed up to the text limit
        }

    def rag_add_path(self, ragId: str, pathPrefix: str) -> dict[str, Any]:
        """Add every project document whose path starts with pathPrefix to a RAG."""
        rag = self._rag(ragId)
        if not isinstance(pathPrefix, str) or not pathPrefix.strip():
            raise InvalidInputError("pathPrefix is required, e.g. documents/notes/")
        docs = [
            d
            for d in self.app.documents.list_documents(
                self.tenant_id, self.project_id, path_prefix=pathPrefix
            )
            if d.content.strip()
        ]
        if len(docs) > MAX_BULK_DOCUMENTS:
            raise InvalidInputError(
                f"{len(docs)} documents match; narrow pathPrefix (at most {MAX_BULK_DOCUMENTS})"
            )
        sources = {d.id: [SourceText(d.content, path=d.path)] for d in docs}
        stats = self.app.rags.replace_sources(rag, sources)
        return {
            "ragId": rag.id,
            "documentsAdded": len(docs),
            "chunks": stats.chunks,
            "documentsTruncated": stats.truncated,
        }

    def rag_query(
        self, ragId: str, query: str, topK: int | None = None, relevanceCut: str | None = None
    ) -> dict[str, Any]:
        """Search a RAG; returns the best-matching excerpts with source labels and scores.
        topK omitted: the project's rag.topK (as minScore and maxPerDocument always are);
        relevanceCut omitted: no cut (topK excerpts when that many pass minScore)."""
        rag = self._rag(ragId)
        top_k = _opt_int(topK, "topK")
        # Hits as they may be cited now; the same label rule and numbering as the block.
        retriever = self.app.as_retriever(self.tenant_id, self.project_id, rag=rag.name)
        hits = retriever.query_rag(  # None: the cascade's
            rag, query, top_k=top_k, relevance_cut=relevanceCut
        )
        out = [c.to_json() for c in cite(hits, project_rag=rag.name == DEFAULT_RAG_NAME)]
        return {"ragId": rag.id, "hits": out}

    def rag_delete(self, ragId: str) -> dict[str, Any]:
        """Delete a RAG and all its chunks. System RAGs ('_' names) cannot be deleted."""
        rag = self._rag(ragId)
        removed = self.app.rags.delete(self.tenant_id, self.project_id, rag.id)
        return {"deleted": rag.id, "name": rag.name, "chunksRemoved": removed}

    def files_visualize(
        self,
        filePath: str | None = None,
        documentId: str | None = None,
        offset: int | None = None,
        pages: str | None = None,
        vision: bool | None = None,
    ) -> dict[str, Any]:
        """A bounded, text-first reading of one workspace file or project document
        (:class:`~vancetope_rag.services.bridge.BridgeService`)."""
        bridge = self.app.bridge
        request = bridge.request(offset, pages, vision)
        if (filePath is None) == (documentId is None):
            raise InvalidInputError(
                "files_visualize takes one of filePath (a workspace file) or documentId "
                "(a project document)"
            )
        if documentId is not None:
            return bridge.read_document(self.tenant_id, self.project_id, documentId, request)
        if self.workspace_root is None:
            raise InvalidInputError("this project has no workspace folder configured")
        assert filePath is not None
        return bridge.read_file(
            self.tenant_id, self.project_id, self.workspace_root, filePath, request
        )

    def rag_list(self, projectId: str | None = None) -> dict[str, Any]:
        """List the RAGs of this project, the default '_documents' RAG included."""
        if projectId not in (None, "", self.project_id):
            raise InvalidInputError("tools only see the current project's RAGs")
        rags = self.app.rags.list_rags(self.tenant_id, self.project_id)
        return {"projectId": self.project_id, "rags": [_rag_json(self.app, r) for r in rags]}


TOOL_NAMES = (
    "rag_create",
    "rag_add_text",
    "rag_add_workspace_file",
    "rag_add_document",
    "rag_add_path",
    "rag_query",
    "rag_delete",
    "rag_list",
    "files_visualize",
)


def build_tools(
    app: HostApp, tenant_id: str, project_id: str, *, workspace_root: Path | None = None
) -> list[FunctionTool]:
    """The ``rag_*`` and ``files_visualize`` FunctionTools bound to this tenant and project."""
    bound = RagTools(app, tenant_id, project_id, workspace_root)
    tools: list[FunctionTool] = []
    for name in TOOL_NAMES:
        schema, description = TOOL_SPECS[name]
        tools.append(
            RagTool.from_defaults(
                fn=tool_body(getattr(bound, name), schema),
                name=name,
                description=description,
                fn_schema=schema,
            )
        )
    return tools
